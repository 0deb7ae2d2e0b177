"""compare_plans' ordering check: plans of one program rank as one, pairs only where blocks separate."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))


def row(plan, program, predicted, blocks):
    return {"model": "vgg", "mesh": "4", "plan": plan, "program": program, "predicted_step_s": predicted,
            "measured_step_s": sum(blocks) / len(blocks), "block_step_s": blocks}


def test_identical_programs_rank_as_one_and_only_separated_pairs_count():
    from compare_plans import order_kept
    rows = [row("dp", "a", 0.30, [0.39, 0.41]), row("megatron", "b", 0.28, [0.34, 0.36]),
            row("native", "c", 0.285, [0.29, 0.31]), row("autoddl", "b", 0.28, [0.32, 0.335])]
    (order,) = order_kept(rows)
    assert order["predicted order"] == "megatron = autoddl < native < dp"
    assert order["measured order"] == "native < megatron = autoddl < dp"
    assert order["programs"] == 3 and not order["same"]
    assert order["separated pairs"] == 3 and order["predicted alike"] == 2
    assert order["mispredicted"] == "native < megatron = autoddl"


def test_overlapping_blocks_are_no_pair():
    from compare_plans import order_kept
    (order,) = order_kept([row("dp", "a", 0.30, [0.30, 0.36]), row("autoddl", "b", 0.28, [0.31, 0.33])])
    assert order["separated pairs"] == 0 and order["mispredicted"] == "-"
