"""Op rules against OneFlow 0.9.0's GetSbp lists, and the n-D candidates built from them."""

import pytest

from oneflow_autoddl.rules import (
    candidates,
    contraction_of,
    get_rule,
    has_rule,
    one_d_candidates,
    registry,
    same_sbp_inputs,
)
from oneflow_autoddl.rules.shape import reshape_split_pairs
from oneflow_autoddl.sbp import S
from tests.irkit import Kit


def _one_d(kit, name, h=2):
    g = kit.graph()
    return [{bn: str(s) for bn, s in sig.items()} for sig in one_d_candidates(g, g.op(name), h)]


def test_matmul_lists_oneflow_order_with_all_b_last():
    kit = Kit()
    a, b = kit.input("a", (64, 256)), kit.variable("w", (256, 1024))
    kit.op(
        "mm",
        "matmul",
        {"a_0": a, "b_0": b},
        {"out_0": (64, 1024)},
        transpose_a=False,
        transpose_b=False,
    )
    assert _one_d(kit, "mm") == [
        {"a_0": "S(0)", "b_0": "B", "out_0": "S(0)"},
        {"a_0": "B", "b_0": "S(1)", "out_0": "S(1)"},
        {"a_0": "S(1)", "b_0": "S(0)", "out_0": "P"},
        {"a_0": "P", "b_0": "B", "out_0": "P"},
        {"a_0": "B", "b_0": "P", "out_0": "P"},
        {"a_0": "B", "b_0": "B", "out_0": "B"},
    ]


def test_matmul_transpose_flags_move_the_axes():
    kit = Kit()
    a, b = kit.input("a", (256, 64)), kit.variable("w", (1024, 256))
    kit.op(
        "mm",
        "matmul",
        {"a_0": a, "b_0": b},
        {"out_0": (64, 1024)},
        transpose_a=True,
        transpose_b=True,
    )
    sigs = _one_d(kit, "mm")
    assert sigs[0] == {"a_0": "S(1)", "b_0": "B", "out_0": "S(0)"}
    assert sigs[1] == {"a_0": "B", "b_0": "S(0)", "out_0": "S(1)"}
    assert sigs[2] == {"a_0": "S(0)", "b_0": "S(1)", "out_0": "P"}


def test_bias_add_broadcasts_the_bias_as_measured():
    """Verified on OneFlow ranks (notes 5): x [64,1024] S(1), y [1024] S(0), z S(1)."""
    kit = Kit()
    x, y = kit.input("x", (64, 1024)), kit.variable("b", (1024,))
    kit.op("add", "broadcast_add", {"x_0": x, "y_0": y}, {"z_0": (64, 1024)})
    assert {"x_0": "S(1)", "y_0": "S(0)", "z_0": "S(1)"} in _one_d(kit, "add")
    assert {"x_0": "S(0)", "y_0": "B", "z_0": "S(0)"} in _one_d(kit, "add")
    assert {"x_0": "P", "y_0": "P", "z_0": "P"} in _one_d(kit, "add")


def test_softmax_never_splits_its_axis():
    kit = Kit()
    x = kit.input("x", (8, 4, 16, 16))
    kit.op("sm", "softmax", {"in_0": x}, {"out_0": (8, 4, 16, 16)})
    assert [s["in_0"] for s in _one_d(kit, "sm")] == ["S(0)", "S(1)", "S(2)", "B"]


def test_reshape_pairs_follow_the_hierarchy_value():
    assert reshape_split_pairs((8, 16, 64), (8, 16, 4, 16), 2) == [(0, 0), (1, 1), (2, 2)]
    assert reshape_split_pairs((8, 16, 64), (8, 16, 4, 16), 8) == [(0, 0), (1, 1)]
    assert reshape_split_pairs((8, 3, 4, 4), (8, 48), 2) == [(0, 0)]
    assert reshape_split_pairs((8, 4, 4, 4), (8, 64), 2) == [(0, 0), (1, 1)]


def test_gather_splits_the_table_into_partial_sums():
    kit = Kit()
    table, ids = kit.variable("wte", (100, 32)), kit.input("ids", (8, 16), dtype="int64")
    kit.op("g", "gather", {"in_0": table, "indices_0": ids}, {"out_0": (8, 16, 32)}, axis=0)
    sigs = _one_d(kit, "g")
    assert {"indices_0": "S(0)", "in_0": "B", "out_0": "S(0)"} in sigs
    assert {"indices_0": "B", "in_0": "S(0)", "out_0": "P"} in sigs
    assert {"indices_0": "B", "in_0": "S(1)", "out_0": "S(2)"} in sigs


def test_n_d_candidates_are_the_filtered_product():
    kit = Kit(mesh=(2, 4))
    x = kit.input("x", (8, 6), sbp=(S(0), S(0)))
    kit.op("r", "relu", {"x_0": x}, {"y_0": (8, 6)})
    g = kit.graph()
    sigs = candidates(g, g.op("r"))
    # per axis: S(0), S(1), B; S(1) on the 4-axis does not divide 6, S(0) then S(0) leaves 4 / 4 =
    # 1.
    assert all(s["x_0"] == s["y_0"] for s in sigs)
    assert {(str(s["x_0"][0]), str(s["x_0"][1])) for s in sigs} == {
        ("S(0)", "S(0)"),
        ("S(0)", "B"),
        ("S(1)", "S(0)"),
        ("S(1)", "B"),
        ("B", "S(0)"),
        ("B", "B"),
    }


