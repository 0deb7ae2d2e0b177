"""The one registry of op SBP rules, and n-D candidate signatures built from them.

A rule lists an op type's 1-D signatures exactly as OneFlow 0.9.0's `GetSbp` builds them
(`oneflow/user/ops/*_op.cpp`); the registry appends the all-broadcast signature OneFlow
always adds, forms the n-D candidates as the per-mesh-axis product, and drops those the
logical shapes rule out (a split axis out of range, or a dimension smaller than the mesh
axes splitting it). A new op type is one decorated function in one module of this package.
A rule leaves out a signature OneFlow lists only where it computes something else than the
data-parallel plan (its docstring says what and why): a plan never changes the math.
"""

import itertools
import math
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ..ir import Graph, Op
from ..sbp import B, NdSbp, S, Sbp, Signature, evenly_split, local_shape, product_signature

OneD = Dict[str, Sbp]


class OpView:
    """What a rule may read of an op: blob names, logical shapes, attributes, the mesh axis size."""

    def __init__(self, graph: Graph, op: Op, axis_size: int):
        self.graph, self.op, self.h = graph, op, axis_size
        self.ins: List[str] = list(op.inputs)
        self.outs: List[str] = list(op.outputs)
        self.bns: List[str] = self.ins + self.outs

    def shape(self, bn: str) -> Tuple[int, ...]:
        return self.graph.shape(self.op, bn)

    def ndim(self, bn: str) -> int:
        return len(self.shape(bn))

    def dtype(self, bn: str) -> str:
        return self.graph.tensor(self.op.inputs.get(bn) or self.op.outputs[bn]).dtype

    def attr(self, name: str, default: Any = None) -> Any:
        return self.op.attrs.get(name, default)

    def has(self, bn: str) -> bool:
        return bn in self.op.inputs or bn in self.op.outputs

    def arg(self, name: str) -> List[str]:
        """Blob names of one (possibly repeated) arg: `arg("in")` -> [in_0, in_1, ...]."""
        return [
            bn
            for bn in self.bns
            if bn.rsplit("_", 1)[0] == name and bn.rsplit("_", 1)[-1].isdigit()
        ]

    def all(self, sbp: Sbp, bns: Optional[Sequence[str]] = None) -> OneD:
        return {bn: sbp for bn in (self.bns if bns is None else bns)}


RuleFn = Callable[[OpView], List[OneD]]
# The kernel kind of an op (cost.cluster.KERNEL_KINDS) where it runs below memory bandwidth:
# a kind, or a function of the op's view deciding it from shapes and attributes.
KernelFn = Callable[[OpView], Optional[str]]
# FLOPs of one device's share: (op attrs, blob name -> local shape) -> floating-point operations.
FlopsFn = Callable[[Dict[str, Any], Dict[str, Tuple[int, ...]]], float]
# Scratch memory of one device's kernel while it runs (its `SetInferTmpSizeFn`): (op attrs, blob
# name -> local shape) -> elements of the op's first input's dtype.
WorkspaceFn = Callable[[Dict[str, Any], Dict[str, Tuple[int, ...]]], float]
# Elements one device's kernel passes over at a kernel kind's rate, on top of its roofline, over its
# whole share of the batch (CPU convolutions: the columns of their im2col / col2im pass, and the
# filter every sample's matrix product reads again): (op attrs, blob name -> local shape) ->
# elements of the op's first input's dtype.
PassFn = Callable[[Dict[str, Any], Dict[str, Tuple[int, ...]]], float]


@dataclass(frozen=True)
class Update:
    """The blobs of an optimizer's update op: the parameter it writes in place, its gradient, and
    the other buffers it updates in place (optimizer state, a half-precision copy). The parameter
    and the buffers are mutable: OneFlow never boxes them, so their variables hold the SBP the
    update takes (search.units)."""

    model: str
    grad: str
    state: Tuple[str, ...] = ()

    @property
    def mutable(self) -> Tuple[str, ...]:
        return (self.model,) + self.state


@dataclass(frozen=True)
class Contraction:
    """A matrix product as batch independent products of m x k by k x n. `a_axes` and `b_axes`
    are the (rows, contracted) axes of a and the (contracted, columns) axes of b in their shapes,
    where one axis holds each (None for a product over several stacked axes)."""

    batch: int
    m: int
    k: int
    n: int
    a_axes: Optional[Tuple[int, int]] = None
    b_axes: Optional[Tuple[int, int]] = None


ContractionFn = Callable[[OpView], Contraction]
# Whether an op may be replicated (the all-broadcast signature OneFlow appends to every list).
ReplicatedFn = Callable[[OpView], bool]
# Whether the op's kernel computes an n-D signature (a product of its 1-D ones) right: a few
# kernels read some products wrongly, and OneFlow would fail or compute something else.
NdFn = Callable[[OpView, Signature], bool]


