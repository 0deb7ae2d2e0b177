"""Cost model: transitions by hand and against OneFlow's formulas, clusters, meshes, compute,
memory."""

import itertools
import json
import logging
import math
import random

import pytest

from oneflow_autoddl.cost.boxing import (
    MESSAGE_OVERHEAD,
    Routes,
    collector_paths,
    nccl_axis_cost,
    oneflow_cpu_axis_cost,
    routes_for,
    virtual_table,
)
from oneflow_autoddl.cost.cluster import (
    GRADIENT_PASS_FALLBACK,
    KERNEL_KINDS,
    ClusterError,
    Link,
    cluster_from_json,
    load_cluster,
    map_mesh,
    preset_names,
)
from oneflow_autoddl.cost.compute import op_memory, op_time
from oneflow_autoddl.cost.model import CostModel
from oneflow_autoddl.cost.schedule import Scheduler
from oneflow_autoddl.models import build_gpt
from oneflow_autoddl.rules import OpView, get_rule
from oneflow_autoddl.sbp import B, S, Signature, parse_nd
from oneflow_autoddl.search.problem import Problem
from tests.irkit import Kit

T = 4 * 2**20  # bytes: the tensors measured on CPU ranks were 1M floats
SHAPE = (4096, 256)


def cluster(backend="nccl", dpn=8, nodes=4, intra=(100e9, 1e-6), inter=(80e9, 5e-6)):
    return cluster_from_json(
        {
            "name": "test",
            "backend": backend,
            "nodes": nodes,
            "devices_per_node": dpn,
            "source": "test",
            "device": {
                "name": "d",
                "memory_bytes": 16e9,
                "flops": {"float32": 1e12},
                "memory_bandwidth": 1e12,
            },
            "links": {
                "intra_node": {"bandwidth_per_device": intra[0], "latency": intra[1]},
                "inter_node": {"bandwidth_per_node": inter[0], "latency": inter[1]},
            },
        }
    )


# -- one mesh axis ---------------------------------------------------------------------------------
ONE_D = [
    ("S(0)", "B", 3 / 4),
    ("P", "B", 3 / 2),
    ("P", "S(0)", 3 / 4),
    ("S(0)", "S(1)", 3 / 16),
    ("B", "S(0)", 0),
    ("B", "P", 0),
    ("S(0)", "P", 3 / 4),
    ("P", "P", 0),
]


@pytest.mark.parametrize("src,dst,fraction", ONE_D)
def test_one_axis_bytes_and_alpha_beta_time(src, dst, fraction):
    link = Link(bandwidth=10e9, latency=2e-6)
    t = nccl_axis_cost(parse_nd(src)[0], parse_nd(dst)[0], T, T / 4, 4, link)
    assert t.bytes == pytest.approx(fraction * T)
    steps = {0: 0, 3 / 2: 6}.get(fraction, 3)
    assert t.time == pytest.approx(steps * link.latency + fraction * T / link.bandwidth)


@pytest.mark.parametrize("src,dst,fraction", ONE_D)
def test_cpu_boxing_adds_padding_and_headers_per_message(src, dst, fraction):
    """OneFlow CPU slice boxing: one socket message per peer and slice (2(p-1) for P->B)."""
    link = Link(bandwidth=1e9, latency=1e-4)
    t = oneflow_cpu_axis_cost(parse_nd(src)[0], parse_nd(dst)[0], T, T / 4, 4, link)
    messages = {0: 0, 3 / 2: 6}.get(fraction, 3)
    assert t.bytes == pytest.approx(fraction * T + messages * MESSAGE_OVERHEAD)


@pytest.mark.parametrize(
    "src,dst,n",
    [
        ("S(0)", "B", 4),
        ("P", "B", 4),
        ("P", "S(0)", 4),
        ("S(0)", "S(1)", 4),
        ("S(0)", "B", 2),
        ("P", "B", 2),
    ],
)
def test_per_device_bytes_times_devices_equal_oneflow_native_formulas(src, dst, n):
    """ONEFLOW_0.9_NOTES.md 3.2 (without the flat TC): S->B T(n-1), P->B 2T(n-1), P->S T(n-1), S->S
    T(n-1)/n."""
    oneflow_total = {
        ("S(0)", "B"): T * (n - 1),
        ("P", "B"): 2 * T * (n - 1),
        ("P", "S(0)"): T * (n - 1),
        ("S(0)", "S(1)"): T * (n - 1) / n,
    }[(src, dst)]
    ours = nccl_axis_cost(parse_nd(src)[0], parse_nd(dst)[0], T, T / 4, n, Link(1e9, 0.0))
    assert ours.bytes * n == pytest.approx(oneflow_total)


