"""Read a OneFlow 0.9.0 Job proto into the planner's IR.

The Job is the one `nn.Graph.build_graph()` returns (native auto-parallel off): every op
with its greedy SBP signature in `job_parallel_view_conf`, logical shapes in
`helper.lbn2logical_blob_desc`, placements in `placement.placement_group`.
"""

import re
import warnings
from typing import Any, Dict, List, Tuple

from oneflow.core.common import data_type_pb2
from oneflow.core.job import job_pb2

from ..ir import Graph, GraphError, Op, Placement, Tensor, assign_roles, module_scope
from ..rules import is_optimizer_op, update_of
from ..sbp import Signature
from .placement import from_proto

_DTYPES = {
    "kFloat": "float32",
    "kDouble": "float64",
    "kFloat16": "float16",
    "kBFloat16": "bfloat16",
    "kInt8": "int8",
    "kInt32": "int32",
    "kInt64": "int64",
    "kUInt8": "uint8",
    "kBool": "bool",
    "kChar": "char",
    "kInt16": "int16",
}
_IO_TYPES = ("input_conf", "output_conf")
_DEVICE_NAME = re.compile(r"@?(\d+):(\d+)$")


def op_type(op_conf) -> str:
    """User ops by their type name (`matmul`), system ops by their conf (`variable_conf`)."""
    if op_conf.HasField("user_conf"):
        return op_conf.user_conf.op_type_name
    which = op_conf.WhichOneof("op_type")
    if which is None:
        raise GraphError(f"op {op_conf.name!r} has no op type")
    return which


def _attr_value(attr) -> Any:
    which = attr.WhichOneof("value")
    if which is None:
        return None
    v = getattr(attr, which)
    if which in ("at_shape", "at_stride"):
        return tuple(v.dim)
    if which.startswith("at_list_"):
        if which in ("at_list_shape", "at_list_stride"):
            return [tuple(s.dim) for s in v.val]
        return list(v.val)
    return v


def _user_blobs(args, order) -> Dict[str, str]:
    names = list(order) or sorted(args)
    return {f"{arg}_{i}": lbn for arg in names if arg in args for i, lbn in enumerate(args[arg].s)}


def _system_blobs(op_conf, bns, lbn_shapes) -> Tuple[Dict[str, str], Dict[str, str]]:
    """Inputs and outputs of a system op: outputs are `<op>/<bn>`, inputs name their lbn in the
    conf."""
    conf = getattr(op_conf, op_conf.WhichOneof("op_type"))
    inputs, outputs = {}, {}
    for bn in bns:
        lbn = f"{op_conf.name}/{bn}"
        if lbn in lbn_shapes:
            outputs[bn] = lbn
            continue
        field = conf.DESCRIPTOR.fields_by_name.get(bn)
        value = getattr(conf, bn, None) if field is not None else None
        if isinstance(value, str) and value:
            inputs[bn] = value
        elif value is not None and hasattr(value, "__len__") and len(value) == 1:
            inputs[bn] = value[0]
        else:
            raise GraphError(
                f"cannot find the blob {bn!r} of system op {op_conf.name!r} "
                f"({op_conf.WhichOneof('op_type')})"
            )
    return inputs, outputs


def _placements(job) -> Dict[str, Placement]:
    by_op: Dict[str, Placement] = {}
    for group in job.placement.placement_group:
        pc = group.parallel_conf
        ranks = []
        for name in pc.device_name:
            m = _DEVICE_NAME.match(name)
            if not m:
                raise GraphError(f"unsupported device name {name!r} in the Job's placement")
            ranks.append(int(m.group(1)))
        hierarchy = tuple(pc.hierarchy.dim) or (len(ranks),)
        placement = Placement(pc.device_tag, tuple(ranks), hierarchy)
        for name in group.op_set.op_name:
            by_op[name] = placement
    return by_op


def signatures_of(job) -> Dict[str, Signature]:
    view = job.job_parallel_view_conf
    sigs: Dict[str, Signature] = {}
    for name, nd_sig in view.op_name2nd_sbp_signature_conf.items():
        sigs[name] = Signature(
            {
                bn: tuple(from_proto(p) for p in nd.sbp_parallel)
                for bn, nd in nd_sig.bn_in_op2nd_sbp.items()
            }
        )
    for name, sig in view.op_name2sbp_signature_conf.items():
        if name not in sigs:
            sigs[name] = Signature(
                {bn: (from_proto(p),) for bn, p in sig.bn_in_op2sbp_parallel.items()}
            )
    return sigs


