"""The GPT and VGG examples run end to end on 2 ranks, launched as a user launches them, and write
the JSON README describes."""

import json

import numpy as np
import pytest

from oneflow_autoddl.launch import run_script

TINY = {
    "gpt": [
        "--layers",
        "2",
        "--hidden",
        "32",
        "--heads",
        "4",
        "--seq-len",
        "8",
        "--vocab",
        "64",
        "--batch-size",
        "4",
    ],
    "vgg": ["--depth", "11", "--width-mult", "0.125", "--image-size", "32", "--batch-size", "4"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("examples")
    for name, argv in TINY.items():
        flags = ["--steps", "3", "--quiet", "--json", str(d / f"{name}.json")]
        run_script([f"examples/{name}.py", *argv, *flags], 2, timeout=600)
    return {name: json.loads((d / f"{name}.json").read_text()) for name in TINY}


@pytest.mark.ranks
@pytest.mark.parametrize("name", list(TINY))
def test_example_json(runs, name):
    out = runs[name]
    assert len(out["losses"]) == 3 and len(out["step_times_s"]) == 3
    plan = out["plan"]
    for key in (
        "mesh",
        "cluster",
        "ops",
        "variables",
        "unplanned_ops",
        "predicted",
        "baselines",
        "search_time_s",
    ):
        assert key in plan, key
    assert plan["mesh"] == "2" and plan["cluster"] == "cpu-local"
    for key in ("step_time_s", "bytes_per_device", "memory_per_device"):
        assert plan["predicted"][key] > 0 and plan["baselines"]["data_parallel"][key] > 0
    assert all(set(e) >= {"type", "signature"} for e in plan["ops"].values())
    weights = [n for n in plan["variables"] if n.endswith(".weight")]
    assert weights and all(plan["variables"][n] for n in weights)


@pytest.mark.ranks
def test_under_a_memory_limit_the_gpt_example_trains_with_recomputation(tmp_path):
    """examples/gpt.py on 2 CPU ranks planned for dgx-a100 (whose devices reuse memory; CPU ranks'
    do not, so a plan for cpu-local never recomputes) with 80 MiB a device, under the 132 MiB its
    fastest plan holds: the plan recomputes some of the 4 blocks (the first 2 on 2026-12-07),
    fits, and trains with data parallel's losses."""
    gpt = ["--layers", "4", "--hidden", "128", "--heads", "4", "--seq-len", "256", "--vocab", "64"]
    common = [*gpt, "--batch-size", "16", "--steps", "3", "--mesh", "2", "--quiet"]
    limited, dp = tmp_path / "limited.json", tmp_path / "dp.json"
    flags = ["--cluster", "dgx-a100", "--memory-per-device", "80MiB", "--no-plan-cache"]
    run_script(["examples/gpt.py", *common, *flags, "--json", str(limited)], 2, timeout=600)
    run_script(["examples/gpt.py", *common, "--plan", "dp", "--json", str(dp)], 2, timeout=600)
    out, base = json.loads(limited.read_text()), json.loads(dp.read_text())
    assert out["plan"]["recompute"][:1] == ["model.h.0"]
    assert out["plan"]["predicted"]["peak_memory_per_device"] <= 80 * 2**20
    np.testing.assert_allclose(out["losses"], base["losses"], rtol=1e-4)
