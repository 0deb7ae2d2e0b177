"""Mixed precision as OneFlow 0.9.0's AMP pass makes it (oneflow_autoddl.amp), and its costs."""

import pytest

from oneflow_autoddl.amp import amp_graph, half_ops
from oneflow_autoddl.cost.cluster import load_cluster
from oneflow_autoddl.cost.compute import op_time
from oneflow_autoddl.errors import ConfigError
from oneflow_autoddl.ir import Graph, Op, Placement, Tensor
from oneflow_autoddl.models import build_gpt
from oneflow_autoddl.planner import plan
from oneflow_autoddl.rules import update_of
from oneflow_autoddl.sbp import B, Signature

PLACE = Placement("cuda", (0,), (1,))


def _mlp() -> Graph:
    """x @ w, relu, sum: the product is white, the relu clear after it, the sum gray with no
    white reader."""
    ops = [
        Op("x", "input_conf", {}, {"out": "x/out"}, PLACE, role="io"),
        Op("w", "variable_conf", {}, {"out": "w/out"}, PLACE, role="variable"),
        Op("mm", "matmul", {"a_0": "x/out", "b_0": "w/out"}, {"out_0": "mm/out_0"}, PLACE),
        Op("relu", "relu", {"x_0": "mm/out_0"}, {"y_0": "relu/y_0"}, PLACE),
        Op(
            "sum",
            "reduce_sum",
            {"input_tensor_0": "relu/y_0"},
            {"output_tensor_0": "sum/output_tensor_0"},
            PLACE,
            {"axis": [0, 1]},
        ),
        Op(
            "out",
            "output_conf",
            {"in": "sum/output_tensor_0"},
            {"out": "out/out"},
            PLACE,
            role="io",
        ),
    ]
    shapes = {"x/out": (8, 16), "w/out": (16, 16), "mm/out_0": (8, 16), "relu/y_0": (8, 16)}
    shapes.update({"sum/output_tensor_0": (), "out/out": ()})
    tensors = [Tensor(lbn, s, "float32", *lbn.split("/")) for lbn, s in shapes.items()]
    return Graph("mlp", ops, tensors)


def test_white_ops_and_the_clear_ops_beside_them_run_in_half():
    g = _mlp()
    assert half_ops(g) == {"mm", "relu"}
    a = amp_graph(g, "fp16")
    casts = {name: op for name, op in a.ops.items() if op.type == "cast"}
    assert set(casts) == {"x-out-cast_f2h", "w-out-cast_f2h", "relu-y_0-cast_h2f"}
    assert a.op("mm").inputs == {"a_0": "x-out-cast_f2h/out_0", "b_0": "w-out-cast_f2h/out_0"}
    assert a.op("sum").inputs["input_tensor_0"] == "relu-y_0-cast_h2f/out_0"
    assert a.tensor("mm/out_0").dtype == "float16" and a.tensor("relu/y_0").dtype == "float16"
    assert a.tensor("w/out").dtype == "float32"  # the master weight
    assert a.tensor("relu-y_0-cast_h2f/out_0").dtype == "float32"
    order = list(a.ops)
    assert order.index("w-out-cast_f2h") < order.index("mm")


def test_gpt_in_mixed_precision_keeps_its_master_weights_and_optimizer_state():
    g = build_gpt(2, 64, 4, 16, 128, 16, (4,))
    a = amp_graph(g, "bf16")
    products = [n for n, op in a.ops.items() if "matmul" in op.type]
    assert products and all(
        a.tensor(a.op(n).outputs["out_0"]).dtype == "bfloat16" for n in products
    )
    for op in a.ops.values():
        if op.role == "variable":
            assert a.tensor(op.outputs["out"]).dtype == "float32"
        update = update_of(op)
        if update is not None:
            assert a.tensor(op.inputs[update.grad]).dtype == "float32"
    assert len(a.ops) > len(g.ops)


def test_half_ops_run_at_the_half_rate_and_move_half_the_bytes():
    g = build_gpt(2, 1024, 16, 512, 50257, 64, (8,))
    a = amp_graph(g, "bf16")
    cluster = load_cluster("dgx-a100")
    name = next(n for n, op in a.ops.items() if op.type == "broadcast_matmul")
    op32, op16 = g.op(name), a.op(name)
    replicated = Signature({bn: (B,) for bn in op16.bns})
    fp32, bf16 = op_time(cluster, g, op32, replicated), op_time(cluster, a, op16, replicated)
    overhead = cluster.op_overhead
    assert (fp32 - overhead) / (bf16 - overhead) == pytest.approx(
        cluster.flops["bfloat16"] / cluster.flops["float32"], rel=0.01
    )
    p32, p16 = plan(g, "dgx-a100"), plan(a, "dgx-a100")
    # The search boxes the gradients in half, before their cast back (the data-parallel seed,
    # a greedy completion, keeps their partial sum through the cast and boxes float32)
    assert p16.predicted.bytes_per_device < 0.6 * p32.predicted.bytes_per_device
    assert p16.predicted.step_time_s < p32.predicted.step_time_s / 4
    assert p16.precision == "mixed bfloat16" and p32.precision == "float32"


def test_a_graph_already_in_half_or_a_bad_dtype_is_refused():
    a = amp_graph(_mlp(), "bf16")
    with pytest.raises(ConfigError, match="already in mixed precision"):
        amp_graph(a, "fp16")
    with pytest.raises(ConfigError, match="fp16, bf16"):
        amp_graph(_mlp(), "fp8")
