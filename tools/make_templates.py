"""Trace the examples' training graphs once and write them as symbolic templates.

    python -m tools.make_templates        # from the repository root; one rank, plain python

The planner must plan GPT-3 on 1,024 devices where OneFlow cannot even allocate the
model, so `oneflow_autoddl.models` instantiates these templates instead of tracing. Each
template is a real OneFlow 0.9.0 trace (`nn.Graph.build_graph`, never run) of an example's
training graph -- forward, backward and optimizer ops as OneFlow makes them -- with
  * every free size traced as a distinct prime, so every dimension (and every shape or
    size-dependent int attr) factorises into a monomial of the sizes (models/symbols.py);
  * GPT traced with 3 blocks, standing for the first, the middle and the last block.
A template is only written after it reproduces, op for op, further live traces: other
primes, and for GPT 2 and 4 blocks. Anything it cannot reproduce stops the tool.
"""

import argparse
import contextlib
import json
import logging
import os
import re
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import oneflow as flow

from examples.common import TrainGraph
from examples.gpt_model import GPT, GPTLoss
from examples.vgg_model import CONFIGS, VGG, scaled
from oneflow_autoddl.adapter.job import read_job
from oneflow_autoddl.ir import Graph
from oneflow_autoddl.models.symbols import factorise
from oneflow_autoddl.models.template import TEMPLATE_BLOCKS, TEMPLATE_DIR, Template

log = logging.getLogger("oneflow_autoddl")

GRAPH_NAME = "TrainGraph_0"  # what OneFlow names the first TrainGraph of a process
BLOCK_PREFIX = "model.h"  # GPT's blocks: nn.Sequential `h` of the module the examples call `model`
# Distinct primes for the free sizes; the second assignment checks the factorisation. VGG's
# last spatial size must not be 3: RGB channels and 3x3 kernels are the constant 3.
GPT_SIZES = {"batch": 5, "seq_len": 11, "heads": 3, "head_dim": 7, "vocab": 13}
GPT_CHECK = {"batch": 7, "seq_len": 5, "heads": 11, "head_dim": 3, "vocab": 17}
VGG_SIZES = {"batch": 7, "channels": 5, "spatial": 13, "classes": 11}
VGG_CHECK = {"batch": 11, "channels": 7, "spatial": 5, "classes": 13}
VGG_DEPTHS = (11, 13, 16, 19)
# OneFlow numbers the learning-rate scheduler op with a process-wide counter.
_SCHEDULER = re.compile(r"(System-Train-LearningRate-Scheduler)_\d+")
_COUNTER = re.compile(r"^(.*)-(\d+)$")


class TemplateError(RuntimeError):
    """A trace the template format cannot express, or a template that does not reproduce a trace."""


@contextlib.contextmanager
def fused_layer_norm():
    """nn.LayerNorm as OneFlow runs it on CUDA tensors: one `layer_norm` op (the CUDA branch of
    oneflow/nn/modules/normalization.py). Its CPU kernel is unimplemented, but a trace only
    infers shapes, so the CUDA graph can be traced here."""
    original = flow.nn.LayerNorm.forward

    def forward(self, x):
        axis = len(x.shape) - len(self.normalized_shape)
        return flow._C.layer_norm_affine(
            x,
            self.weight,
            self.bias,
            begin_norm_axis=axis,
            begin_params_axis=axis,
            epsilon=self.eps,
        )

    flow.nn.LayerNorm.forward = forward
    try:
        yield
    finally:
        flow.nn.LayerNorm.forward = original


def _trace(model, loss_fn, optimizer, inputs) -> Graph:
    """The examples' TrainGraph (data parallel, so no planner runs), traced on rank 0 only."""

    graph = TrainGraph(model, loss_fn, optimizer, argparse.Namespace(plan="dp"))
    graph.build_graph(*inputs)
    return read_job(graph._full_graph_proto)


def _one_device():
    if flow.env.get_world_size() != 1:
        raise TemplateError("trace templates on one rank: run with plain python, not the launcher")
    return flow.placement("cpu", ranks=[0]), [flow.sbp.broadcast]


def _batch(place, broadcast, *shape, dtype=flow.float32):
    return (
        flow.zeros(*shape, dtype=dtype)
        .to_global(place, broadcast)
        .to_global(sbp=[flow.sbp.split(0)])
    )


