"""`calibrate` on real ranks writes a cluster file the planner loads, with every figure measured."""

import json
import subprocess
import sys

import pytest

from oneflow_autoddl.cost.cluster import COLLECTIVES, KERNEL_KINDS, load_cluster


@pytest.mark.ranks
@pytest.mark.timing
def test_calibrate_writes_a_cluster_file_with_every_collective(tmp_path):
    out = tmp_path / "cpu.json"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "oneflow_autoddl",
            "calibrate",
            "--nproc",
            "2",
            "--out",
            str(out),
            "--repeats",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    cluster = load_cluster(str(out))
    assert cluster.backend == "oneflow-cpu" and cluster.devices == 2
    assert cluster.nodes == 1 and cluster.cores_per_node >= 1 and cluster.name == "cpu"
    assert set(cluster.kernel_bandwidth) == set(KERNEL_KINDS)
    assert {kind for kind, _, _ in cluster.intra.collectives} == set(COLLECTIVES)
    assert all(
        bandwidth > 1e6 for _, bandwidth, _ in cluster.intra.collectives
    )  # MB/s at least, on any machine
    assert 0.0 <= cluster.comm_overlap <= 1.0 and 0 < cluster.op_overhead < 0.1
    assert "--repeats 5" in json.loads(out.read_text())["source"]