# -- n-D transitions on a 2 x 2 mesh, as measured on 4 CPU ranks (wchar)
# ------------------------------
MEASURED_2X2 = [
    ("(S(0), B)", "(S(0), S(1))", 0),
    ("(B, B)", "(S(0), S(1))", 0),
    ("(S(0), S(1))", "(S(0), B)", 0.25),
    ("(S(0), P)", "(S(0), S(0))", 0.25),
    ("(S(0), B)", "(S(1), B)", 0.25),
    ("(S(0), S(0))", "(S(0), S(1))", 0.125),
    ("(S(0), B)", "(B, B)", 0.5),
    ("(P, S(1))", "(B, S(1))", 0.5),
    ("(S(0), P)", "(S(0), B)", 0.5),
    ("(P, B)", "(B, B)", 1.0),
    ("(B, P)", "(B, B)", 1.0),
    ("(S(0), S(0))", "(B, B)", 0.75),
    ("(P, P)", "(B, B)", 1.5),
    ("(S(0), S(0))", "(S(1), S(1))", 0.1875),
    ("(S(0), S(1))", "(B, B)", 0.75),
    ("(S(0), B)", "(B, S(0))", 0.5),
    ("(P, B)", "(B, S(0))", 0.5),
    ("(P, P)", "(S(0), S(1))", 0.75),
    ("(S(0), S(1))", "(S(1), S(0))", 0.4375),
    ("(P, S(0))", "(S(0), S(0))", 0.5625),
    ("(P, S(1))", "(S(1), P)", 1.0),
    ("(S(0), S(1))", "(P, P)", 0.75),
]


@pytest.mark.parametrize("src,dst,fraction", MEASURED_2X2)
def test_two_d_transitions_match_the_bytes_oneflow_moved(src, dst, fraction):
    model = CostModel(cluster(dpn=4), (2, 2))
    assert model.transfer(parse_nd(src), parse_nd(dst), SHAPE, "float32").bytes == pytest.approx(
        fraction * T
    )


def test_two_d_middle_nodes_are_the_ones_oneflow_chose():
    model = CostModel(cluster(dpn=4), (2, 2))
    path = model.path(parse_nd("(S(0), S(1))"), parse_nd("(S(1), S(0))"), SHAPE, "float32")
    assert path == [
        parse_nd(s) for s in ("(S(0), S(1))", "(S(0), S(0))", "(S(1), S(1))", "(S(1), S(0))")
    ]


@pytest.mark.parametrize("shape", [(8, 12), (4, 4), (16, 6, 4), (2, 8), (1024, 3)])
def test_shapes_of_one_route_class_share_the_paths_of_their_own(shape):
    """Paths are shared by shapes whose dimensions divide alike (boxing.route_class); every
    transition takes the path the exact shape's own Routes give."""
    hierarchy, nbytes = (2, 2), 4 * math.prod(shape)
    own, shared = Routes(shape, hierarchy), routes_for(shape, hierarchy)
    assert own.states == shared.states
    for a, b in itertools.product(own.states, repeat=2):
        assert own.path(a, b, nbytes) == shared.path(a, b, nbytes), (a, b)


def test_the_collector_solved_a_source_at_a_time_is_the_collector_solved_whole():
    table = virtual_table(4)
    whole = collector_paths(table.costs, table.max_middle)
    for i, src in enumerate(table.states):
        for j, dst in enumerate(table.states):
            expect = [[table.states[k] for k in ls] for ls in whole.get((i, j), [])]
            assert table.lists(src, dst) == expect, (src, dst)