def trace_gpt(sizes: Mapping[str, int], layers: int, fused: bool) -> Graph:
    """examples/gpt.py's training graph (GPT + GPTLoss, AdamW); `fused`: LayerNorm as on CUDA."""

    place, broadcast = _one_device()
    model = GPT(
        layers, sizes["heads"] * sizes["head_dim"], sizes["heads"], sizes["seq_len"], sizes["vocab"]
    )
    model = model.to_global(place, broadcast)
    optimizer = flow.optim.AdamW(model.parameters(), lr=3e-3)
    tokens = _batch(place, broadcast, sizes["batch"], sizes["seq_len"], dtype=flow.int64)
    with fused_layer_norm() if fused else contextlib.nullcontext():
        return _trace(model, GPTLoss(), optimizer, (tokens, tokens))


def trace_vgg(depth: int, sizes: Mapping[str, int]) -> Graph:
    """examples/vgg.py's training graph (VGG, cross entropy, SGD with momentum)."""

    place, broadcast = _one_device()
    width = sizes["channels"] / 64
    channels = sorted({scaled(c, width) for c in CONFIGS[depth] + [4096] if c != "M"})
    expected = sorted({sizes["channels"] * k for k in (1, 2, 4, 8, 64)})
    if channels != expected:
        raise TemplateError(
            f"width {width} gives channels {channels}, not C, 2C, 4C, 8C, 64C = {expected}"
        )
    image = 32 * sizes["spatial"]
    model = VGG(depth, width, image, sizes["classes"]).to_global(place, broadcast)
    optimizer = flow.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    images = _batch(place, broadcast, sizes["batch"], 3, image, image)
    labels = _batch(place, broadcast, sizes["batch"], dtype=flow.int64)
    return _trace(model, flow.nn.CrossEntropyLoss(), optimizer, (images, labels))


def _block_of(scope: str, blocks: int) -> Optional[int]:
    if not blocks:
        return None
    m = re.match(rf"^{re.escape(BLOCK_PREFIX)}\.(\d+)(?:\.|$)", scope)
    return int(m.group(1)) if m else None


def _abstract(text: str, block: Optional[int], graph_name: str) -> str:
    """Op name or scope with the graph's name and the block index as placeholders."""
    text = text.replace(graph_name, "{g}")
    if block is not None:
        prefix = f"{BLOCK_PREFIX}.{block}"
        if not (text == prefix or text.startswith(prefix + ".") or text.startswith(prefix + "-")):
            raise TemplateError(f"{text!r} is in block {block} but does not start with {prefix}")
        text = f"{BLOCK_PREFIX}.{{b}}" + text[len(prefix) :]
    return text


def _single_device(ops) -> Set[str]:
    """The train step and what only it feeds (adam's bias corrections): OneFlow keeps these
    on one device whatever the mesh, and on a one-rank trace they cannot be told apart."""
    single: Set[str] = set()
    producers = {lbn: op.name for op in ops for lbn in op.outputs.values()}
    for op in ops:
        ins = [producers[lbn] for lbn in op.inputs.values()]
        if op.role == "system" or (ins and op.role != "variable" and all(p in single for p in ins)):
            single.add(op.name)
    return single


def _sweeps(blocks: Sequence[Optional[int]], count: int) -> List[Optional[int]]:
    """Number the runs of consecutive block ops; each must visit 0..count-1 (or back) once, in
    order."""
    sweep_of: List[Optional[int]] = []
    visits: List[List[int]] = []
    for b in blocks:
        if b is None:
            sweep_of.append(None)
            continue
        if not sweep_of or sweep_of[-1] is None:
            visits.append([])
        if not visits[-1] or visits[-1][-1] != b:
            visits[-1].append(b)
        sweep_of.append(len(visits) - 1)
    for k, seen in enumerate(visits):
        if seen not in (list(range(count)), list(reversed(range(count)))):
            raise TemplateError(
                f"run {k} of block ops visits blocks {seen}, not 0..{count - 1} in order"
            )
    return sweep_of


def sized_attrs(a: Graph, b: Graph) -> Tuple[Set[Tuple[str, str]], Set[Tuple[str, str]]]:
    """(op type, attr) pairs whose values differ between traces at two sizes: ints, made
    symbolic, and floats (such as 1/sqrt(head_dim)), kept at the traced value."""
    if [op.type for op in a.ops.values()] != [op.type for op in b.ops.values()]:
        raise TemplateError(f"{a.name} and {b.name} differ in op types, not only in sizes")
    ints, floats = set(), set()
    for x, y in zip(a.ops.values(), b.ops.values()):
        for key, value in x.attrs.items():
            if key == "shape" or value == y.attrs.get(key):
                continue
            if isinstance(value, float):
                floats.add((x.type, key))
            elif isinstance(value, int) or (
                isinstance(value, list) and all(isinstance(v, int) for v in value)
            ):
                ints.add((x.type, key))
            else:
                raise TemplateError(
                    f"attr {key} of {x.name} depends on the sizes but is a {type(value).__name__}"
                )
    return ints, floats


