"""Exact min-sum variable elimination over a few variables, the rest held fixed.

Each coordinate-descent step hands this a group of variables; factors touching the group
are conditioned on the fixed variables, then the group's variables are eliminated one at
a time (smallest resulting table first), keeping argmin tables to read the optimum back.
It returns None instead of building a table over a limit (MAX_ENTRIES by default), so callers
can skip the group.
"""

import functools
import heapq
import math
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

MAX_ENTRIES = 1 << 20  # search.options.SearchOptions.max_table_entries
PLANNED_SUMS = 1 << 14  # distinct step shapes whose sum plans are kept
SCRATCH_ENTRIES = 1 << 15  # a step whose table holds this many sums it in reused buffers


class Factor:
    __slots__ = ("vars", "table")

    def __init__(self, vars_: Tuple[int, ...], table: np.ndarray):
        self.vars, self.table = vars_, table


def filled(values: Union[np.ndarray, float], shape: Sequence[int]) -> np.ndarray:
    """A new array of `shape` and `values`' dtype holding `values` broadcast to it:
    np.broadcast_to(values, shape).copy() without broadcast_to's checks in Python (a quarter of
    the time on the small tables the search builds by the thousand)."""
    out = np.empty(shape, dtype=np.result_type(values))
    np.copyto(out, values)
    return out


class _Order:
    """The order variables are eliminated in: always the one whose table (it and its neighbours)
    is smallest, ties to the smallest variable. Neighbours are kept per variable and joined as
    eliminations join them, sizes in a heap: a step costs its neighbourhood, not a scan of
    every variable left."""

    def __init__(
        self,
        domain: Dict[int, int],
        near: Dict[int, Set[int]],
        size: Optional[Dict[int, int]] = None,
    ):
        """`near`: each variable's neighbourhood, itself included (the order takes it over);
        `size`: the product of each neighbourhood's domains, where the caller kept it."""
        self.domain, self.near = domain, near
        get = domain.__getitem__
        self.size = {v: math.prod(map(get, n)) for v, n in near.items()} if size is None else size
        self.heap = [(size, v) for v, size in self.size.items()]
        heapq.heapify(self.heap)

    def next(self) -> Tuple[int, int]:
        """(the variable to eliminate next, the size of its table)."""
        heap, sizes = self.heap, self.size
        while True:
            size, v = heapq.heappop(heap)
            if sizes.get(v) == size:
                return v, size

    def eliminate(self, v: int) -> None:
        """Take v out; its neighbours join each other (the table left behind spans them)."""
        near_of, sizes, domain, heap = self.near, self.size, self.domain, self.heap
        rest = near_of.pop(v)
        rest.discard(v)
        del sizes[v]
        dv = domain[v]
        for u in rest:
            near = near_of[u]
            near.discard(v)  # neighbourhoods are symmetric: u's held v
            added = rest - near
            size = sizes[u] // dv
            if added:
                near |= added
                size *= math.prod(map(domain.__getitem__, added))
            sizes[u] = size
            heapq.heappush(heap, (size, u))


def neighbourhoods(free: Sequence[int], scopes: Sequence[Tuple[int, ...]]) -> Dict[int, Set[int]]:
    """Each free variable's neighbourhood under factors over `scopes`: itself and every variable
    a factor holds with it (a variable's own table joins it to no one)."""
    near: Dict[int, Set[int]] = {v: {v} for v in free}
    for scope in scopes:
        if len(scope) > 1:
            for v in scope:
                near[v].update(scope)
    return near


def elimination_width(
    free: Sequence[int],
    domain: Dict[int, int],
    scopes: List[Tuple[int, ...]],
    limit: int = MAX_ENTRIES,
) -> int:
    """Largest table `solve` would build for factors over `scopes` (free variables only), without
    building it (it stops counting past `limit`)."""
    return neighbourhood_width(domain, neighbourhoods(free, scopes), limit)


def neighbourhood_width(
    domain: Dict[int, int],
    near: Dict[int, Set[int]],
    limit: int = MAX_ENTRIES,
    size: Optional[Dict[int, int]] = None,
) -> int:
    """elimination_width of the variables of `near` (`neighbourhoods`', taken over and emptied;
    `size` as _Order takes it): for a caller that keeps the neighbourhoods as a group grows,
    where building them from the scopes again would cost most of the count."""
    order, widest = _Order(domain, near, size), 0
    for _ in range(len(near)):
        v, size_ = order.next()
        widest = max(widest, size_)
        if widest > limit:
            break
        order.eliminate(v)
    return widest


Merge = Tuple[int, int, bool]  # (left, right, whether the sum may go into left in place)