def test_mesh_axes_cost_their_own_links():
    """(P, B) -> (B, B) all-reduces across nodes, (B, P) -> (B, B) inside them."""
    model = CostModel(cluster(dpn=2, intra=(100e9, 0.0), inter=(20e9, 0.0)), (2, 2))
    across = model.transfer(parse_nd("(P, B)"), parse_nd("(B, B)"), SHAPE, "float32")
    inside = model.transfer(parse_nd("(B, P)"), parse_nd("(B, B)"), SHAPE, "float32")
    assert across.bytes == inside.bytes == pytest.approx(T)
    assert across.time == pytest.approx(T / 10e9)  # 20 GB/s per node shared by 2 devices
    assert inside.time == pytest.approx(T / 100e9)


def test_one_d_mesh_across_nodes_is_limited_by_the_slowest_link():
    model = CostModel(cluster(dpn=4, intra=(100e9, 0.0), inter=(40e9, 0.0)), (8,))
    t = model.transfer((S(0),), (B,), SHAPE, "float32")
    assert t.time == pytest.approx(7 / 8 * T / 10e9)


def test_size_one_axes_move_nothing():
    model = CostModel(cluster(), (1, 4))
    assert model.transfer((S(0), S(0)), (B, S(0)), SHAPE, "float32").bytes == 0


# -- clusters and meshes ---------------------------------------------------------------------------
def test_presets_load_and_state_their_sources():
    """A preset names itself as its file does (calibrate names a cluster after its --out file,
    and the hook's checks of a launch against the cluster quote that name)."""
    assert {"dgx-a100", "dgx-h100", "piz-daint", "cpu-local"} <= set(preset_names())
    for name in preset_names():
        c = load_cluster(name)
        assert c.name == name
        assert c.source and c.intra.bandwidth > 0 and c.flops_for("float32") > 0
    a100 = load_cluster("dgx-a100")
    assert a100.devices_per_node == 8 and a100.inter.bandwidth == pytest.approx(25e9)


def test_every_cpu_preset_measures_every_kernel_kind():
    """A CPU kernel kind a preset does not give runs at memory bandwidth, several times faster
    than CPU ranks run it: the emulated nodes' presets of 2026-12-03 lacked the convolutions'
    passes and priced VGG's replicated convolutions as nearly free."""
    for name in preset_names():
        c = load_cluster(name)
        if c.backend == "oneflow-cpu":
            assert set(c.kernel_bandwidth) == set(KERNEL_KINDS), name


def test_a_cpu_cluster_without_a_kernel_kind_is_loaded_with_a_warning(caplog):
    data = json.loads(json.dumps(load_cluster("cpu-local").to_json()))
    del data["device"]["kernel_bandwidth"]["im2col"]
    with caplog.at_level(logging.WARNING, logger="oneflow_autoddl"):
        cluster = cluster_from_json(data)
    assert "im2col" not in cluster.kernel_bandwidth
    assert "no rate for im2col" in caplog.text and "calibrate" in caplog.text


@pytest.mark.parametrize(
    "path,value,message",
    [
        (("nodes",), None, "'nodes' is missing"),
        (("nodes",), -2, "'nodes' must be a whole number"),
        (("links", "inter_node", "latency"), -1e-6, "'links.inter_node.latency' must be >= 0"),
        (("device", "memory_bytes"), 0, "'device.memory_bytes' must be > 0"),
        (("backend",), "mpi", "'backend' must be one of"),
        (("device", "flops"), {"float16": 1e12}, "'device.flops.float32' is missing"),
        (
            ("device", "kernel_bandwidth"),
            {"softmax": 1e9},
            "'device.kernel_bandwidth.softmax' is not a kernel kind",
        ),
        (
            ("device", "kernel_bandwidth"),
            {"reduce": -1},
            "'device.kernel_bandwidth.reduce' must be > 0",
        ),
        (("device", "op_overhead"), -1e-6, "'device.op_overhead' must be >= 0"),
        (
            ("device", "comm_overlap"),
            1.5,
            "'device.comm_overlap' is a fraction of the boxing time, 0 to 1",
        ),
        (
            ("links", "intra_node", "collectives"),
            {"broadcast": {}},
            "'links.intra_node.collectives.broadcast' is not a ",
        ),
        (
            ("links", "intra_node", "collectives"),
            {"all_reduce": {"latency": 0.0}},
            "'links.intra_node.collectives.all_reduce.bandwidth_per_device' is missing",
        ),
    ],
)
def test_bad_cluster_fields_are_named(path, value, message):
    data = load_cluster("dgx-a100").to_json()
    node = data
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    with pytest.raises(ClusterError, match=message.replace("(", r"\(").replace(".", r"\.")):
        cluster_from_json(data)


