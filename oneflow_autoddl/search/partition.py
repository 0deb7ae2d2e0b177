"""Groups for the descent where no module scopes suggest any: random connected partitions of a
factor graph, each of bounded elimination width.

A group is grown from a random seed through the factors, one random frontier variable at a
time. A variable that keeps the group an induced forest of the factors (no two of its factors
lead into the same connected part of the group; union-find) joins it: a forest's elimination,
leaf by leaf, builds no table larger than its largest factor. One that closes a cycle joins
only if the group's elimination (search.eliminate.neighbourhood_width, counted without building
a table) stays within `max_entries`: the cycles are what a descent over single variables or
forests cannot change together. Drawn anew, a partition puts every variable in new company,
which lets repeated descents leave the optimum of one partition. Grown in order instead (the
frontier variable nearest the seed in number first), a group is a stretch of a graph whose
variables are numbered in program order, as IOPDDL's are.
"""

import heapq
import math
import random
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from .eliminate import MAX_ENTRIES, neighbourhood_width
from .factors import FactorGraph

MAX_CHECKS = 40  # widths counted per group by default: each costs about the group's size


class _Parts:
    """Union-find over the group's variables: which connected part of the group each is in."""

    def __init__(self) -> None:
        self.parent: Dict[int, int] = {}

    def add(self, v: int) -> None:
        self.parent[v] = v

    def find(self, v: int) -> int:
        root = v
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[v] != root:
            self.parent[v], v = root, self.parent[v]
        return root


def neighbours(graph: FactorGraph) -> List[List[int]]:
    """For each variable, the other variables its factors join it to (sorted)."""
    return [
        sorted({u for f in fids for u in graph.factors[f].vars} - {v})
        for v, fids in enumerate(graph.factors_of)
    ]


def _parts_joined(graph: FactorGraph, v: int, parts: _Parts) -> Optional[List[int]]:
    """The group's parts v's factors reach, if adding v keeps the group a forest; else None."""
    found: List[int] = []
    for fid in graph.factors_of[v]:
        inside = [u for u in graph.factors[fid].vars if u != v and u in parts.parent]
        if len(inside) > 1 and len({parts.find(u) for u in inside}) < len(inside):
            return None
        for u in inside:
            part = parts.find(u)
            if part in found:
                return None
            found.append(part)
    return found


class _Neighbourhoods:
    """Each group variable's neighbourhood within the group (itself and the members a factor holds
    with it) and its table size, kept as the group grows: a width check costs the group's
    elimination (search.eliminate.neighbourhood_width), not building them again from the scopes."""

    def __init__(self, graph: FactorGraph, seed: int):
        self.graph = graph
        self.domain: Dict[int, int] = {}
        self.near: Dict[int, Set[int]] = {}
        self.size: Dict[int, int] = {}
        self.add(seed)

    def _members_near(self, v: int) -> Set[int]:
        """The members a factor of v holds with it."""
        factors, domain = self.graph.factors, self.domain
        return {u for f in self.graph.factors_of[v] for u in factors[f].vars if u in domain}

    def add(self, v: int) -> None:
        members = self._members_near(v)
        _join(self.near, self.size, self.domain, v, int(self.graph.domain[v]), members)

    def width_with(self, v: int, limit: int) -> int:
        """The largest table eliminating the group and v builds, every other variable held
        (past `limit`, some number above it)."""
        members = self._members_near(v)
        near = {u: set(n) for u, n in self.near.items()}
        size, domain = dict(self.size), dict(self.domain)
        _join(near, size, domain, v, int(self.graph.domain[v]), members)
        return neighbourhood_width(domain, near, limit, size)


def _join(
    near: Dict[int, Set[int]],
    size: Dict[int, int],
    domain: Dict[int, int],
    v: int,
    dv: int,
    members: Set[int],
) -> None:
    """v (of `dv` candidates) joins the variables of `near`, its neighbourhood being `members`
    and itself; every table size as it then is."""
    for u in members:
        near[u].add(v)
        size[u] *= dv
    domain[v] = dv
    near[v] = members | {v}
    size[v] = math.prod(map(domain.__getitem__, near[v]))