def sum_plan(views: Sequence[Tuple[int, ...]]) -> List[Merge]:
    """How to add up tables of broadcastable `views` (one shape, 1 on the axes a table lacks) with
    few entries passed over: each merge appends the sum of two earlier entries (the tables first,
    then the sums). Tables over the same axes are summed at their own size first, then each such
    sum into the smallest sum over more axes, smallest first, and what is left in ascending size.
    A step of an elimination adds up every table touching its variable; where many hold the same
    few of its axes (factors conditioned on the variables held), adding each at the full table's
    size took a full pass apiece."""
    if len(views) < 3:  # one sum or none: nothing to order
        return [(0, 1, False)] if len(views) == 2 else []
    merges: List[Merge] = []
    shapes = [tuple(v) for v in views]

    def merge(i: int, j: int) -> int:
        union = tuple(map(max, shapes[i], shapes[j]))
        merges.append((i, j, i >= len(views) and shapes[i] == union))  # a sum made here
        shapes.append(union)
        return len(shapes) - 1

    by_axes: Dict[FrozenSet[int], int] = {}
    for i, view in enumerate(views):
        key = frozenset(a for a, n in enumerate(view) if n > 1)
        by_axes[key] = merge(by_axes[key], i) if key in by_axes else i
    groups = sorted(by_axes.items(), key=lambda g: (math.prod(shapes[g[1]]), sorted(g[0])))
    left = []
    for n, (axes, i) in enumerate(groups):
        host = next((k for k in range(n + 1, len(groups)) if axes < groups[k][0]), None)
        if host is None:
            left.append(i)
        else:
            groups[host] = (groups[host][0], merge(groups[host][1], i))
    total = left[0]
    for i in left[1:]:
        total = merge(total, i)
    return merges


@functools.lru_cache(maxsize=PLANNED_SUMS)
def _planned_sum(views: Tuple[Tuple[int, ...], ...]) -> Tuple[Merge, ...]:
    """sum_plan(views), made once per distinct views: the steps of a search's eliminations repeat
    a few shapes (a variable, its factor with one neighbour, the table left by the last step)
    thousands of times."""
    return tuple(sum_plan(views))


# Where merge m's new sum of two tables goes (None: a fresh array), for add_up
Into = Callable[[int, np.ndarray, np.ndarray], Optional[np.ndarray]]


def add_up(
    tables: List[np.ndarray], merges: Sequence[Merge], into: Optional[Into] = None
) -> np.ndarray:
    """The sum of `tables` by `merges` (sum_plan's): `tables` is extended with every sum; only a
    sum made here is added into in place, and a new sum goes where `into` says."""
    for m, (i, j, in_place) in enumerate(merges):
        if in_place:
            tables[i] += tables[j]
            tables.append(tables[i])
        else:
            out = into(m, tables[i], tables[j]) if into is not None else None
            tables.append(
                tables[i] + tables[j] if out is None else np.add(tables[i], tables[j], out=out)
            )
    return tables[-1]


def _load(
    fid: int, positions: List[int], full: Tuple[int, ...]
) -> Tuple[int, Optional[List[int]], Tuple[int, ...]]:
    """How a step takes table `fid`, whose axes go to `positions` of the step's table of shape
    `full`: (fid, the transposition putting its axes in the step's order or None where they are,
    its shape with 1 on the axes it lacks)."""
    view = [1] * len(full)
    for p in positions:
        view[p] = full[p]
    ordered = positions == sorted(positions)
    return (
        fid,
        None if ordered else sorted(range(len(positions)), key=positions.__getitem__),
        tuple(view),
    )