def test_a_collective_with_its_own_figures_is_costed_by_them():
    """On CPU OneFlow's boxing runs each collective at its own rate (calibrate measures them)."""
    data = cluster("oneflow-cpu", dpn=4, nodes=1, intra=(1e9, 1e-4)).to_json()
    data["links"]["intra_node"]["collectives"] = {
        "all_reduce": {"bandwidth_per_device": 0.5e9, "latency": 3e-4}
    }
    c = cluster_from_json(data)
    assert cluster_from_json(c.to_json()) == c
    model = CostModel(c, (4,))
    sent = 3 * (T / 4 + MESSAGE_OVERHEAD)
    gather, reduce = (
        model.transfer(parse_nd(a), parse_nd(b), SHAPE, "float32")
        for a, b in (("S(0)", "B"), ("P", "B"))
    )
    assert gather.time == pytest.approx(3 * 1e-4 + sent / 1e9)
    assert reduce.bytes == pytest.approx(2 * sent) and reduce.time == pytest.approx(
        6 * 3e-4 + 2 * sent / 0.5e9
    )


def test_unknown_preset_and_malformed_file(tmp_path):
    with pytest.raises(ClusterError, match="dgx-a100"):
        load_cluster("dgx-z9")
    bad = tmp_path / "c.json"
    bad.write_text("{nodes: 1")
    with pytest.raises(ClusterError, match="not valid JSON"):
        load_cluster(str(bad))


def test_mesh_mapping_and_its_errors():
    a100 = load_cluster("dgx-a100")
    assert [a.crosses_nodes for a in map_mesh(a100, (128, 8)).axes] == [True, False]
    assert [a.crosses_nodes for a in map_mesh(a100, (2, 4)).axes] == [False, False]
    assert [a.crosses_nodes for a in map_mesh(a100, (16, 64)).axes] == [True, True]
    with pytest.raises(ClusterError, match="needs 2048 devices"):
        map_mesh(a100, (256, 8))
    with pytest.raises(ClusterError, match="unevenly"):
        map_mesh(a100, (4, 3))


def test_round_trip_through_json():
    c = load_cluster("piz-daint")
    assert cluster_from_json(json.loads(json.dumps(c.to_json()))) == c


# -- compute and memory ----------------------------------------------------------------------------
def _matmul_kit(mesh=(4,)):
    kit = Kit(mesh)
    x, w = kit.input("x", (64, 256)), kit.variable("w", (1024, 256))
    kit.op(
        "mm",
        "matmul",
        {"a_0": x, "b_0": w},
        {"out_0": (64, 1024)},
        transpose_a=False,
        transpose_b=True,
    )
    return kit.graph()


def test_matmul_time_is_flops_on_the_local_shard_and_replication_pays_in_full():
    g = _matmul_kit()
    c = cluster()
    flops = 2 * 64 * 1024 * 256
    split = Signature({"a_0": (S(0),), "b_0": (B,), "out_0": (S(0),)})
    replicated = Signature({"a_0": (B,), "b_0": (B,), "out_0": (B,)})
    assert op_time(c, g, g.op("mm"), split) == pytest.approx(flops / 4 / 1e12)
    assert op_time(c, g, g.op("mm"), replicated) == pytest.approx(flops / 1e12)


def test_elementwise_time_is_bytes_over_memory_bandwidth():
    kit = Kit((2,))
    x = kit.input("x", (64, 1024))
    kit.op("r", "relu", {"x_0": x}, {"y_0": (64, 1024)})
    g = kit.graph()
    t = op_time(cluster(), g, g.op("r"), Signature({"x_0": (S(0),), "y_0": (S(0),)}))
    assert t == pytest.approx(2 * 32 * 1024 * 4 / 1e12)