def test_n_d_candidates_drop_later_twins_with_the_same_inputs():
    """n-D inference picks the first candidate matching a conf's inputs; twins would be silently
    replaced."""
    kit = Kit(mesh=(2, 2))
    x = kit.input("x", (8, 8, 8))
    kit.op(
        "rs",
        "reduce_sum",
        {"input_tensor_0": x},
        {"output_tensor_0": (8, 8, 1)},
        axis=[2],
        keepdims=True,
    )
    g = kit.graph()
    sigs = candidates(g, g.op("rs"))
    inputs = [s["input_tensor_0"] for s in sigs]
    assert len(inputs) == len(set(inputs))


def test_ops_alike_share_candidates_and_any_difference_a_rule_reads_parts_them():
    """candidates() finds an op structure's signatures once per graph; ops that differ in an
    attribute or a shape get their own, as if found afresh."""
    kit = Kit()
    a, w = kit.input("a", (64, 256)), kit.variable("w", (256, 256))
    plain = {"transpose_a": False, "transpose_b": False}
    for name, flags in (("mm0", plain), ("mm1", plain), ("mmt", dict(plain, transpose_b=True))):
        kit.op(name, "matmul", {"a_0": a, "b_0": w}, {"out_0": (64, 256)}, **flags)
    row = kit.input("row", (1, 256))
    kit.op("mmr", "matmul", {"a_0": row, "b_0": w}, {"out_0": (1, 256)}, **plain)
    g = kit.graph()
    fresh = {name: registry._candidates(g, g.op(name), (2,)) for name in ("mm0", "mmt", "mmr")}
    assert candidates(g, g.op("mm0")) == candidates(g, g.op("mm1")) == fresh["mm0"]
    assert candidates(g, g.op("mmt")) == fresh["mmt"] != fresh["mm0"]  # b split the other way
    assert candidates(g, g.op("mmr")) == fresh["mmr"] != fresh["mm0"]  # 1 row does not split


def test_optimizer_state_and_like_inputs_keep_their_producer_sbp():
    assert get_rule("adam_update").same_sbp == ("model_0", "m_0", "v_0", "max_v_0", "model_copy_0")
    kit = Kit()
    loss = kit.input("loss", ())
    kit.op("ones", "ones_like", {"like_0": loss}, {"out_0": ()})
    g = kit.graph()
    assert same_sbp_inputs(g.op("ones")) == ("like_0",)
    assert {"like_0": "P", "out_0": "B"} in _one_d(kit, "ones")


def test_conv_splits_only_the_batch():
    kit = Kit()
    x, w = kit.input("x", (8, 3, 32, 32)), kit.variable("w", (16, 3, 3, 3))
    kit.op(
        "c", "conv2d", {"in_0": x, "weight_0": w}, {"out_0": (8, 16, 32, 32)}, kernel_size=[3, 3]
    )
    assert _one_d(kit, "c") == [
        {"in_0": "S(0)", "weight_0": "B", "out_0": "S(0)"},
        {"in_0": "B", "weight_0": "B", "out_0": "B"},
    ]


def test_unknown_types_have_no_rule():
    assert not has_rule("my_custom_op")
    with pytest.raises(KeyError):
        get_rule("my_custom_op")


@pytest.mark.parametrize(
    "a,b,flags,expect",
    [
        ((8, 16), (16, 4), {}, (1, 8, 16, 4, (0, 1), (0, 1))),
        ((8, 16), (4, 16), {"transpose_b": True}, (1, 8, 16, 4, (0, 1), (1, 0))),
        ((2, 8, 16), (16, 4), {}, (1, 16, 16, 4, None, (0, 1))),
        ((3, 8, 16), (3, 16, 4), {}, (3, 8, 16, 4, (1, 2), (1, 2))),
    ],
)
def test_a_matrix_product_declares_what_it_contracts(a, b, flags, expect):
    kit = Kit()
    x, w = kit.input("x", a), kit.input("w", b)
    out = (*a[:-1], expect[3])
    kind = "matmul" if len(a) == 2 else ("broadcast_matmul" if len(b) == 2 else "batch_matmul")
    kit.op("m-mm-0", kind, {"a_0": x, "b_0": w}, {"out_0": out}, **flags)
    g = kit.graph()
    c = contraction_of(g, g.op("m-mm-0"))
    assert (c.batch, c.m, c.k, c.n, c.a_axes, c.b_axes) == expect


def test_an_update_declares_its_parameter_gradient_and_state():
    for kind in ("sgd_update", "momentum_update", "adam_update"):
        r = get_rule(kind)
        assert r.update.model == "model_0" and r.update.grad == "model_diff_0"
        assert r.optimizer and set(r.same_sbp) == set(r.update.mutable)
    assert get_rule("adam_bias_correction_factor").optimizer
    assert not get_rule("matmul").optimizer
