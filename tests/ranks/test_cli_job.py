"""The CLI plans a model a user wrote and traced on one rank, for 8 devices."""

import json
import subprocess
import sys

import pytest


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "oneflow_autoddl", *args], capture_output=True, text=True
    )


@pytest.mark.ranks
def test_a_users_own_model_traced_on_one_rank_plans_for_8_devices(ranks, tmp_path):
    path = str(tmp_path / "cnn.job")
    ranks("tests.ranks.rank_examples:trace_cnn", 1, path=path)
    out = cli(
        "plan",
        "--job",
        path,
        "--mesh",
        "8",
        "--cluster",
        "dgx-a100",
        "--json",
        str(tmp_path / "p.json"),
    )
    assert out.returncode == 0, out.stderr
    plan = json.loads((tmp_path / "p.json").read_text())
    assert plan["mesh"] == "8"
    assert "tanh" in json.dumps(plan["unplanned_ops"]) or any(
        e["type"] == "tanh" for e in plan["ops"].values()
    )