def _with_kernels(**bandwidth):
    data = cluster().to_json()
    data["device"].update(kernel_bandwidth=bandwidth, op_overhead=1e-4)
    return cluster_from_json(data)


def test_slow_kernel_kinds_run_at_their_own_bandwidth_plus_the_cost_per_op():
    """OneFlow 0.9.0 on CPU: x * (n, 1) ~100x, bias_add over NCHW channels alike, below a plain
    pass."""
    kit = Kit((2,))
    x, col, bias = kit.input("x", (64, 1024)), kit.input("col", (64, 1)), kit.input("b", (1024,))
    kit.op("inner", "broadcast_mul", {"x_0": x, "y_0": col}, {"z_0": (64, 1024)})
    kit.op("rows", "broadcast_add", {"x_0": x, "y_0": bias}, {"z_0": (64, 1024)})
    img, chan = kit.input("img", (8, 16, 4, 4)), kit.input("c", (16,))
    kit.op("nchw", "bias_add", {"a_0": img, "b_0": chan}, {"out_0": (8, 16, 4, 4)}, axis=1)
    g = kit.graph()
    c = _with_kernels(inner_broadcast=1e9)
    split = Signature({"x_0": (S(0),), "y_0": (S(0),), "z_0": (S(0),)})
    assert op_time(c, g, g.op("inner"), split) == pytest.approx(
        1e-4 + (2 * 32 * 1024 + 32) * 4 / 1e9
    )
    by_row = Signature({"x_0": (S(0),), "y_0": (B,), "z_0": (S(0),)})
    assert op_time(c, g, g.op("rows"), by_row) == pytest.approx(
        1e-4 + (2 * 32 * 1024 + 1024) * 4 / 1e12
    )
    nchw = Signature({"a_0": (S(0),), "b_0": (B,), "out_0": (S(0),)})
    assert op_time(c, g, g.op("nchw"), nchw) == pytest.approx(1e-4 + (2 * 4 * 256 + 16) * 4 / 1e9)
    assert op_time(cluster(), g, g.op("inner"), split) == pytest.approx(
        (2 * 32 * 1024 + 32) * 4 / 1e12
    )


def test_a_one_element_operand_is_a_fill_not_an_inner_broadcast():
    """A sum's gradient spread over its input (broadcast_like of a scalar) runs at the plain
    rate."""
    kit = Kit((2,))
    dy, x = kit.input("dy", ()), kit.input("x", (64, 1024))
    kit.op(
        "fill",
        "broadcast_like",
        {"x_0": dy, "like_0": x},
        {"y_0": (64, 1024)},
        broadcast_axes=[0, 1],
    )
    g = kit.graph()
    sig = Signature({"x_0": (B,), "like_0": (S(0),), "y_0": (S(0),)})
    assert op_time(_with_kernels(inner_broadcast=1e9), g, g.op("fill"), sig) == pytest.approx(
        1e-4 + 2 * 32 * 1024 * 4 / 1e12 + 4 / 1e12
    )


@pytest.mark.parametrize(
    "axes,kind",
    [
        ([2], None),
        ([1, 2], None),
        ([0, 1], "reduce"),
        ([0], "reduce"),
        ([0, 2], "reduce"),
        ([0, 1, 2], None),
    ],
)
def test_a_reduction_is_slow_only_across_a_kept_axis(axes, kind):
    """OneFlow 0.9.0 on CPU: x - x.sum(-1) costs what x - (n, 1) does; x.sum(0) strides ~10x
    slower."""
    kit = Kit((2,))
    x = kit.input("x", (8, 16, 32))
    out = tuple(1 if i in axes else d for i, d in enumerate((8, 16, 32)))
    kit.op(
        "r", "reduce_sum", {"input_tensor_0": x}, {"output_tensor_0": out}, axis=axes, keepdims=True
    )
    kit.op("v", "var", {"input_0": x}, {"output_0": out}, dim=axes, keepdim=True, unbiased=False)
    kit.op(
        "rl",
        "reduce_sum_like",
        {"x_0": x, "like_0": kit.input("like", out)},
        {"y_0": out},
        axis=axes,
    )
    g = kit.graph()
    for name in ("r", "v", "rl"):
        op = g.op(name)
        assert get_rule(op.type).kernel_kind(OpView(g, op, 1)) == kind, name