@dataclass(frozen=True)
class Rule:
    fn: RuleFn
    # Inputs OneFlow requires to keep their producer's SBP (is_mutable: optimizer state, assign's
    # ref; or an n-D infer fn that copies the producer's SBP, as ones_like's `like`).
    same_sbp: Tuple[str, ...] = ()
    # OneFlow fixes this op's signature by itself (attr-driven n-D inference): never re-plan it.
    fixed: bool = False
    flops: Optional[FlopsFn] = None
    kernel: Union[str, KernelFn, None] = None
    update: Optional[Update] = None  # an optimizer's update op: its blobs
    optimizer: bool = False  # an op of the optimizer's (updates, and e.g. Adam's bias correction)
    contraction: Optional[ContractionFn] = None  # a matrix product: its dimensions and axes
    workspace: Optional[WorkspaceFn] = None  # the kernel's scratch buffer
    passes: Tuple[Tuple[str, PassFn], ...] = ()  # (kernel kind, elements): passes below roofline
    # False where replicating the op computes something else than splitting it does (training
    # BatchNorm's statistics are per shard): then the rule's own list is all there is.
    replicated: Union[bool, ReplicatedFn] = True
    nd_computes: Optional[NdFn] = None  # None: every n-D product computes right

    def kernel_kind(self, v: OpView) -> Optional[str]:
        return self.kernel(v) if callable(self.kernel) else self.kernel

    def may_replicate(self, v: OpView) -> bool:
        return self.replicated(v) if callable(self.replicated) else self.replicated


_RULES: Dict[str, Rule] = {}


def rule(
    *op_types: str,
    same_sbp: Sequence[str] = (),
    fixed: bool = False,
    flops: Optional[FlopsFn] = None,
    kernel: Union[str, KernelFn, None] = None,
    update: Optional[Update] = None,
    optimizer: bool = False,
    contraction: Optional[ContractionFn] = None,
    workspace: Optional[WorkspaceFn] = None,
    passes: Optional[Mapping[str, PassFn]] = None,
    replicated: Union[bool, ReplicatedFn] = True,
    nd_computes: Optional[NdFn] = None,
):
    """Register `fn` as the 1-D SBP rule of `op_types`, with what else the op means: for
    compute-bound ops their FLOPs, for slow kernels their kind, for an optimizer's update its
    blobs (whose mutable ones keep their SBP), for a matrix product its dimensions, for a kernel
    with a scratch buffer its size, for a kernel that passes over data below its roofline (a
    convolution's columns and filter on CPU) the elements of each pass by kernel kind, whether
    replicating it computes what splitting it does, and which n-D products its kernel computes
    right (all where not given)."""

    def register(fn: RuleFn) -> RuleFn:
        mutable = tuple(same_sbp) + (update.mutable if update else ())
        for t in op_types:
            if t in _RULES:
                raise ValueError(f"op type {t!r} has two rules")
            _RULES[t] = Rule(
                fn,
                mutable,
                fixed,
                flops,
                kernel,
                update,
                optimizer or update is not None,
                contraction,
                workspace,
                tuple(sorted((passes or {}).items())),
                replicated,
                nd_computes,
            )
        return fn

    return register


def inner_broadcast(v: OpView) -> Optional[str]:
    """An operand repeated along the output's innermost axis (x * (n, 1)): OneFlow 0.9.0's CPU
    kernel for it runs ~100x below a plain elementwise pass (calibrate measures it). An operand
    of one element is a fill, which runs at the plain rate (a train step's sum backward: under
    15 ns an element on CPU ranks, where x * (n, 1) takes ~150)."""
    out = v.shape(v.outs[0])
    if not out or out[-1] == 1:
        return None
    per_row = [bn for bn in v.ins if math.prod(v.shape(bn)) > 1]
    return "inner_broadcast" if any(v.shape(bn)[-1] == 1 for bn in per_row) else None


def split_each_axis(v: OpView, ndim: int, bns: Optional[Sequence[str]] = None) -> List[OneD]:
    """`for k < ndim: every blob S(k)`, OneFlow's SplitForEachAxis."""
    return [v.all(S(k), bns) for k in range(ndim)]


def has_rule(op_type: str) -> bool:
    return op_type in _RULES


def get_rule(op_type: str) -> Rule:
    return _RULES[op_type]


def known_op_types() -> List[str]:
    return sorted(_RULES)


def one_d_candidates(graph: Graph, op: Op, axis_size: int) -> List[OneD]:
    """The op's 1-D signatures for a mesh axis of `axis_size` devices, all-B appended where the
    op may be replicated, deduplicated."""
    view = OpView(graph, op, axis_size)
    rule_ = _RULES[op.type]
    sigs = rule_.fn(view) + ([view.all(B)] if rule_.may_replicate(view) else [])
    seen, out = set(), []
    for sig in sigs:
        missing = set(view.bns) - set(sig)
        if missing:
            raise ValueError(
                f"rule for {op.type} left blobs {sorted(missing)} of {op.name} without SBP"
            )
        key = tuple(sorted(sig.items()))
        if key not in seen:
            seen.add(key)
            out.append({bn: sig[bn] for bn in view.bns})
    return out