def grow_group(
    graph: FactorGraph,
    near: List[List[int]],
    seed: int,
    allowed: set,
    rng: random.Random,
    max_vars: Optional[int] = None,
    max_entries: int = MAX_ENTRIES,
    in_order: bool = False,
    max_checks: int = MAX_CHECKS,
) -> List[int]:
    """A connected group of `allowed` variables grown from `seed` in random order (`in_order`:
    the variable nearest `seed` in number first), of elimination width within `max_entries`;
    at most `max_checks` variables that close a cycle are weighed, each by a width count."""
    parts = _Parts()
    parts.add(seed)
    near_sets = _Neighbourhoods(graph, seed)
    members, frontier, refused = [seed], _Frontier(seed, rng, in_order), set()
    frontier.extend(near[seed])
    checks = max_checks
    while frontier and (max_vars is None or len(members) < max_vars):
        v = frontier.pop()
        if v in parts.parent or v in refused or v not in allowed:
            continue
        joined = _parts_joined(graph, v, parts)
        if joined is None:
            checks -= 1
            if checks < 0 or near_sets.width_with(v, max_entries) > max_entries:
                refused.add(v)  # the group only grows: its width would only grow too
                continue
            joined = list({parts.find(u) for u in near[v] if u in parts.parent})
        parts.add(v)
        near_sets.add(v)
        for part in joined:
            parts.parent[parts.find(part)] = v
        members.append(v)
        frontier.extend(u for u in near[v] if u not in parts.parent and u in allowed)
    return members


class _Frontier:
    """The variables next to a growing group, handed out at random or, `in_order`, nearest the
    seed in number first (a heap)."""

    def __init__(self, seed: int, rng: random.Random, in_order: bool):
        self.seed, self.rng, self.in_order = seed, rng, in_order
        self.items: List[Tuple[int, int]] = []  # (distance from the seed or 0, variable)

    def __bool__(self) -> bool:
        return bool(self.items)

    def extend(self, variables: Iterable[int]) -> None:
        if self.in_order:
            for v in variables:
                heapq.heappush(self.items, (abs(v - self.seed), v))
        else:
            self.items.extend((0, v) for v in variables)

    def pop(self) -> int:
        if self.in_order:
            return heapq.heappop(self.items)[1]
        i = self.rng.randrange(len(self.items))
        self.items[i], self.items[-1] = self.items[-1], self.items[i]
        return self.items.pop()[1]


def partition(
    graph: FactorGraph,
    near: List[List[int]],
    variables: Sequence[int],
    rng: random.Random,
    max_vars: Optional[int] = None,
    max_entries: int = MAX_ENTRIES,
    in_order: bool = False,
    max_checks: int = MAX_CHECKS,
) -> List[List[int]]:
    """`variables` partitioned into connected groups of at most `max_vars` variables and
    elimination width within `max_entries`, grown from random seeds (grow_group's `in_order`
    and `max_checks`); largest first."""
    left = set(variables)
    order = list(variables)
    rng.shuffle(order)
    groups = []
    for seed in order:
        if seed in left:
            group = grow_group(
                graph, near, seed, left, rng, max_vars, max_entries, in_order, max_checks
            )
            left.difference_update(group)
            groups.append(sorted(group))
    groups.sort(key=len, reverse=True)
    return groups


def ball(near: List[List[int]], seeds: Sequence[int], size: int) -> List[int]:
    """Up to `size` variables nearest `seeds` through the factors (breadth first), seeds first."""
    out = list(dict.fromkeys(seeds))
    seen = set(out)
    i = 0
    while i < len(out) and len(out) < size:
        for u in near[out[i]]:
            if u not in seen and len(out) < size:
                seen.add(u)
                out.append(u)
        i += 1
    return out
