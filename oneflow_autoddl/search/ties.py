"""Find repeated layers (identical blocks of a Transformer, twin convs of a VGG stage).

Repeated modules show up as sibling scopes that differ in one integer component
(`m.h.0.attn.q`, `m.h.1.attn.q`, ...). Two siblings are identical when their ops, in
order, have the same types, shapes, attributes and internal wiring. The k-th op of every
identical sibling is then tied to the first sibling's k-th op: the search gives them one
choice, and a 96-layer model costs about what one layer does to plan.

Only siblings holding parameters are layers in that sense. A stateless one (a ReLU, a
pool) is alike its siblings by shape alone while its neighbours differ: tying VGG's two
classifier ReLUs forced the second to split like the first, where OneFlow's own pass
keeps the small last layer replicated and moves fewer bytes.
"""

import re
from typing import Dict, List, Tuple

from ..ir import CHECKPOINT_COPY_PREFIX, Graph

_INDEX = re.compile(r"^\d+$")


def _family(scope: str):
    """`m.h.3.attn.q` -> (`m.h`, 3); None when no path component is an integer."""
    parts = scope.split(".")
    for i, p in enumerate(parts):
        if _INDEX.match(p):
            return ".".join(parts[:i]), int(p)
    return None


def _member_key(graph: Graph, names: List[str], prefix: str):
    """A structural fingerprint of one sibling's ops, independent of op names."""
    position = {name: i for i, name in enumerate(names)}
    key = []
    for name in names:
        op = graph.op(name)
        rel_scope = op.scope[len(prefix) :].lstrip(".")
        wiring = []
        for ibn, lbn in op.inputs.items():
            t = graph.tensor(lbn)
            src = (position[t.producer], t.obn) if t.producer in position else "outside"
            wiring.append((ibn, src, t.shape, t.dtype))
        outs = tuple(
            (obn, graph.tensor(lbn).shape, graph.tensor(lbn).dtype)
            for obn, lbn in op.outputs.items()
        )
        attrs = tuple(sorted((k, repr(v)) for k, v in op.attrs.items()))
        key.append((rel_scope, op.type, op.role, tuple(wiring), outs, attrs))
    return tuple(key)


def repeated_blocks(graph: Graph) -> List[str]:
    """The scopes of the repeated layers tie_ops finds (every member, the first included), in
    the graph's order: the blocks whose activations can be recomputed as one decision."""
    members, blocks = _members(graph), []
    for prefix, indices in _by_prefix(members).items():
        keys: Dict[tuple, List[int]] = {}
        for index in sorted(indices):
            names = members[(prefix, index)]
            if any(graph.op(name).role == "variable" for name in names):
                keys.setdefault(_member_key(graph, names, f"{prefix}.{index}"), []).append(index)
        blocks += [f"{prefix}.{i}" for same in keys.values() if len(same) > 1 for i in same]
    return blocks


def _members(graph: Graph) -> Dict[Tuple[str, int], List[str]]:
    members: Dict[Tuple[str, int], List[str]] = {}
    for op in graph.ops.values():  # topological order, so member op lists are ordered too
        fam = _family(op.scope)
        if fam is not None and not op.name.startswith(CHECKPOINT_COPY_PREFIX):
            members.setdefault(fam, []).append(op.name)
    return members


def _by_prefix(members: Dict[Tuple[str, int], List[str]]) -> Dict[str, List[int]]:
    by_prefix: Dict[str, List[int]] = {}
    for prefix, index in members:
        by_prefix.setdefault(prefix, []).append(index)
    return by_prefix


def tie_ops(graph: Graph) -> Dict[str, str]:
    """op name -> the op whose choice it shares (itself when it is not tied). A recomputed copy
    of an op (oneflow_autoddl.recompute) shares its original's: OneFlow gives it the same SBP."""
    members = _members(graph)
    rep = {name: name for name in graph.ops}
    for prefix, indices in _by_prefix(members).items():
        first_of_key: Dict[tuple, List[str]] = {}
        for index in sorted(indices):
            names = members[(prefix, index)]
            if not any(graph.op(name).role == "variable" for name in names):
                continue
            key = _member_key(graph, names, f"{prefix}.{index}")
            if key in first_of_key:
                for name, head in zip(names, first_of_key[key]):
                    rep[name] = rep[head]
            else:
                first_of_key[key] = names
    for name in graph.ops:
        original = name[len(CHECKPOINT_COPY_PREFIX) :]
        if name.startswith(CHECKPOINT_COPY_PREFIX) and original in rep:
            rep[name] = rep[original]
    return rep
