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

from typing import Dict, List, Set, Tuple

from oneflow.core.job import job_pb2
from oneflow.core.operator import op_conf_pb2

from ..errors import InvalidPlan
from ..ir import Graph, Placement
from ..plan import Plan
from ..regather import is_phase_copy, regather_graph
from ..rules import candidates
from ..sbp import Signature, format_nd, format_signature
from .job import read_job, signatures_of
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
    """A copy of `job` whose SBP confs are the plan's, with the plan's phase copies
    (oneflow_autoddl.regather) inserted; ops the plan leaves out keep OneFlow's."""
    copies = {name for name in plan.ops if is_phase_copy(name)}
    if copies:
        job = with_phase_copies(job, copies)
    return write_signatures(job, plan.signatures())


def with_phase_copies(job: job_pb2.Job, names: Set[str]) -> job_pb2.Job:
    """A copy of `job` with the phase copies `names` of regather.regather_graph inserted, their
    readers reading them. Each runs after the op before it in the rewritten graph's order on its
    placement (a control edge), so that a runtime reusing memory boxes it in its phase, as the
    memory model holds it (cost.memory), not at the start of the step."""
    lean = regather_graph(read_job(job))
    missing = sorted(names - set(lean.ops))
    if missing:
        raise InvalidPlan(
            f"the plan has phase copies this Job has no place for ({missing[:3]}): "
            "plan this Job again"
        )
    out = job_pb2.Job()
    out.CopyFrom(job)
    confs = {op.name: op for op in out.net.op}
    previous: Dict[Placement, str] = {}
    for name, op in lean.ops.items():
        if name in names:
            source = lean.tensor(op.inputs["in_0"])
            copy = _add_identity(out, confs[source.producer], source.lbn, name)
            if op.placement in previous:
                copy.ctrl_in_op_name.append(previous[op.placement])
            confs[name] = copy
            for reader, ibn in lean.tensor(op.outputs["out_0"]).consumers:
                _read_from(out, confs[reader], ibn, name)
        if name in confs:
            previous[op.placement] = name
    return out


def _add_identity(
    job: job_pb2.Job, producer: op_conf_pb2.OperatorConf, src: str, name: str
) -> op_conf_pb2.OperatorConf:
    """An identity op `name` reading blob `src` of `producer`, in its placement group and
    scope; its output `<name>/out_0` has src's logical shape."""
    dst = f"{name}/out_0"
    copy = job.net.op.add()
    copy.name, copy.device_tag = name, producer.device_tag
    copy.scope_symbol_id = producer.scope_symbol_id
    copy.user_conf.op_type_name = "identity"
    copy.user_conf.input["in"].s.append(src)
    copy.user_conf.output["out"].s.append(dst)
    copy.user_conf.input_order.append("in")
    copy.user_conf.output_order.append("out")
    helper = job.helper
    helper.lbn2logical_blob_desc[dst].CopyFrom(helper.lbn2logical_blob_desc[src])
    args = helper.op_name2arg_signature[name].bn_in_op2lbi
    args["in_0"].op_name, args["in_0"].blob_name = src.split("/")
    args["out_0"].op_name, args["out_0"].blob_name = name, "out_0"
    for group in job.placement.placement_group:
        if producer.name in group.op_set.op_name:
            group.op_set.op_name.append(name)
    return copy


def _read_from(job: job_pb2.Job, reader: op_conf_pb2.OperatorConf, ibn: str, copy: str) -> None:
    """Make input `ibn` (`<arg>_<index>`) of user op `reader` read the identity op `copy`."""
    arg, index = ibn.rsplit("_", 1)
    reader.user_conf.input[arg].s[int(index)] = f"{copy}/out_0"
    lbi = job.helper.op_name2arg_signature[reader.name].bn_in_op2lbi[ibn]
    lbi.op_name, lbi.blob_name = copy, "out_0"


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
    view = job.job_parallel_view_conf
    for var, (nd, uses) in readers.items():
        name = var + COPY_SUFFIX
        _add_identity(job, by_name[var], f"{var}/out", name)
        for bn in ("in_0", "out_0"):
            view.op_name2nd_sbp_signature_conf[name].bn_in_op2nd_sbp[bn].sbp_parallel.extend(
                to_proto(s) for s in nd
            )
            if var in one_d_ops:
                view.op_name2sbp_signature_conf[name].bn_in_op2sbp_parallel[bn].CopyFrom(
                    to_proto(nd[0])
                )
        for op, arg, i in uses:
            _read_from(job, op, f"{arg}_{i}", name)


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