def test_optimizer_updates_run_at_their_own_kind_and_variables_move_nothing():
    """On CPU ranks Adam's update took ~25 ns an element against ~2 for a plain pass over its
    bytes."""
    kit = Kit((2,))
    w, g_ = kit.variable("w", (1024, 256)), kit.input("dw", (1024, 256))
    m, v, lr = kit.variable("m", (1024, 256)), kit.variable("v", (1024, 256)), kit.input("lr", (1,))
    kit.op(
        "upd",
        "adam_update",
        {"model_0": w, "model_diff_0": g_, "m_0": m, "v_0": v, "learning_rate_0": lr},
        {},
    )
    g = kit.graph()
    c = _with_kernels(adam_update=1e9)
    sig = Signature({bn: (S(0),) if bn != "learning_rate_0" else (B,) for bn in g.op("upd").bns})
    assert op_time(c, g, g.op("upd"), sig) == pytest.approx(1e-4 + (4 * 512 * 256 * 4 + 4) / 1e9)
    assert op_time(c, g, g.op("w"), Signature({"out": (B,)})) == 1e-4  # whatever its size


def test_variable_memory_is_its_shard():
    g = _matmul_kit()
    assert op_memory(g, g.op("w"), Signature({"out": (S(0),)})) == 1024 * 256 * 4 / 4
    assert op_memory(g, g.op("w"), Signature({"out": (B,)})) == 1024 * 256 * 4


# -- a step: compute and boxing overlapped
# -----------------------------------------------------------
def _two_layers():
    """x -> a -> b -> loss, then da and db (the gradients) each boxed to its update op."""
    k = Kit((4,))
    x = k.input("x", (8, 8))
    a = k.op("a", "relu", {"x_0": x}, {"y_0": (8, 8)})["y_0"]
    b = k.op("b", "relu", {"x_0": a}, {"y_0": (8, 8)})["y_0"]
    db = k.op("db", "relu", {"x_0": b}, {"y_0": (8, 8)})["y_0"]
    da = k.op("da", "relu", {"x_0": db}, {"y_0": (8, 8)})["y_0"]
    k.op("ub", "relu", {"x_0": db}, {"y_0": (8, 8)})
    k.op("ua", "relu", {"x_0": da}, {"y_0": (8, 8)})
    return k.graph(), db, da


@pytest.mark.parametrize("overlap,step", [(0.0, 8.0), (0.5, 7.0), (1.0, 6.0)])
def test_gradient_boxing_overlaps_the_backward_as_far_as_the_cluster_lets_it(overlap, step):
    """Ops take 1 s; db and da take 1 s of boxing each before their update op (da reads db
    unboxed). With overlap 1, db's boxing runs while da computes: the step is the compute's 6 s;
    with none, the sum; half way (by hand): a b db 0-3, db's boxing 3-4 taking the compute
    to 3.5, da 3.5-4.5, its boxing 4.5-5.5 (compute to 5), ub 5-6, ua 6-7."""
    graph, db, da = _two_layers()
    compute = {name: 1.0 for name in graph.ops if name != "x"}
    s = Scheduler(graph).run(
        compute, {db: (1.0, 0.0, {"ub"}), da: (1.0, 0.0, {"ua"})}, overlap, on_cpu=True
    )
    assert s.step_time == pytest.approx(step)
    assert s.exposed_comm_time == pytest.approx(step - 6)


def test_waits_hold_a_cpu_rank_but_not_a_collective_stream():
    """A boxing that is all latency (waiting on peers): on CPU ranks the wait is the rank's work
    and holds the compute like the bytes do (a b db 0-3, db's wait 3-4, da 4-5, its wait 5-6,
    ub 6-7, ua 7-8); on a stream of its own it delays its consumers only (da 3-4 and ub 4-5
    while db's wait runs 3-4, da's queued 4-5, ua 5-6: the compute's 6 s)."""
    graph, db, da = _two_layers()
    compute = {name: 1.0 for name in graph.ops if name != "x"}
    run = Scheduler(graph).run
    waits = {db: (1.0, 1.0, {"ub"}), da: (1.0, 1.0, {"ua"})}
    assert run(compute, waits, 0.0, on_cpu=True).step_time == 8.0
    assert run(compute, waits, 1.0, on_cpu=True).step_time == 8.0  # overlap is of bytes only
    assert run(compute, waits, 0.0, on_cpu=False).step_time == 6.0