def make_template(
    graph: Graph, model: str, sizes: Mapping[str, int], blocks: int, int_attrs: Set[Tuple[str, str]]
) -> Dict[str, Any]:
    """The JSON template of a live trace (see models/template.py for the format)."""
    ops = list(graph.ops.values())
    position = {op.name: i for i, op in enumerate(ops)}
    block = [_block_of(op.scope, blocks) for op in ops]
    if blocks and sorted(set(b for b in block if b is not None)) != list(range(blocks)):
        raise TemplateError(f"{model}: expected blocks 0..{blocks - 1} under {BLOCK_PREFIX}")
    sweep = _sweeps(block, blocks) if blocks else block
    single = _single_device(ops)
    counter = -1
    out = []
    for pos, op in enumerate(ops):
        b = block[pos]
        d: Dict[str, Any] = {"name": _abstract(op.name, b, graph.name)}
        m = _COUNTER.match(op.name)
        if m:
            d["name"] = _abstract(m.group(1), b, graph.name)
            d["step"] = int(m.group(2)) - counter
            counter = int(m.group(2))
        d.update(type=op.type, role=op.role, scope=_abstract(op.scope, b, graph.name))
        if b is not None:
            d.update(block=b, sweep=sweep[pos])
        if op.name in single:
            d["single"] = True
        d["inputs"] = {}
        for ibn, lbn in op.inputs.items():
            t = graph.tensors[lbn]
            if lbn != f"{t.producer}/{t.obn}":
                raise TemplateError(f"blob {lbn!r} is not named <producer>/<bn>")
            p = position[t.producer]
            ref: List[Any] = [p, t.obn]
            if b is None and block[p] not in (None, 0, blocks - 1):
                raise TemplateError(
                    f"{op.name} outside the blocks reads the middle block ({t.producer})"
                )
            if b is not None and block[p] is not None and block[p] != b:
                ref.append(block[p] - b)
            d["inputs"][ibn] = ref
        d["outputs"] = {}
        for obn, lbn in op.outputs.items():
            if lbn != f"{op.name}/{obn}":
                raise TemplateError(f"output {lbn!r} of {op.name} is not named <op>/<bn>")
            t = graph.tensors[lbn]
            d["outputs"][obn] = [[factorise(n, sizes) for n in t.shape], t.dtype]
        attrs, sym = {}, {}
        for key, value in sorted(op.attrs.items()):  # proto map order is arbitrary
            if isinstance(value, tuple):
                sym[key] = ["shape", [factorise(n, sizes) for n in value]]
            elif (op.type, key) in int_attrs:
                sym[key] = (
                    ["ints", [factorise(n, sizes) for n in value]]
                    if isinstance(value, list)
                    else ["int", factorise(value, sizes)]
                )
            else:
                attrs[key] = value
        d["attrs"] = attrs
        if sym:
            d["sym_attrs"] = sym
        out.append(d)
    if blocks:
        _check_aligned(out)
    return {
        "model": model,
        "made_by": "python -m tools.make_templates",
        "oneflow": flow.__version__,
        "sizes": dict(sizes),
        "blocks": blocks,
        "graph": GRAPH_NAME,
        "ops": out,
    }


def _check_aligned(ops: List[Dict[str, Any]]) -> None:
    """Blocks 0, 1, 2 must hold the same ops in the same order: a block's op is found by its
    index in the block, whichever template block stands in for it."""
    segments: Dict[Tuple[int, int], List[Tuple]] = {}
    for d in ops:
        if "block" in d:
            key = (d["type"], d["role"], d["name"], d["scope"], sorted(d["outputs"]))
            segments.setdefault((d["sweep"], d["block"]), []).append(key)
    for (sweep, b), seg in segments.items():
        if seg != segments[(sweep, 0)]:
            raise TemplateError(f"block {b} differs from block 0 in run {sweep}")


def _normal(name: str) -> str:
    return _SCHEDULER.sub(r"\1", name)


