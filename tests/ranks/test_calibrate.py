"""`calibrate` on real ranks writes a cluster file the planner loads, with every figure measured."""

import json
import sys

import pytest

from oneflow_autoddl.cost.cluster import COLLECTIVES, KERNEL_KINDS, load_cluster
from oneflow_autoddl.launch import start_group, wait_group


@pytest.mark.ranks
@pytest.mark.timing
def test_calibrate_writes_a_cluster_file_with_every_collective(tmp_path):
    out = tmp_path / "cpu.json"
    cli = [sys.executable, "-m", "oneflow_autoddl", "calibrate", "--nproc", "2"]
    with open(tmp_path / "calibrate.log", "w+") as log:
        # in a process group of its own, killed whole past the timeout: the ranks the CLI's
        # launcher starts go with it
        code = wait_group(start_group(cli + ["--out", str(out), "--repeats", "5"], log), 300)
        log.seek(0)
        output = log.read()
    assert code == 0, f"exit {code} (None: past 300 s)\n{output[-3000:]}"
    cluster = load_cluster(str(out))
    assert cluster.backend == "oneflow-cpu" and cluster.devices == 2
    assert cluster.nodes == 1 and cluster.cores_per_node >= 1 and cluster.name == "cpu"
    written = json.loads(out.read_text())
    assert set(written["device"]["kernel_bandwidth"]) == set(KERNEL_KINDS)  # none borrowed
    assert {kind for kind, _, _ in cluster.intra.collectives} == set(COLLECTIVES)
    assert all(
        bandwidth > 1e6 for _, bandwidth, _ in cluster.intra.collectives
    )  # MB/s at least, on any machine
    assert 0.0 <= cluster.comm_overlap <= 1.0 and 0 < cluster.op_overhead < 0.1
    assert "--repeats 5" in written["source"]


def test_convolution_pass_rates_are_those_that_make_the_stage_times():
    """calibrate_convs.pass_rates inverts what cost.compute charges: stage times made from
    known rates (FLOPs at the matmul rate plus each pass's bytes at its kind's rate) give those
    rates back, for the forward and both gradients."""
    from oneflow_autoddl.adapter import calibrate_convs as convs

    flops = 2e10
    rates = {kind: 1e9 * (i + 1) for i, kind in enumerate(KERNEL_KINDS)}
    stages = []
    for shape in convs.CONV_SHAPES:
        seconds = {}
        for kernel in convs.CONV_KERNELS:
            stage_flops, elements = convs.work(kernel, shape)
            passes = sum(4.0 * e / rates[kind] for kind, e in elements.items())
            seconds[kernel] = stage_flops / flops + passes
        stages.append(seconds)
    solved = convs.pass_rates(stages, flops)
    kinds = ["im2col", "conv_filter"] + [
        f"{kernel}_{part}"
        for kernel in ("conv_data_grad", "conv_filter_grad")
        for part in ("columns", "filter")
    ]
    assert sorted(solved) == sorted(kinds)
    assert all(solved[kind] == pytest.approx(rates[kind]) for kind in kinds)


def test_the_conv_benchmark_charges_each_kernel_as_the_cost_model_does():
    """benchmarks.conv_kernels prices a kernel on a one-op graph of its rule's blobs: the
    roofline of its FLOPs and bytes plus the cost per op, and its two passes at its kinds'
    rates (a graph that named a blob wrongly would drop a pass or the FLOPs)."""
    import math
    from dataclasses import replace

    from benchmarks.conv_kernels import predicted
    from oneflow_autoddl.adapter import calibrate_convs as convs

    cluster = load_cluster("cpu-local")
    bare = replace(cluster, kernel_bandwidth={})
    shape = (4, 64, 8)
    for kernel in convs.CONV_KERNELS:
        flops, elements = convs.work(kernel, shape)
        io = 4.0 * sum(math.prod(s) for s in convs.blob_shapes(kernel, shape).values())
        roofline = max(flops / cluster.flops_for("float32"), io / cluster.memory_bandwidth)
        assert predicted(bare, kernel, shape) == pytest.approx(cluster.op_overhead + roofline)
        assert len(elements) == 2
        passes = sum(4.0 * e / cluster.kernel_bandwidth[k] for k, e in elements.items())
        extra = predicted(cluster, kernel, shape) - predicted(bare, kernel, shape)
        assert extra == pytest.approx(passes)


@pytest.mark.ranks
def test_an_update_lost_in_the_noise_is_measured_again_alone(monkeypatch):
    """A loaded machine can swallow an update's few nanoseconds an element in one measurement;
    calibrate measures that update again (only it) instead of refusing the whole calibration."""
    from oneflow_autoddl.adapter import calibrate

    asked = []

    def measured(place, per_op, kinds=()):
        asked.append(tuple(kinds))
        swallowed = len(asked) == 1  # the first measurement loses the momentum update
        names = kinds or tuple(calibrate.UPDATE_KINDS)
        return {
            k: calibrate.IMPLAUSIBLE * 10 if swallowed and "momentum" in k else 1e9 for k in names
        }

    monkeypatch.setattr(calibrate, "_update_bandwidths", measured)
    monkeypatch.setattr(calibrate, "broadcast_from_rank0", lambda payload: payload)
    rates = calibrate._updates_until_told(None, 1e-6)
    assert asked == [(), ("momentum_update",)]
    assert rates == {k: 1e9 for k in calibrate.UPDATE_KINDS}