def _fits(graph: Graph, op: Op, sig: Signature, hierarchy: Sequence[int]) -> bool:
    """OneFlow's shape filter; on n-D meshes splits must also be even, since 0.9.0's
    hierarchical slice boxing floors uneven pieces and fails to compile (seen on CPU)."""
    for bn, nd in sig.items():
        shape = graph.shape(op, bn)
        if local_shape(shape, nd, hierarchy) is None:
            return False
        if len(hierarchy) > 1 and not evenly_split(shape, nd, hierarchy):
            return False
    return True


# Per graph: the candidates of each op structure (_structure) found so far.
_FOUND: "weakref.WeakKeyDictionary[Graph, Dict[tuple, List[Signature]]]" = (
    weakref.WeakKeyDictionary()
)


def candidates(graph: Graph, op: Op, hierarchy: Optional[Sequence[int]] = None) -> List[Signature]:
    """Valid n-D signatures of `op` on its mesh (or `hierarchy`), in OneFlow's order. Found once
    per graph for ops alike in type, attributes and blobs (_structure): a rule reads nothing
    else (OpView), and a model's repeated layers repeat every op."""
    hierarchy = tuple(hierarchy or op.placement.hierarchy)
    found = _FOUND.setdefault(graph, {})
    key = _structure(graph, op, hierarchy)
    if key not in found:
        found[key] = _candidates(graph, op, hierarchy)
    return list(found[key])


def _structure(graph: Graph, op: Op, hierarchy: Tuple[int, ...]) -> tuple:
    """All that OpView shows a rule of `op` on `hierarchy`: its type, attributes, and each blob's
    name, logical shape and dtype, in order."""
    tensors = {bn: graph.tensor(lbn) for bn, lbn in (*op.inputs.items(), *op.outputs.items())}
    blobs = tuple((bn, t.shape, t.dtype) for bn, t in tensors.items())
    return op.type, repr(sorted(op.attrs.items())), blobs, hierarchy


def _candidates(graph: Graph, op: Op, hierarchy: Tuple[int, ...]) -> List[Signature]:
    per_axis = {h: one_d_candidates(graph, op, h) for h in set(hierarchy)}
    computes = _RULES[op.type].nd_computes if len(hierarchy) > 1 else None
    view = OpView(graph, op, 1)
    out, seen_inputs = [], set()
    for combo in itertools.product(*(per_axis[h] for h in hierarchy)):
        sig = product_signature(combo)
        if not _fits(graph, op, sig, hierarchy):
            continue
        if computes is not None and not computes(view, sig):
            continue
        if len(hierarchy) > 1 and op.inputs:
            # n-D inference reads only the inputs of a conf and takes the first candidate
            # that matches them (GreedilyFindMinCopyCostNdSbp): a later candidate with the
            # same inputs would silently become the earlier one. (Ops without inputs, the
            # variables, take their SBP from their conf instead.)
            inputs = tuple(sig[bn] for bn in op.inputs)
            if inputs in seen_inputs:
                continue
            seen_inputs.add(inputs)
        out.append(sig)
    return out


def update_of(op: Op) -> Optional[Update]:
    """The blobs of an optimizer's update op (None for any other op)."""
    r = _RULES.get(op.type)
    return r.update if r else None


def is_optimizer_op(op_type: str) -> bool:
    r = _RULES.get(op_type)
    return bool(r and r.optimizer)


def contraction_of(graph: Graph, op: Op) -> Optional[Contraction]:
    """The dimensions and axes of a matrix product (None for any other op)."""
    r = _RULES.get(op.type)
    if r is None or r.contraction is None:
        return None
    return r.contraction(OpView(graph, op, 1))


def workspace_of(op: Op):
    """The op's scratch-buffer function (None when its kernel has none)."""
    r = _RULES.get(op.type)
    return r.workspace if r else None


def passes_of(op: Op) -> Tuple[Tuple[str, PassFn], ...]:
    """The op's kernel passes below its roofline, (kernel kind, elements function) each (none for
    most ops)."""
    r = _RULES.get(op.type)
    return r.passes if r else ()


def same_sbp_inputs(op: Op) -> Tuple[str, ...]:
    r = _RULES.get(op.type)
    return tuple(bn for bn in r.same_sbp if bn in op.inputs) if r else ()


def reads_same_sbp(op: Op, bn: str) -> bool:
    """Whether `bn` is an input of `op` that must take its producer's SBP unchanged
    (`bn in same_sbp_inputs(op)`, without building the tuple: asked for every blob of a graph)."""
    r = _RULES.get(op.type)
    return r is not None and bn in r.same_sbp and bn in op.inputs


def all_broadcast(op: Op, ndim: int) -> Signature:
    nd: NdSbp = (B,) * ndim
    return Signature({bn: nd for bn in op.bns})