def differences(
    built: Graph, live: Graph, skip_attrs: Set[Tuple[str, str]] = frozenset()
) -> List[str]:
    """Where an instantiated template and a live trace differ, op by op (names up to the
    scheduler's process-wide counter; `skip_attrs` are float attrs kept at traced values)."""
    if len(built) != len(live):
        return [f"{len(built)} ops built, {len(live)} traced"]
    problems = []
    for i, (x, y) in enumerate(zip(built.ops.values(), live.ops.values())):
        what = []
        if _normal(x.name) != _normal(y.name):
            what.append(f"name {x.name} != {y.name}")
        for field in ("type", "role", "scope", "placement"):
            if getattr(x, field) != getattr(y, field):
                what.append(f"{field} {getattr(x, field)} != {getattr(y, field)}")
        if [(k, _normal(v)) for k, v in x.inputs.items()] != [
            (k, _normal(v)) for k, v in y.inputs.items()
        ]:
            what.append(f"inputs {x.inputs} != {y.inputs}")
        xo = [(k, built.tensors[v].shape, built.tensors[v].dtype) for k, v in x.outputs.items()]
        yo = [(k, live.tensors[v].shape, live.tensors[v].dtype) for k, v in y.outputs.items()]
        if xo != yo:
            what.append(f"outputs {xo} != {yo}")
        xa = {k: v for k, v in x.attrs.items() if (x.type, k) not in skip_attrs}
        ya = {k: v for k, v in y.attrs.items() if (y.type, k) not in skip_attrs}
        if xa != ya:
            what.append(f"attrs {xa} != {ya}")
        if what:
            problems.append(f"op {i} ({y.name}): " + "; ".join(what))
    return problems


def _check(
    template: Template,
    live: Graph,
    sizes: Mapping[str, int],
    layers: Optional[int],
    skip_attrs: Set[Tuple[str, str]] = frozenset(),
) -> None:
    built = template.instantiate(sizes, (1,), "cpu", (0,), layers=layers, graph_name=live.name)
    problems = differences(built, live, skip_attrs)
    where = f"{dict(sizes)}" + (f", {layers} layers" if layers else "")
    if problems:
        raise TemplateError(
            f"template {template.model} does not reproduce the trace at {where}: "
            f"{len(problems)} op(s) differ, first:\n  " + "\n  ".join(problems[:5])
        )
    log.info("  %s reproduces the live trace at %s (%d ops)", template.model, where, len(live))


def _make(model: str, trace, sizes, check_sizes, blocks: int) -> Dict[str, Any]:
    """Trace, make the template, and check it against traces at other sizes (and depths)."""
    layers = TEMPLATE_BLOCKS if blocks else None
    first, second = trace(sizes, layers), trace(check_sizes, layers)
    ints, floats = sized_attrs(first, second)
    if floats:
        log.warning(
            "  %s: float attrs %s depend on the sizes; templates keep the traced values",
            model,
            sorted(floats),
        )
    data = make_template(first, model, sizes, blocks, ints)
    template = Template(json.loads(json.dumps(data)))  # exactly what load() will see
    _check(template, second, check_sizes, layers, skip_attrs=floats)
    if blocks:
        _check(template, trace(sizes, 2), sizes, 2)
        _check(template, trace(check_sizes, 4), check_sizes, 4, skip_attrs=floats)
    return data


def _write(data: Dict[str, Any], path: str) -> None:
    """One op per line: reviewable diffs when a OneFlow upgrade changes a few ops."""
    head = json.dumps({k: v for k, v in data.items() if k != "ops"}, indent=1)[:-2]
    body = ",\n".join(json.dumps(op) for op in data["ops"])
    with open(path, "w") as f:
        f.write(f'{head},\n "ops": [\n{body}\n]}}\n')


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.make_templates",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", default=TEMPLATE_DIR, help="directory for the JSON templates")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    os.makedirs(args.out, exist_ok=True)
    jobs = [
        (
            f"gpt-{variant}",
            lambda s, n, fused=fused: trace_gpt(s, n, fused),
            GPT_SIZES,
            GPT_CHECK,
            TEMPLATE_BLOCKS,
        )
        for variant, fused in (("cpu", False), ("cuda", True))
    ]
    jobs += [
        (f"vgg{depth}", lambda s, n, depth=depth: trace_vgg(depth, s), VGG_SIZES, VGG_CHECK, 0)
        for depth in VGG_DEPTHS
    ]
    for model, trace, sizes, check_sizes, blocks in jobs:
        log.info("%s: tracing at %s", model, sizes)
        data = _make(model, trace, sizes, check_sizes, blocks)
        path = os.path.join(args.out, f"{model}.json")
        _write(data, path)
        log.info("  wrote %s (%d ops)", path, len(data["ops"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