def _role(op_conf, kind: str) -> str:
    if op_conf.name.startswith("System-"):
        return "system"
    if kind == "variable_conf":
        return "variable"
    if kind in _IO_TYPES:
        return "io"
    if is_optimizer_op(kind):
        return "optimizer"
    return "forward"


def _assign_scopes(ops: List[Op], tensors: Dict[str, Tensor]) -> None:
    """Variables and optimizer ops take the scope of the parameter they update."""
    by_name = {op.name: op for op in ops}
    for op in ops:
        update = update_of(op)
        if update is None:
            continue
        model_var = by_name[tensors[op.inputs[update.model]].producer]
        op.scope = model_var.scope
        for lbn in op.inputs.values():
            producer = by_name[tensors[lbn].producer]
            if producer.role == "variable" and producer is not model_var:
                producer.scope = model_var.scope


def read_job(job) -> Graph:
    """Job proto (or its serialized bytes) -> ir.Graph. Raises GraphError on a foreign Job."""
    if isinstance(job, (bytes, bytearray)):
        parsed = job_pb2.Job()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                parsed.ParseFromString(bytes(job))
        except Exception as e:  # protobuf raises DecodeError, a bare Exception subclass
            raise GraphError(f"not a serialized OneFlow Job: {e}") from None
        if not parsed.net.op:
            raise GraphError("not a serialized OneFlow Job: the bytes parse to a Job with no ops")
        job = parsed
    if not isinstance(job, job_pb2.Job):
        raise GraphError(f"expected a OneFlow Job proto, got {type(job).__name__}")
    shapes = job.helper.lbn2logical_blob_desc
    if not job.net.op:
        raise GraphError("the Job has no ops")
    if not shapes:
        raise GraphError(
            "the Job has no logical shapes (helper.lbn2logical_blob_desc is empty): "
            "pass the Job returned by nn.Graph.build_graph(), not the forward-only job"
        )
    placements = _placements(job)
    native = signatures_of(job)
    tensors: Dict[str, Tensor] = {}
    ops: List[Op] = []
    for op_conf in job.net.op:
        kind = op_type(op_conf)
        if op_conf.name not in placements:
            raise GraphError(f"op {op_conf.name!r} has no placement in the Job")
        if op_conf.HasField("user_conf"):
            uc = op_conf.user_conf
            inputs = _user_blobs(uc.input, uc.input_order)
            outputs = _user_blobs(uc.output, uc.output_order)
            attrs = {k: _attr_value(v) for k, v in uc.attr.items()}
        else:
            sig = native.get(op_conf.name)
            if sig is None:
                raise GraphError(f"system op {op_conf.name!r} has no SBP signature in the Job")
            inputs, outputs = _system_blobs(op_conf, list(sig), shapes)
            attrs = {}
            if kind == "variable_conf":
                attrs = {
                    "nd_sbp": list(op_conf.variable_conf.nd_sbp),
                    "shape": tuple(op_conf.variable_conf.shape.dim),
                }
        for obn, lbn in outputs.items():
            desc = shapes.get(lbn) if lbn in shapes else None
            if desc is None:
                raise GraphError(
                    f"output {lbn!r} of op {op_conf.name!r} has no logical shape in the Job"
                )
            dtype = data_type_pb2.DataType.Name(desc.data_type)
            tensors[lbn] = Tensor(
                lbn, tuple(desc.shape.dim), _DTYPES.get(dtype, dtype), op_conf.name, obn
            )
        ops.append(
            Op(
                op_conf.name,
                kind,
                inputs,
                outputs,
                placements[op_conf.name],
                attrs,
                role=_role(op_conf, kind),
                scope=module_scope(op_conf.name),
                native=native.get(op_conf.name),
            )
        )
    train = job.job_conf.train_conf if job.job_conf.HasField("train_conf") else None
    loss_grad = train.loss_grad_lbn[0] if train is not None and train.loss_grad_lbn else None
    assign_roles(ops, tensors, loss_grad)
    _assign_scopes(ops, tensors)
    return Graph(job.job_conf.job_name, ops, tensors.values())
