"""SBP values, n-D SBP and op signatures, written the way OneFlow prints them.

An n-D SBP holds one SBP per mesh axis: `(S(0), B)` on a 2-D mesh means "split along
tensor axis 0 across mesh axis 0, replicated across mesh axis 1". A signature maps each
blob name of an op (`a_0`, `out_0`, ...) to the n-D SBP it takes there. Everything here is
plain data: hashable, ordered, and cheap to compare, because the search compares millions.
"""

import functools
import re
from typing import Iterable, Iterator, Mapping, NamedTuple, Optional, Sequence, Tuple

from .errors import ConfigError


class Sbp(NamedTuple):
    """One mesh axis' placement of a tensor: split along `axis`, broadcast, or partial-sum."""

    kind: str  # "S", "B" or "P"
    axis: int = -1

    def __str__(self) -> str:
        return f"S({self.axis})" if self.kind == "S" else self.kind

    def __repr__(self) -> str:
        return str(self)

    @property
    def is_split(self) -> bool:
        return self.kind == "S"


B = Sbp("B")
P = Sbp("P")


def S(axis: int) -> Sbp:
    if axis < 0:
        raise ConfigError(f"split axis must be >= 0, not {axis}")
    return Sbp("S", axis)


NdSbp = Tuple[Sbp, ...]

_ONE = re.compile(r"\s*(?:S\(\s*(\d+)\s*\)|(B)|(P))\s*$")


def parse_sbp(text: str) -> Sbp:
    """Parse `S(0)`, `B` or `P` (also OneFlow's `split(0)` / `broadcast` / `partial_sum`)."""
    long_forms = {"broadcast": "B", "partial_sum": "P"}
    t = text.strip()
    t = long_forms.get(t, t)
    m = re.match(r"split\(\s*(?:dim=|axis=)?(\d+)\s*\)$", t)
    if m:
        return S(int(m.group(1)))
    m = _ONE.match(t)
    if not m:
        raise ConfigError(f"not an SBP: {text!r} (expected S(k), B or P)")
    return S(int(m.group(1))) if m.group(1) is not None else Sbp(m.group(2) or m.group(3))


def parse_nd(text: str) -> NdSbp:
    """Parse `S(0)` (1-D) or `(S(0), B)` (n-D) into an n-D SBP."""
    t = text.strip()
    if t.startswith("(") and t.endswith(")") and not re.match(r"^\(\s*\d+\s*\)$", t[1:]):
        inner = t[1:-1]
        parts = [p for p in re.split(r",(?![^()]*\))", inner) if p.strip()]
        if not parts:
            raise ConfigError(f"empty n-D SBP: {text!r}")
        return tuple(parse_sbp(p) for p in parts)
    return (parse_sbp(t),)


@functools.lru_cache(maxsize=None)
def format_nd(nd: NdSbp) -> str:
    """OneFlow's notation: `S(0)` for one mesh axis, `(S(0), B)` for several (memoised: a plan's
    report and timelines name the same few SBPs tens of thousands of times)."""
    if len(nd) == 1:
        return str(nd[0])
    return "(" + ", ".join(str(s) for s in nd) + ")"


def broadcast(ndim: int) -> NdSbp:
    return (B,) * ndim


def split_axes(nd: NdSbp) -> Tuple[int, ...]:
    """Tensor axes that some mesh axis splits (with repetition)."""
    return tuple(s.axis for s in nd if s.is_split)


def local_shape(
    shape: Sequence[int], nd: NdSbp, hierarchy: Sequence[int]
) -> Optional[Tuple[int, ...]]:
    """Per-device shape under `nd`, splitting successively as OneFlow does (floor).

    Returns None when the SBP is invalid for the shape: a split axis out of range or a
    dimension smaller than the mesh axis splitting it (OneFlow drops such candidates).
    """
    dims = list(shape)
    for sbp, h in zip(nd, hierarchy):
        if sbp.is_split:
            if sbp.axis >= len(dims) or dims[sbp.axis] < h:
                return None
            dims[sbp.axis] //= h
    return tuple(dims)


def evenly_split(shape: Sequence[int], nd: NdSbp, hierarchy: Sequence[int]) -> bool:
    """Whether every split divides its (already split) dimension exactly."""
    dims = list(shape)
    for s, h in zip(nd, hierarchy):
        if s.is_split:
            if s.axis >= len(dims) or dims[s.axis] % h:
                return False
            dims[s.axis] //= h
    return True


class Signature(Mapping[str, NdSbp]):
    """An op's SBP signature: blob name -> n-D SBP. Immutable and hashable."""

    __slots__ = ("_items", "_dict", "_hash")

    def __init__(self, items: Mapping[str, NdSbp]):
        self._items = tuple(sorted((k, tuple(v)) for k, v in items.items()))
        self._dict = dict(self._items)
        self._hash = hash(self._items)

    def __getitem__(self, bn: str) -> NdSbp:
        return self._dict[bn]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        if isinstance(other, Signature):
            return self._items == other._items
        return isinstance(other, Mapping) and dict(self._items) == dict(other)

    def __repr__(self) -> str:
        return "Signature(" + format_signature(self) + ")"

    @property
    def ndim(self) -> int:
        return len(self._items[0][1]) if self._items else 0


def format_signature(sig: Mapping[str, NdSbp], bns: Optional[Iterable[str]] = None) -> str:
    keys = list(bns) if bns is not None else sorted(sig)
    return ", ".join(f"{bn}: {format_nd(sig[bn])}" for bn in keys if bn in sig)


def parse_signature(items: Mapping[str, str]) -> Signature:
    return Signature({bn: parse_nd(text) for bn, text in items.items()})


def product_signature(per_axis: Sequence[Mapping[str, Sbp]]) -> Signature:
    """Combine one 1-D signature per mesh axis into an n-D signature."""
    bns = per_axis[0].keys()
    return Signature({bn: tuple(sig[bn] for sig in per_axis) for bn in bns})