def test_boxings_queue_on_a_collective_stream_and_not_on_cpu_ranks():
    """2 s of waiting each, the compute free of it (overlap 1): on a stream of its own db's wait
    runs 3-5 and da's queues behind it, 5-7 (ub 5-6, ua 7-8); on CPU ranks waits do not queue,
    but each holds the rank (db's 3-5, da 5-6, its wait 6-8, ub 8-9, ua 9-10)."""
    graph, db, da = _two_layers()
    compute = {name: 1.0 for name in graph.ops if name != "x"}
    run = Scheduler(graph).run
    slow = {db: (2.0, 2.0, {"ub"}), da: (2.0, 2.0, {"ua"})}
    assert run(compute, slow, 1.0, on_cpu=False).step_time == 8.0
    assert run(compute, slow, 1.0, on_cpu=True).step_time == 10.0


def test_a_cpu_schedule_without_overlap_is_the_sum_the_list_schedule_gives():
    """Where boxings hold the rank for all their time (CPU, overlap 0) the scheduler adds the step
    up in the graph's order; the list schedule (which a hair of overlap takes) gives the same
    step on the examples' GPT, with random op times and boxings."""
    graph = build_gpt(2, 64, 4, 8, 64, 8, (2,), device="cpu")
    rng = random.Random(0)
    names = list(graph.ops)
    compute = {name: rng.random() for name in names}
    boxings = {
        lbn: (rng.random(), rng.random() * 0.1, {c for c, _ in graph.tensor(lbn).consumers})
        for name in names
        for lbn in graph.op(name).outputs.values()
        if rng.random() < 0.3
    }
    run = Scheduler(graph).run
    serial, listed = run(compute, boxings, 0.0, on_cpu=True), run(compute, boxings, 1e-12, True)
    assert serial.step_time == pytest.approx(listed.step_time, rel=1e-9)
    assert serial.exposed_comm_time == pytest.approx(listed.exposed_comm_time, rel=1e-9)
    assert serial.order == names


def test_the_step_time_a_plan_reports_is_the_overlapped_one():
    """Without overlap (and on links without latency) a plan's step is its compute plus its boxing;
    with it, no more, and less where compute can go on during a boxing."""
    graph, _, _ = _two_layers()
    data = cluster("nccl", dpn=4, nodes=1, intra=(1e3, 0.0)).to_json()
    data["device"]["memory_bandwidth"] = 1e3  # an op and a boxing both take a fraction of a second
    steps = {}
    for overlap in (0.0, 1.0):
        data["device"]["comm_overlap"] = overlap
        problem = Problem(graph, CostModel(cluster_from_json(data), (4,)))
        steps[overlap] = [
            problem.evaluate(list(x)) for x in itertools.product(*map(range, problem.domain))
        ]
    assert len(steps[0.0]) > 8 and all(
        b.step_time == pytest.approx(b.serial_time) for b in steps[0.0]
    )
    boxed = [b for b in steps[1.0] if b.comm_time > 0]
    assert all(b.step_time <= b.serial_time * (1 + 1e-12) for b in boxed)
    assert any(
        b.step_time < 0.9 * b.serial_time for b in boxed
    )  # a boxing some later compute hides


