"""CPU ranks sharing a node's cores: one calibration costs any number of ranks on the node."""

import pytest

from oneflow_autoddl.cost.cluster import ClusterError, cluster_from_json, load_cluster
from oneflow_autoddl.cost.model import CostModel
from oneflow_autoddl.cost.sharing import for_ranks
from oneflow_autoddl.sbp import B, S
from tests.unit.test_cost import cluster


def _calibrated(cores, dpn=4, nodes=1):
    data = cluster("oneflow-cpu", dpn=dpn, nodes=nodes).to_json()
    data["cores_per_node"] = cores
    data["device"]["op_overhead"] = 1e-3
    data["device"]["kernel_bandwidth"] = {"reduce": 1e8}
    data["links"]["intra_node"]["collectives"] = {
        "all_gather": {"bandwidth_per_device": 5e8, "latency": 2e-4}
    }
    return cluster_from_json(data)


def test_half_the_ranks_on_cores_they_outnumbered_compute_twice_as_fast():
    c = _calibrated(cores=2)
    half = for_ranks(c, 2)
    assert half.flops_for("float32") == 2 * c.flops_for("float32")
    assert half.memory_bandwidth == 2 * c.memory_bandwidth
    assert half.bandwidth_for("reduce") == 2 * c.bandwidth_for("reduce")
    assert half.op_overhead == c.op_overhead / 2


def test_the_links_keep_their_figures_per_byte_and_message_at_any_rank_count():
    c = _calibrated(cores=2)
    half = for_ranks(c, 2)
    assert half.intra == c.intra
    assert half.intra.for_collective("all_gather").bandwidth == 5e8
    assert half.inter == c.inter
    gather = ((S(0),), (B,), (1024, 256), "float32")
    two, four = CostModel(c, (2,)).transfer(*gather), CostModel(c, (4,)).transfer(*gather)
    for t, messages in ((two, 1), (four, 3)):
        assert t.latency == pytest.approx(messages * 2e-4)
        assert t.time == pytest.approx(t.latency + t.bytes / 5e8)
    assert four.time < 2 * two.time  # a core share on the link would make it over 3 times


def test_a_rank_never_runs_faster_than_on_a_core_of_its_own():
    c = _calibrated(cores=4, dpn=8)
    assert for_ranks(c, 1).flops_for("float32") == 2 * c.flops_for("float32")
    assert for_ranks(c, 4).flops_for("float32") == for_ranks(c, 1).flops_for("float32")


def test_clusters_without_cores_and_the_calibrated_count_are_as_written():
    plain = cluster("oneflow-cpu", dpn=4)
    assert for_ranks(plain, 2) is plain
    c = _calibrated(cores=2)
    assert for_ranks(c, 4) is c


def test_the_cost_model_uses_the_figures_for_the_ranks_of_its_mesh():
    c = _calibrated(cores=2)
    assert CostModel(c, (2,)).cluster.flops_for("float32") == 2 * c.flops_for("float32")
    assert CostModel(c, (4,)).cluster is c
    assert CostModel(c, (2, 2), ranks_per_node=2).cluster.op_overhead == c.op_overhead / 2


def test_cores_are_for_cpu_clusters_and_round_trip():
    c = _calibrated(cores=2)
    assert cluster_from_json(c.to_json()) == c
    data = cluster("nccl").to_json()
    data["cores_per_node"] = 8
    with pytest.raises(ClusterError, match="cores_per_node.*oneflow-cpu"):
        cluster_from_json(data)


def test_the_committed_cpu_calibration_knows_its_cores():
    assert load_cluster("cpu-local").cores_per_node >= 1
