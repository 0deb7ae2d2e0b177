"""The rules of the model zoo's op types where they are more than a transcription of GetSbp:
signatures left out because they change the math, attribute-driven axes, units of mutable
inputs."""

from oneflow_autoddl.rules import candidates, get_rule, one_d_candidates
from oneflow_autoddl.sbp import B, S
from oneflow_autoddl.search.units import build_units, fill_candidates
from tests.irkit import Kit


def _one_d(kit, name, h=2):
    g = kit.graph()
    return [{bn: str(s) for bn, s in sig.items()} for sig in one_d_candidates(g, g.op(name), h)]


def _batch_norm(kit, x, training=True):
    c = kit.shape(x)[1]
    ins = {"x_0": x}
    for bn in ("moving_mean", "moving_variance", "gamma", "beta"):
        ins[f"{bn}_0"] = kit.variable(f"bn.{bn}", (c,))
    return kit.op(
        "bn",
        "normalization",
        ins,
        {"y_0": kit.shape(x), "mean_0": (c,), "inv_variance_0": (c,)},
        axis=1,
        training=training,
    )


def test_training_batch_norm_splits_the_batch_on_every_mesh_axis():
    """Replicated, it would normalise by the whole batch's statistics, not each shard's."""
    kit = Kit(mesh=(2, 2))
    _batch_norm(kit, kit.input("x", (8, 4, 6, 6)))
    g = kit.graph()
    sigs = candidates(g, g.op("bn"))
    assert [(sig["x_0"], sig["gamma_0"]) for sig in sigs] == [((S(0), S(0)), (B, B))]


def test_inference_batch_norm_may_be_replicated():
    kit = Kit()
    _batch_norm(kit, kit.input("x", (8, 4, 6, 6)), training=False)
    assert [s["x_0"] for s in _one_d(kit, "bn")] == ["S(0)", "B"]


def test_batch_norm_running_statistics_join_its_unit():
    """Its training kernel updates moving_mean and moving_variance in place: their variables must
    hold the op's SBP, as an optimizer's state does."""
    kit = Kit()
    _batch_norm(kit, kit.input("x", (8, 4, 6, 6)))
    g = kit.graph()
    units = {u.name: u for u in build_units(g)}
    assert units["bn"].ops == ("bn", "bn.moving_mean", "bn.moving_variance")
    fill_candidates(g, units["bn"], kit.place, {})
    assert [str(joint[1]["out"][0]) for joint in units["bn"].candidates] == ["B"]
    assert get_rule("normalization").same_sbp == ("moving_mean_0", "moving_variance_0")


def test_batch_norm_grad_is_never_replicated():
    kit = Kit()
    x, dy = kit.input("x", (8, 4, 6, 6)), kit.input("dy", (8, 4, 6, 6))
    stats = {bn: kit.variable(bn, (4,)) for bn in ("mean", "inv_variance", "gamma")}
    kit.op(
        "bng",
        "normalization_grad",
        {"x_0": x, "dy_0": dy, **{f"{k}_0": v for k, v in stats.items()}},
        {"dx_0": (8, 4, 6, 6), "gamma_diff_0": (4,), "beta_diff_0": (4,)},
        axis=1,
    )
    assert _one_d(kit, "bng") == [
        {
            "x_0": "S(0)",
            "dy_0": "S(0)",
            "mean_0": "B",
            "inv_variance_0": "B",
            "gamma_0": "B",
            "dx_0": "S(0)",
            "gamma_diff_0": "P",
            "beta_diff_0": "P",
        }
    ]


def test_cast_sums_only_into_floats():
    """cast(0.6) + cast(0.6) = 0 as integers, cast(1.2) = 1: no partial sums into ints."""
    kit = Kit()
    x = kit.input("x", (8, 6))
    kit._add("to_int", "cast", {"in_0": x}, {"out_0": (8, 6)}, {"dtype": 9}, dtype="int64")
    kit._add("to_half", "cast", {"in_0": x}, {"out_0": (8, 6)}, {"dtype": 9}, dtype="float16")
    assert [s["in_0"] for s in _one_d(kit, "to_int")] == ["S(0)", "S(1)", "B"]
    assert [s["in_0"] for s in _one_d(kit, "to_half")] == ["S(0)", "S(1)", "P", "B"]


