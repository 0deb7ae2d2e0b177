"""Two link levels: which bytes cross nodes, per mesh axis and per backend."""

import math

import pytest

from oneflow_autoddl.cost.boxing import EVENTFD_BYTES, oneflow_cpu_axis_cost
from oneflow_autoddl.cost.cluster import ClusterError, check_launch
from oneflow_autoddl.cost.model import CostModel
from oneflow_autoddl.sbp import B, P, parse_nd
from tests.unit.test_cost import cluster

SHAPE = (4096, 256)


def _moved(backend, mesh, src, dst, dpn=2, nodes=2, ranks_per_node=None):
    model = CostModel(cluster(backend, dpn=dpn, nodes=nodes), mesh, ranks_per_node=ranks_per_node)
    return model.transfer(parse_nd(src), parse_nd(dst), SHAPE, "float32")


def _wire(moved, messages):
    """What OneFlow's CPU boxing puts on the links: its writes less the eventfd kicks."""
    return moved.bytes - messages * EVENTFD_BYTES


@pytest.mark.parametrize("backend", ["oneflow-cpu", "nccl"])
def test_an_axis_inside_a_node_sends_nothing_across(backend):
    moved = _moved(backend, (2, 2), "(B, S(0))", "(B, B)")
    assert moved.bytes > 0 and moved.inter_node_bytes == 0


@pytest.mark.parametrize("backend", ["oneflow-cpu", "nccl"])
def test_an_axis_of_one_rank_per_node_sends_everything_across(backend):
    moved = _moved(backend, (2, 2), "(S(0), B)", "(B, B)")
    wire = _wire(moved, 1) if backend == "oneflow-cpu" else moved.bytes
    assert moved.bytes > 0 and moved.inter_node_bytes == wire


@pytest.mark.parametrize(
    "src, dst, messages", [("S(0)", "B", 3), ("P", "B", 6), ("P", "S(0)", 3), ("S(0)", "S(1)", 3)]
)
def test_cpu_boxing_sends_to_each_peer_so_two_of_three_cross_on_two_nodes_of_two(
    src, dst, messages
):
    """OneFlow's CPU slice boxing sends one message to each peer: on 4 ranks over 2 nodes, each
    rank's 3 peers are 1 on its node and 2 on the other."""
    moved = _moved("oneflow-cpu", (4,), src, dst)
    assert moved.inter_node_bytes == pytest.approx(_wire(moved, messages) * 2 / 3)


def test_nccl_rings_cross_once_per_node_and_its_all_to_all_like_cpu():
    """A ring over 8 ranks on 2 nodes has 2 of its 8 edges between nodes."""
    ring = _moved("nccl", (8,), "S(0)", "B", dpn=4)
    assert ring.inter_node_bytes == pytest.approx(ring.bytes * 2 / 8)
    direct = _moved("nccl", (8,), "S(0)", "S(1)", dpn=4)
    assert direct.inter_node_bytes == pytest.approx(direct.bytes * 4 / 7)


def test_a_two_d_move_through_both_axes_splits_its_hops_by_their_levels():
    """(S(0), S(0)) -> (B, B) merges both axes into one all-gather over the 4 ranks; (S(0), S(1))
    -> (B, B) goes through (B, S(1)): a gather of the whole rows across nodes, then one of half
    the tensor's bytes inside them."""
    merged = _moved("oneflow-cpu", (2, 2), "(S(0), S(0))", "(B, B)")
    assert merged.inter_node_bytes == pytest.approx(_wire(merged, 3) * 2 / 3)
    across = _moved("oneflow-cpu", (2, 2), "(S(0), S(1))", "(B, S(1))")
    inside = _moved("oneflow-cpu", (2, 2), "(B, S(1))", "(B, B)")
    both = _moved("oneflow-cpu", (2, 2), "(S(0), S(1))", "(B, B)")
    assert both.bytes == across.bytes + inside.bytes
    assert both.inter_node_bytes == _wire(across, 1) and inside.inter_node_bytes == 0


