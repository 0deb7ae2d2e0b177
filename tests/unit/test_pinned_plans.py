"""The examples' plans are pinned: a change to the planner that changes one must say so.

The examples' GPT and VGG at their default sizes (as the template builders make their CPU
graphs) and at compare_plans' sizes, on meshes 2, 4 and 2 x 2 of cpu-local. A plan that changes
on purpose (a better search, a new calibration) is re-pinned with

    python -m tests.unit.test_pinned_plans --update

and the commit says how its predicted step time and bytes moved (printed by --update).
"""

import json
import os
import sys

import pytest

from oneflow_autoddl.planner import plan
from tests.graphs import MESHES, MODELS

PINNED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pinned_plans.json")
CASES = [f"{m}@{mesh}" for m in MODELS for mesh in MESHES]


def current(case: str) -> dict:
    """The plan of `case` ("model@mesh") this checkout makes, in one process."""
    model, mesh = case.split("@")
    p = plan(MODELS[model](MESHES[mesh]), "cpu-local")
    return {
        "digest": p.digest(),
        "step_ms": round(p.predicted.step_time_s * 1e3, 4),
        "MiB": round(p.predicted.bytes_per_device / 2**20, 4),
    }


@pytest.mark.parametrize("case", CASES)
def test_the_plan_is_the_pinned_one(case):
    with open(PINNED) as f:
        pinned = json.load(f)[case]
    now = current(case)
    assert now["digest"] == pinned["digest"], (
        f"{case}: the plan changed (predicted {pinned['step_ms']} -> {now['step_ms']} ms, "
        f"{pinned['MiB']} -> {now['MiB']} MiB sent per device); if on purpose, re-pin with "
        f"`python -m tests.unit.test_pinned_plans --update`"
    )


def update() -> None:
    old = {}
    if os.path.exists(PINNED):
        with open(PINNED) as f:
            old = json.load(f)
    new = {case: current(case) for case in CASES}
    for case, now in new.items():
        was = old.get(case)
        if was is None or was["digest"] != now["digest"]:
            before = f"{was['step_ms']} ms, {was['MiB']} MiB" if was else "new"
            print(f"{case}: {before} -> {now['step_ms']} ms, {now['MiB']} MiB")
    with open(PINNED, "w") as f:
        json.dump(new, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__" and "--update" in sys.argv:
    update()
