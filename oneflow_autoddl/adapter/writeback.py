"""Write a Plan into a Job, and check what OneFlow compiled against it.

The checklist of ../shared/ONEFLOW_0.9_NOTES.md 4.4, every item observed on CPU ranks:
both signature maps for ops on 1-D placements, identical (a mismatch aborts the
process); `variable_conf.nd_sbp` for variables (without it the update writes a boxed
copy and training silently stops); n-D output entries are not enforced, so the compiled
Job is read back and compared.

One more, found here: OneFlow 0.9.0 aborts at run time (register.cpp:75, "Check failed:
separated_header_mem_ptr() == nullptr") when a variable's own buffer is sent over the
CommNet, i.e. whenever a split variable is boxed across ranks (all-gathered for ZeRO,
re-split for tensor parallelism). Variable buffers are shared with eager tensors and
have a separated header the CommNet cannot register. So a variable whose consumers want
another SBP is read through an inserted identity op (`<var>-autoddl-copy`), whose
ordinary buffer can be sent. The copy is local: the shard, once per step.
"""

from typing import Dict, List, Tuple

from oneflow.core.job import job_pb2

from ..errors import InvalidPlan
from ..ir import Graph
from ..plan import Plan
from ..rules import candidates
from ..sbp import Signature, format_nd, format_signature
from .job import signatures_of
from .placement import to_proto


def check_signatures(graph: Graph, plan: Plan) -> None:
    """Refuse, before OneFlow sees it, a signature that is not among the op's valid candidates."""
    for name in plan.ops:
        op = graph.op(name)
        sig = plan.signature(name)
        if sig not in candidates(graph, op):
            raise InvalidPlan(
                f"op {name} ({op.type}): signature {format_signature(sig)} is not one "
                f"OneFlow 0.9.0 accepts on {op.placement}"
            )


def write_plan(job: job_pb2.Job, plan: Plan) -> job_pb2.Job:
    """A copy of `job` whose SBP confs are the plan's; ops the plan leaves out keep OneFlow's."""
    return write_signatures(job, plan.signatures())


def write_signatures(job: job_pb2.Job, planned: Dict[str, Signature]) -> job_pb2.Job:
    """A copy of `job` with these ops' signatures written in every place OneFlow reads them."""
    out = job_pb2.Job()
    out.CopyFrom(job)
    view = out.job_parallel_view_conf
    one_d_ops = set()
    for group in out.placement.placement_group:
        if len(group.parallel_conf.hierarchy.dim) <= 1:
            one_d_ops.update(group.op_set.op_name)
    for name, sig in planned.items():
        nd_conf = view.op_name2nd_sbp_signature_conf[name]
        nd_conf.Clear()
        for bn, nd in sig.items():
            nd_conf.bn_in_op2nd_sbp[bn].sbp_parallel.extend(to_proto(s) for s in nd)
        if name in one_d_ops:
            conf = view.op_name2sbp_signature_conf[name]
            conf.Clear()
            for bn, nd in sig.items():
                conf.bn_in_op2sbp_parallel[bn].CopyFrom(to_proto(nd[0]))
    for op_conf in out.net.op:
        if op_conf.HasField("variable_conf") and op_conf.name in planned:
            del op_conf.variable_conf.nd_sbp[:]
            op_conf.variable_conf.nd_sbp.extend(str(s) for s in planned[op_conf.name]["out"])
    _copy_boxed_variables(out, planned, one_d_ops)
    return out


COPY_SUFFIX = "-autoddl-copy"