def test_middle_nodes_that_store_alike_are_taken_in_the_collectors_order():
    """(P, P) -> (S(0), S(1)) can go through (S(0), P) or (P, S(1)): the same bytes and storage,
    but the first reduce-scatters the whole tensor across nodes. OneFlow's collector keeps the
    first in its order (B, S(0), ..., P; the first mesh axis outermost), (S(0), P). Measured on
    2 emulated nodes (benchmarks.multinode, 1 Gbit/s, the GPT on 2 x 2): 2.588 MiB a step across
    nodes per rank, predicted 2.584 with that path, 2.334 with the other."""
    model = CostModel(cluster("oneflow-cpu", dpn=2, nodes=2), (2, 2))
    src, dst = parse_nd("(P, P)"), parse_nd("(S(0), S(1))")
    assert model.path(src, dst, SHAPE, "float32") == [src, parse_nd("(S(0), P)"), dst]
    first = _moved("oneflow-cpu", (2, 2), "(P, P)", "(S(0), P)")
    moved = _moved("oneflow-cpu", (2, 2), "(P, P)", "(S(0), S(1))")
    assert moved.inter_node_bytes == first.inter_node_bytes > moved.bytes / 2


def test_one_node_sends_nothing_across():
    moved = _moved("oneflow-cpu", (4,), "P", "B", dpn=4, nodes=1)
    assert moved.bytes > 0 and moved.inter_node_bytes == 0


def test_fewer_ranks_per_node_than_devices_move_the_node_boundaries():
    """With 2 ranks per node on a cluster of 4 devices per node, a 1-D mesh of 4 spans 2 nodes."""
    whole = _moved("oneflow-cpu", (4,), "S(0)", "B", dpn=4)
    halves = _moved("oneflow-cpu", (4,), "S(0)", "B", dpn=4, ranks_per_node=2)
    assert whole.inter_node_bytes == 0
    assert halves.inter_node_bytes == pytest.approx(_wire(halves, 3) * 2 / 3)


def test_a_cluster_that_cannot_describe_the_launch_is_refused_naming_both():
    two_by_two = cluster("oneflow-cpu", dpn=2, nodes=2)
    assert check_launch(two_by_two, 2, 2) == 2
    assert check_launch(two_by_two, 1, 2) == 2  # part of a cluster
    with pytest.raises(ClusterError, match=r"2 node\(s\) x 2 ranks.* 1 node\(s\) x 4 devices"):
        check_launch(cluster("oneflow-cpu", dpn=4, nodes=1), 2, 2)
    with pytest.raises(ClusterError, match=r"1 node\(s\) x 4 ranks.* 2 node\(s\) x 2 devices"):
        check_launch(two_by_two, 1, 4)
    with pytest.raises(ClusterError, match="ranks per node 4 was asked for.* runs 2 ranks"):
        check_launch(two_by_two, 2, 2, asked=4)


def test_on_one_node_ranks_per_node_asked_for_group_its_ranks_into_nodes():
    assert check_launch(cluster("oneflow-cpu", dpn=2, nodes=2), 1, 4, asked=2) == 2


def _all_reduce_across(backend, intra):
    model = CostModel(cluster(backend, dpn=2, nodes=2, intra=intra, inter=(1e9, 1e-5)), (4,))
    return model, model.transfer(parse_nd("P"), parse_nd("B"), SHAPE, "float32")


def test_cpu_boxing_paces_only_the_bytes_that_cross_nodes_at_the_slow_link():
    """OneFlow's CPU boxing sends to each peer directly: of 4 ranks on 2 nodes, each rank's piece
    for the peer on its own node goes at the pace of the link inside the node, the two for the
    other node at the slow link's."""
    model, moved = _all_reduce_across("oneflow-cpu", (100e9, 1e-6))
    args = (P, B, 4.0 * math.prod(SHAPE), float(math.prod(SHAPE)), 4)
    far = oneflow_cpu_axis_cost(*args, model.cluster.inter, 2 / 3)
    near = oneflow_cpu_axis_cost(*args, model.cluster.intra, 2 / 3)
    assert moved.time == pytest.approx(2 / 3 * far.time + 1 / 3 * near.time)
    assert moved.bytes == far.bytes and moved.inter_node_bytes == far.inter_node_bytes
    assert near.time < moved.time < far.time


def test_a_ring_is_paced_by_its_slowest_link_whatever_the_link_inside_nodes():
    _, fast = _all_reduce_across("nccl", (100e9, 1e-6))
    _, slow = _all_reduce_across("nccl", (2e9, 1e-5))
    assert fast.time == slow.time
