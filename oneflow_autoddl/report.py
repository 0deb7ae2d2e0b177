"""Readable reports of a Plan: the summary logged at compile, SBP tables, the comparison.

Tables are rendered with tabulate; times in ms, sizes in MiB, SBP as OneFlow prints it.
"fits" compares memory per device with the plan's limit (the cluster's device memory by
default); "peak MiB" is the most a device holds at once over the step (cost.memory). "ZeRO"
names the stage each parameter's SBP amounts to (oneflow_autoddl.zero) and the share of the
parameters' bytes it covers. "bytes / matmul bound" divides bytes sent per device by the sum
over matmuls of their communication lower bounds (cost.bounds): a yardstick per matmul, which a
plan can undercut by sharing one transfer among several matmuls or by replicating work.
"""

from typing import List, Optional

from tabulate import tabulate

from . import zero
from .plan import Plan, Predicted
from .regather import is_phase_copy

MiB = 2.0**20


def _ms(t: float) -> str:
    return f"{t * 1e3:.3f}"


def _mib(b: float) -> str:
    return f"{b / MiB:.2f}"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.3f}" if b else "-"


def comparison_rows(plan: Plan) -> List[List[str]]:
    rows = []
    entries = [("autoddl", plan.predicted)] + list(plan.baselines.items())
    dp = plan.baselines.get("data_parallel")
    limit = plan.memory_limit_bytes
    for name, p in entries:
        fits = "-" if limit is None else ("yes" if p.peak_memory_per_device <= limit else "no")
        row = [
            name,
            _ms(p.step_time_s),
            _ms(p.comm_time_s),
            _ms(p.exposed_comm_s),
            _mib(p.bytes_per_device),
            _mib(p.inter_node_bytes_per_device),
            _mib(p.memory_per_device),
            _mib(p.peak_memory_per_device),
            fits,
        ]
        row.append(_ratio(p.step_time_s, dp.step_time_s) if dp else "-")
        row.append(
            _ratio(p.bytes_per_device, plan.lower_bound_bytes) if plan.lower_bound_bytes else "-"
        )
        row.append(zero.describe(p.zero_stages))
        rows.append(row)
    return rows


def comparison_table(plan: Plan) -> str:
    headers = [
        "plan",
        "step ms",
        "comm ms",
        "not overlapped ms",
        "MiB sent/device",
        "of which across nodes",
        "MiB memory/device",
        "peak MiB/device",
        "fits",
        "time / DP",
        "bytes / matmul bound",
        "ZeRO (parameter bytes)",
    ]
    return tabulate(comparison_rows(plan), headers=headers, tablefmt="github")


def summary(plan: Plan) -> str:
    """The block logged when a graph is compiled with a plan."""
    p: Predicted = plan.predicted
    lines = [
        f"mesh {plan.mesh} ({plan.device}), cluster {plan.cluster}, {len(plan.ops)} ops planned, "
        f"{len(plan.unplanned_ops)} left to OneFlow, search {plan.search_time_s:.2f} s; "
        f"precision {plan.precision}; recomputed: {', '.join(plan.recompute) or 'none'}",
        f"predicted step {_ms(p.step_time_s)} ms (compute {_ms(p.compute_time_s)}, communication "
        f"{_ms(p.comm_time_s)} of which {_ms(p.exposed_comm_s)} not overlapped), "
        f"{_mib(p.bytes_per_device)} MiB sent ({_mib(p.inter_node_bytes_per_device)} across "
        f"nodes) and {_mib(p.memory_per_device)} MiB held per device",
        f"peak memory per device {_mib(p.peak_memory_per_device)} MiB "
        f"({_kinds(p.peak_memory_by_kind)}) at {p.peak_memory_op or '-'}; "
        f"ZeRO: {zero.describe(p.zero_stages)}",
    ]
    if plan.recompute:
        lines.append(
            f"every plan below recomputes the same {len(plan.recompute)} modules in backward"
        )
    copies = [name for name in plan.ops if is_phase_copy(name)]
    if copies:
        lines.append(
            f"every plan below reads tensors through {len(copies)} copies, one per phase "
            "(forward, backward, update), so that a tensor its readers box is boxed in the phase "
            "that reads it and freed after (as ZeRO stage 3 gathers a parameter where it is used "
            "and reduces a gradient as it is made)"
        )
    lines.append(comparison_table(plan))
    lines += [f"note: {n}" for n in plan.notes]
    return "\n".join(lines)


def _kinds(by_kind) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {_mib(v)}" for k, v in by_kind.items() if v) or "-"


def parameter_table(plan: Plan) -> str:
    rows = [
        [
            name,
            "x".join(map(str, plan.variable_shapes[name])),
            sbp,
            _mib(plan.variable_bytes.get(name, 0.0)),
        ]
        for name, sbp in plan.variables.items()
    ]
    return tabulate(rows, headers=["parameter", "shape", "SBP", "MiB/device"], tablefmt="github")


def op_table(plan: Plan, limit: Optional[int] = None) -> str:
    rows = []
    for name, e in list(plan.ops.items())[:limit]:
        ins = ", ".join(f"{bn}={s}" for bn, s in e.signature.items() if bn in e.inputs)
        outs = ", ".join(f"{bn}={s}" for bn, s in e.signature.items() if bn not in e.inputs)
        rows.append(
            [name, e.type, ins, outs, f"{e.compute_time_s * 1e6:.1f}", f"{e.comm_time_s * 1e6:.1f}"]
        )
    return tabulate(
        rows,
        headers=["op", "type", "input SBP", "output SBP", "compute us", "comm us"],
        tablefmt="github",
    )


def transfer_table(plan: Plan, limit: int = 10) -> str:
    """The costliest boxings of the plan: what moves where, and what it costs per device."""
    rows = [
        [
            t["tensor"],
            "x".join(map(str, t["shape"])) or "scalar",
            t["from"],
            ", ".join(t["to"]) or "(another placement)",
            _mib(t["bytes"]),
            _mib(t.get("inter_node_bytes", 0.0)),
            _ms(t["time_s"]),
        ]
        for t in plan.transfers[:limit]
    ]
    headers = ["tensor", "shape", "from", "to", "MiB/device", "across nodes", "ms"]
    return tabulate(rows, headers=headers, tablefmt="github")
