"""The README's multi-node launch, on 2 emulated nodes (benchmarks.netcluster): AutoDDL with the
emulated cluster's two-level calibration trains the GPT example as data parallel does, a cluster
that knows one node is refused naming both figures, and nothing of ours is left after."""

import json
import subprocess

import numpy as np
import pytest

from benchmarks import netcluster
from oneflow_autoddl.launch import RankFailure
from tests.ranks.test_examples import TINY

CLUSTER = "emulated-2x2-200mbit"
pytestmark = [
    pytest.mark.ranks,
    pytest.mark.skipif(netcluster.unavailable() is not None, reason=str(netcluster.unavailable())),
]


def _train(net, plan, out, cluster=CLUSTER):
    flags = ["--mesh", "2x2", "--steps", "3", "--quiet", "--plan", plan, "--cluster", cluster]
    netcluster.launch(net, 2, ["examples/gpt.py", *TINY["gpt"], *flags, "--json", out], 600)
    with open(out) as f:
        return json.load(f)


def test_autoddl_across_two_emulated_nodes_trains_as_data_parallel_does(tmp_path):
    with netcluster.emulated(2, "200mbit") as net:
        ours = _train(net, "autoddl", str(tmp_path / "autoddl.json"))
        dp = _train(net, "dp", str(tmp_path / "dp.json"))
        with pytest.raises(RankFailure, match=r"2 node\(s\) x 2 ranks.*'cpu-local' describes 1"):
            _train(net, "autoddl", str(tmp_path / "refused.json"), cluster="cpu-local")
    np.testing.assert_allclose(ours["losses"], dp["losses"], rtol=1e-4)
    plan = ours["plan"]
    assert plan["cluster"] == CLUSTER and plan["mesh"] == "2x2"
    predicted = plan["predicted"]
    assert 0 < predicted["inter_node_bytes_per_device"] < predicted["bytes_per_device"]
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in left for ns in net.namespaces), left