class Program:
    """The elimination of a fixed set of free variables from factors over fixed scopes, planned
    once: which tables each step adds (transposed and shaped how, in sum_plan's order) and which
    variable it minimises out. Descent re-solves a group many times with the same structure and
    other numbers; running the plan costs only the numpy work, the same sums in the same order
    each time (`solve` runs one too)."""

    def __init__(
        self,
        free: Sequence[int],
        domain: Dict[int, int],
        scopes: List[Tuple[int, ...]],
        limit: int = MAX_ENTRIES,
    ):
        scope_of: Dict[int, Tuple[int, ...]] = dict(enumerate([(v,) for v in free] + list(scopes)))
        touch: Dict[int, Set[int]] = {v: set() for v in free}
        for fid, vars_ in scope_of.items():
            for v in vars_:
                touch[v].add(fid)
        next_id = len(scope_of)
        # per step: (added slots with their transposition and view, sum plan, full shape, axis,
        # slot out, where its sums go into _SCRATCH: None for a step of few entries)
        self.steps: List[tuple] = []
        self.trace: List[Tuple[int, Tuple[int, ...]]] = []
        self.feasible = True
        sequence = _Order(domain, neighbourhoods(free, scopes))
        for _ in range(len(free)):
            best, best_size = sequence.next()
            if best_size > limit:
                self.feasible = False
                return
            fids = touch.pop(best)
            touching = [(fid, scope_of.pop(fid)) for fid in fids]
            joined = {v for _, scope in touching for v in scope}
            joined.discard(best)
            for u in joined:
                touch[u] -= fids
            vars_ = tuple(sorted(joined | {best}))
            axis = {v: i for i, v in enumerate(vars_)}
            full = tuple(domain[v] for v in vars_)
            loads = [_load(fid, [axis[v] for v in scope], full) for fid, scope in touching]
            ax = axis[best]
            rest = vars_[:ax] + vars_[ax + 1 :]
            out = -1
            if rest:
                out = next_id
                scope_of[out] = rest
                for u in rest:
                    touch[u].add(out)
                next_id += 1
            views = tuple(v for _, _, v in loads)
            merges = _planned_sum(views)
            sums = _large_sums(views, merges) if math.prod(full) >= SCRATCH_ENTRIES else None
            self.steps.append((loads, merges, full, ax, out, sums))
            self.trace.append((best, rest))
            sequence.eliminate(best)

    def run(self, tables: List[np.ndarray]) -> Optional[Tuple[Dict[int, int], float]]:
        """Minimise the sum of `tables` (the unary tables of the free variables in order, then
        the factors' over their scopes); None where a table would exceed the limit."""
        if not self.feasible:
            return None
        slots: Dict[int, np.ndarray] = dict(enumerate(tables))
        constant = 0.0
        kept: List[tuple] = []
        for loads, merges, full, ax, out, sums in self.steps:
            work = []
            for fid, order, view in loads:
                t = slots.pop(fid)
                work.append((t.transpose(order) if order is not None else t).reshape(view))
            total = add_up(work, merges, None if sums is None else _SCRATCH.into(sums))
            table = total if total.shape == full else np.broadcast_to(total, full)
            if sums is None:
                kept.append((table, ax, None))  # argmin only where read back
            else:  # the step's tables (add_up left them as given), summed again along one line
                kept.append((work[: len(loads)], ax, merges))
            reduced = np.minimum.reduce(table, ax)  # table.min's work, no Python frame
            if out >= 0:
                slots[out] = reduced
            else:
                constant += float(reduced)
        choice: Dict[int, int] = {}
        for (v, rest), (held, ax, merges) in zip(reversed(self.trace), reversed(kept)):
            at: List[Union[int, slice]] = [choice[u] for u in rest]
            at.insert(ax, slice(None))
            if merges is None:
                line = held[tuple(at)]
            else:
                line = add_up([t[_on_line(t, at)] for t in held], merges)
            choice[v] = int(line.argmin())
        return choice, constant


def _on_line(table: np.ndarray, at: List[Union[int, slice]]) -> tuple:
    """The index of the line `at` (a value per axis, a slice on one) in a table of a step, which
    has 1 on the axes it lacks."""
    return tuple(a if n > 1 or isinstance(a, slice) else 0 for a, n in zip(at, table.shape))


Large = Optional[Tuple[int, Tuple[int, ...]]]  # per merge: (k, shape) of a step's k-th large sum


def _large_sums(views: Tuple[Tuple[int, ...], ...], merges: Sequence[Merge]) -> List[Large]:
    """Per merge of sum_plan's: where its new sum holds SCRATCH_ENTRIES or more, (k, its shape)
    for the k-th such sum of the step; else None."""
    shapes, k = list(views), 0
    large: List[Large] = []
    for i, j, in_place in merges:
        shapes.append(tuple(map(max, shapes[i], shapes[j])))
        if in_place or math.prod(shapes[-1]) < SCRATCH_ENTRIES:
            large.append(None)
        else:
            large.append((k, shapes[-1]))
            k += 1
    return large


class _Scratch:
    """Arrays the sums of SCRATCH_ENTRIES or more of every elimination's steps go into, kept
    between steps (the k-th such sum of a step in the k-th): a fresh array of megabytes costs the
    kernel its pages again each time. A step's sums are read before the next step's are made
    (what is read back later is summed again), and smaller sums are made as add_up makes them."""

    def __init__(self) -> None:
        self.buffers: List[np.ndarray] = []

    def _array(self, k: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
        n = math.prod(shape)
        if len(self.buffers) <= k:
            self.buffers.append(np.empty(0))
        if self.buffers[k].size < n or self.buffers[k].dtype != dtype:
            self.buffers[k] = np.empty(n, dtype)
        return self.buffers[k][:n].reshape(shape)

    def into(self, large: List[Large]) -> Into:
        """add_up's `into` for a step whose large sums are `large` (_large_sums')."""

        def out(m: int, a: np.ndarray, b: np.ndarray) -> Optional[np.ndarray]:
            found = large[m]
            return None if found is None else self._array(*found, np.result_type(a, b))

        return out


_SCRATCH = _Scratch()


def solve(
    free: Sequence[int],
    domain: Dict[int, int],
    unary: Dict[int, np.ndarray],
    factors: List[Factor],
) -> Optional[Tuple[Dict[int, int], float]]:
    """Minimise sum(unary) + sum(factors) over the free variables. None if a table would be too
    large."""
    program = Program(free, domain, [f.vars for f in factors])
    return program.run([unary[v] for v in free] + [f.table for f in factors])