def _conv_kit(groups: int):
    kit = Kit((2,))
    x, w = kit.input("x", (8, 32, 16, 16)), kit.variable("w", (32, 32 // groups, 3, 3))
    dy = kit.input("dy", (8, 32, 16, 16))
    attrs = dict(kernel_size=[3, 3], groups=groups, padding_before=[1, 1], strides=[1, 1])
    kit.op("fw", "conv2d", {"in_0": x, "weight_0": w}, {"out_0": (8, 32, 16, 16)}, **attrs)
    kit.op(
        "dx",
        "conv_data_grad",
        {"dy_0": dy, "filter_0": w, "x_like_0": x},
        {"dx_0": (8, 32, 16, 16)},
        **attrs,
    )
    kit.op(
        "dw",
        "conv_filter_grad",
        {"dy_0": dy, "x_0": x},
        {"filter_diff_0": (32, 32 // groups, 3, 3)},
        **attrs,
    )
    return kit.graph()


# Per op of _conv_kit: its (columns, filter) kernel kinds.
CONV_PASS_KINDS = {
    "fw": ("im2col", "conv_filter"),
    "dx": ("conv_data_grad_columns", "conv_data_grad_filter"),
    "dw": ("conv_filter_grad_columns", "conv_filter_grad_filter"),
}


def _pass_extras(groups: int, which: int):
    """Per op of _conv_kit (4 samples a device under S(0)): the seconds its pass `which` (0
    columns, 1 filter) at 1e9 bytes/s adds to it with its batch split and with it replicated,
    every other kind left without a rate."""
    g = _conv_kit(groups)
    without = _with_kernels()
    weights = ("weight_0", "filter_0", "filter_diff_0")
    for name, kinds in CONV_PASS_KINDS.items():
        with_pass = _with_kernels(**{kinds[which]: 1e9})
        op = g.op(name)
        split = Signature({bn: (B,) if bn in weights else (S(0),) for bn in op.bns})
        replicated = Signature({bn: (B,) for bn in op.bns})
        extras = [
            op_time(with_pass, g, op, sig) - op_time(without, g, op, sig)
            for sig in (split, replicated)
        ]
        yield name, extras


@pytest.mark.parametrize("groups", [1, 32])
def test_cpu_convolutions_pay_their_column_pass_at_their_columns_rate(groups):
    """OneFlow 0.9.0's CPU convolutions write every sample's columns (input channels x kernel
    area x output positions, each group's) before or after their matrix product: on CPU ranks
    that pass ran at ~1.2 GB/s of columns against ~24 GB/s for a plain pass, and a depthwise
    conv's took 55x its FLOPs' time. The forward and the two gradients pay it, each at its own
    kind's rate, on the local batch; a cluster without the rate (GPUs) has no such pass."""
    columns = 4 * 32 * 9 * 16 * 16  # 4 samples a device under S(0), in floats
    for name, extras in _pass_extras(groups, 0):
        for extra, samples in zip(extras, (1, 2)):
            assert extra == pytest.approx(samples * columns * 4 / 1e9), name


@pytest.mark.parametrize("groups", [1, 32])
def test_cpu_convolutions_read_their_filter_once_a_sample_at_their_filter_rate(groups):
    """OneFlow 0.9.0's CPU convolutions run a matrix product per sample and group, each over its
    group's slice of the filter: the forward and both gradients pass over the whole local filter
    once a sample and once more for the op, each at its own kind's rate. Replicating a layer on
    2 devices doubles its samples' passes. A cluster without the rate (GPUs) has no such pass."""
    filter_elems = 32 * (32 // groups) * 9
    for name, extras in _pass_extras(groups, 1):
        for extra, passes in zip(extras, (4 + 1, 8 + 1)):
            assert extra == pytest.approx(passes * filter_elems * 4 / 1e9), name


def test_a_file_without_the_gradients_passes_prices_them_at_the_forwards_with_a_warning(caplog):
    """Cluster files calibrate wrote before it measured the gradients' passes apart keep the
    prices their plans were made with: each gradient pass at its forward pass's rate."""
    data = json.loads(json.dumps(load_cluster("cpu-local").to_json()))
    kernels = data["device"]["kernel_bandwidth"]
    for kind in GRADIENT_PASS_FALLBACK:
        del kernels[kind]
    with caplog.at_level(logging.WARNING, logger="oneflow_autoddl"):
        c = cluster_from_json(data)
    for kind, forward in GRADIENT_PASS_FALLBACK.items():
        assert c.kernel_bandwidth[kind] == kernels[forward]
    assert "priced at the forward convolution's" in caplog.text
    assert all(kind in caplog.text for kind in GRADIENT_PASS_FALLBACK)