def test_scatter_nd_like_never_calls_a_local_scatter_broadcast():
    """Indices and updates split on their leading axis would leave each device with its own
    rows only, under an out labelled B."""
    kit = Kit()
    like, idx = kit.input("like", (16, 6)), kit.input("idx", (8, 1), dtype="int64")
    upd = kit.input("upd", (8, 6))
    kit.op(
        "sc",
        "scatter_nd_like",
        {"like_0": like, "indices_0": idx, "updates_0": upd},
        {"out_0": (16, 6)},
    )
    sigs = _one_d(kit, "sc")
    assert {"like_0": "S(1)", "indices_0": "B", "updates_0": "S(1)", "out_0": "S(1)"} in sigs
    assert all(s["out_0"] != "B" or s["updates_0"] == "B" for s in sigs)


def test_gather_nd_splits_indices_rows_or_sliced_params_axes():
    kit = Kit()
    params, idx = kit.input("params", (16, 6)), kit.input("idx", (8, 1), dtype="int64")
    kit.op("g", "gather_nd", {"params_0": params, "indices_0": idx}, {"out_0": (8, 6)})
    assert _one_d(kit, "g") == [
        {"params_0": "B", "indices_0": "S(0)", "out_0": "S(0)"},
        {"params_0": "S(1)", "indices_0": "B", "out_0": "S(1)"},
        {"params_0": "P", "indices_0": "B", "out_0": "P"},
        {"params_0": "B", "indices_0": "B", "out_0": "B"},
    ]


def test_roll_never_splits_a_rolled_axis_however_it_is_named():
    kit = Kit()
    x = kit.input("x", (8, 6, 6, 4))
    kit.op("r", "roll", {"in_0": x}, {"out_0": (8, 6, 6, 4)}, shifts=[1, 1], dims=[1, -2])
    kit.op("flat", "roll", {"in_0": x}, {"out_0": (8, 6, 6, 4)}, shifts=[1], dims=[-1])
    assert [s["in_0"] for s in _one_d(kit, "r")] == ["S(0)", "S(3)", "P", "B"]
    assert [s["in_0"] for s in _one_d(kit, "flat")] == ["P", "B"]


def test_slice_of_a_split_axis_is_a_partial_sum():
    kit = Kit()
    x = kit.input("x", (8, 6))
    kit.op("s", "slice", {"x_0": x}, {"y_0": (8, 3)}, start=[0, 0], stop=[8, 3], step=[1, 1])
    assert _one_d(kit, "s") == [
        {"x_0": "S(0)", "y_0": "S(0)"},
        {"x_0": "S(1)", "y_0": "P"},
        {"x_0": "P", "y_0": "P"},
        {"x_0": "B", "y_0": "B"},
    ]


def _slice_update(kit):
    ref, value = kit.input("ref", (8, 6)), kit.input("value", (8, 3))
    kit.op(
        "u",
        "slice_update",
        {"ref_0": ref, "value_0": value},
        {"y_0": (8, 6)},
        start=[0, 0],
        stop=[8, 3],
        step=[1, 1],
    )


def test_slice_update_writes_a_whole_value_into_any_split_of_ref():
    kit = Kit()
    _slice_update(kit)
    assert _one_d(kit, "u") == [
        {"ref_0": "S(0)", "value_0": "B", "y_0": "S(0)"},
        {"ref_0": "S(0)", "value_0": "S(0)", "y_0": "S(0)"},
        {"ref_0": "S(1)", "value_0": "B", "y_0": "S(1)"},
        {"ref_0": "P", "value_0": "P", "y_0": "P"},
        {"ref_0": "B", "value_0": "B", "y_0": "B"},
    ]


def test_slice_update_never_splits_an_axis_both_with_and_without_value():
    """Its kernel cuts the region at the wrong offsets where one mesh axis splits ref and value
    alike and another splits ref alone along the same tensor axis (seen on 2 x 2 ranks)."""
    kit = Kit(mesh=(2, 2))
    _slice_update(kit)
    g = kit.graph()
    pairs = {(sig["ref_0"], sig["value_0"]) for sig in candidates(g, g.op("u"))}
    assert ((S(0), S(0)), (B, B)) in pairs and ((S(0), S(0)), (S(0), S(0))) in pairs
    assert ((S(0), S(0)), (S(0), B)) not in pairs and ((S(0), S(0)), (B, S(0))) not in pairs
    assert ((S(0), S(1)), (S(0), B)) in pairs