def _boxed_readers(
    job: job_pb2.Job, planned: Dict[str, Signature]
) -> Dict[str, Tuple[tuple, List[tuple]]]:
    """variable op -> (its SBP, [(consumer op conf, arg, index)] reading it in another SBP).
    A variable's SBP is the one in the Job, where write_signatures has put the plan's: a
    variable the plan holds (a parameter another graph already placed) keeps its split there,
    and its readers must not box it either."""
    own = signatures_of(job)
    variables = {
        op.name: own[op.name]["out"]
        for op in job.net.op
        if op.HasField("variable_conf") and op.name in own
    }
    readers: Dict[str, Tuple[tuple, List[tuple]]] = {}
    for op in job.net.op:
        if not op.HasField("user_conf") or op.name not in planned:
            continue
        for arg, lbns in op.user_conf.input.items():
            for i, lbn in enumerate(lbns.s):
                var = lbn.split("/")[0]
                if (
                    var in variables
                    and planned[op.name][f"{arg}_{i}"] != variables[var]
                    and any(s.is_split for s in variables[var])
                ):
                    readers.setdefault(var, (variables[var], []))[1].append((op, arg, i))
    return readers


def variables_boxed_across_ranks(job: job_pb2.Job) -> List[str]:
    """Variables a Job's own signatures box across ranks: the Job aborts at run time as it is
    (see the module doc), e.g. some of what OneFlow's native auto-parallel produces on CPU."""
    return sorted(_boxed_readers(job, signatures_of(job)))


def _copy_boxed_variables(job: job_pb2.Job, planned: Dict[str, Signature], one_d_ops: set) -> None:
    readers = _boxed_readers(job, planned)
    if not readers:
        return
    by_name = {op.name: op for op in job.net.op}
    view, helper = job.job_parallel_view_conf, job.helper
    for var, (nd, uses) in readers.items():
        src, name = f"{var}/out", var + COPY_SUFFIX
        dst = f"{name}/out_0"
        copy = job.net.op.add()
        copy.name, copy.device_tag = name, by_name[var].device_tag
        copy.scope_symbol_id = by_name[var].scope_symbol_id
        copy.user_conf.op_type_name = "identity"
        copy.user_conf.input["in"].s.append(src)
        copy.user_conf.output["out"].s.append(dst)
        copy.user_conf.input_order.append("in")
        copy.user_conf.output_order.append("out")
        helper.lbn2logical_blob_desc[dst].CopyFrom(helper.lbn2logical_blob_desc[src])
        args = helper.op_name2arg_signature[name].bn_in_op2lbi
        args["in_0"].op_name, args["in_0"].blob_name = var, "out"
        args["out_0"].op_name, args["out_0"].blob_name = name, "out_0"
        for bn in ("in_0", "out_0"):
            view.op_name2nd_sbp_signature_conf[name].bn_in_op2nd_sbp[bn].sbp_parallel.extend(
                to_proto(s) for s in nd
            )
            if var in one_d_ops:
                view.op_name2sbp_signature_conf[name].bn_in_op2sbp_parallel[bn].CopyFrom(
                    to_proto(nd[0])
                )
        for group in job.placement.placement_group:
            if var in group.op_set.op_name:
                group.op_set.op_name.append(name)
        for op, arg, i in uses:
            op.user_conf.input[arg].s[i] = dst
            lbi = helper.op_name2arg_signature[op.name].bn_in_op2lbi[f"{arg}_{i}"]
            lbi.op_name, lbi.blob_name = name, "out_0"


def compiled_mismatches(compiled: job_pb2.Job, plan: Plan) -> List[str]:
    """One line per planned op whose compiled signature differs from the plan."""
    actual: Dict[str, Signature] = signatures_of(compiled)
    variables = {
        op.name: list(op.variable_conf.nd_sbp)
        for op in compiled.net.op
        if op.HasField("variable_conf")
    }
    problems = []
    for name, entry in plan.ops.items():
        got = actual.get(name)
        if got is None:
            problems.append(f"{name}: not in the compiled job")
            continue
        for bn, want in entry.signature.items():
            have = format_nd(got[bn]) if bn in got else "missing"
            if have != want:
                problems.append(f"{name} ({entry.type}) {bn}: planned {want}, compiled {have}")
                break
        if name in variables and name in plan.variables:
            want = plan.variables[name]
            have = format_nd(tuple(_parse(s) for s in variables[name]))
            if have != want:
                problems.append(f"{name}: variable_conf.nd_sbp {have}, planned {want}")
    return problems


def _parse(text: str):
    from ..sbp import parse_sbp

    return parse_sbp(text)