def test_upsampling_splits_the_batch_only():
    kit = Kit()
    x = kit.input("x", (4, 8, 6, 6))
    kit.op("up", "upsample_bilinear_2d", {"x_0": x}, {"y_0": (4, 8, 12, 12)}, output_size=[12, 12])
    assert _one_d(kit, "up") == [{"x_0": "S(0)", "y_0": "S(0)"}, {"x_0": "B", "y_0": "B"}]


def test_constants_keep_their_attribute_sbp():
    assert get_rule("constant").fixed


def test_split_like_reads_likes_for_their_shape_only():
    kit = Kit()
    x = kit.input("x", (8, 6))
    a, b = kit.input("a", (8, 2)), kit.input("b", (8, 4))
    kit.op(
        "sl",
        "split_like",
        {"in_0": x, "like_0": a, "like_1": b},
        {"out_0": (8, 2), "out_1": (8, 4)},
        axis=1,
    )
    sigs = _one_d(kit, "sl")
    assert sigs[0] == {bn: "S(0)" for bn in sigs[0]}
    assert {"in_0": "B", "like_0": "P", "like_1": "P", "out_0": "B", "out_1": "B"} in sigs
    assert all(s["in_0"] != "S(1)" for s in sigs)


def test_reshape_like_splits_like_with_the_output():
    kit = Kit()
    x, like = kit.input("x", (2, 4, 6)), kit.input("like", (8, 6))
    kit.op("rl", "reshape_like", {"in_0": x, "like_0": like}, {"out_0": (8, 6)})
    sigs = _one_d(kit, "rl")
    assert sigs[:2] == [
        {"in_0": "B", "like_0": "P", "out_0": "B"},
        {"in_0": "P", "like_0": "B", "out_0": "P"},
    ]
    assert {"in_0": "S(0)", "like_0": "S(0)", "out_0": "S(0)"} in sigs
    assert {"in_0": "S(2)", "like_0": "S(1)", "out_0": "S(1)"} in sigs


def test_expand_dims_moves_splits_past_the_new_axis():
    kit = Kit()
    x = kit.input("x", (8, 6))
    kit.op("e", "expand_dims", {"in_0": x}, {"out_0": (8, 6, 1)}, axis=-1)
    kit.op("m", "expand_dims", {"in_0": x}, {"out_0": (8, 1, 6)}, axis=1)
    assert [s["out_0"] for s in _one_d(kit, "e")] == ["S(0)", "S(1)", "P", "B"]
    assert [s["out_0"] for s in _one_d(kit, "m")] == ["S(0)", "S(2)", "P", "B"]


def test_expand_keeps_splits_of_axes_it_does_not_expand():
    kit = Kit()
    x = kit.input("x", (1, 6))
    kit.op("e", "expand", {"in_0": x}, {"out_0": (4, 8, 6)}, expand_shape=(4, 8, 6))
    assert _one_d(kit, "e") == [
        {"in_0": "S(1)", "out_0": "S(2)"},
        {"in_0": "P", "out_0": "P"},
        {"in_0": "B", "out_0": "B"},
    ]


def test_parallel_casts_keep_their_attribute_sbp():
    assert get_rule("hierarchical_parallel_cast").fixed


def test_depthwise_convolutions_count_one_input_channel_per_filter():
    """MobileNet's and EfficientNet's depthwise convs (groups = channels) as traced: each output
    element reads kernel_size values of one channel, forward and for both gradients."""
    attrs = {"groups": 32, "kernel_size": [3, 3]}
    x, w, y = (8, 32, 16, 16), (32, 1, 3, 3), (8, 32, 16, 16)
    dense = {"groups": 1, "kernel_size": [3, 3]}
    forward = get_rule("conv2d").flops
    assert forward(attrs, {"in_0": x, "weight_0": w, "out_0": y}) == 2 * 8 * 32 * 16 * 16 * 9
    assert forward(dense, {"in_0": x, "weight_0": (32, 32, 3, 3), "out_0": y}) == 32 * forward(
        attrs, {"in_0": x, "weight_0": w, "out_0": y}
    )
    data = get_rule("conv_data_grad").flops(attrs, {"dy_0": y, "filter_0": w, "dx_0": x})
    assert data == 2 * 8 * 32 * 16 * 16 * 9
    weight = get_rule("conv_filter_grad").flops(attrs, {"dy_0": y, "x_0": x, "filter_diff_0": w})
    assert weight == 2 * 32 * 9 * 8 * 16 * 16
