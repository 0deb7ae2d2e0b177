"""AutoDDL's coordinate descent over groups of tied units.

A coordinate is a group of variables: the units of one module scope (a layer's forward
ops with their backward ops, its parameters and their optimizer ops), then of each
enclosing scope, then the whole graph, then each variable with its neighbours where no
scope already holds them all. A step
re-solves one group exactly (variable elimination) with every other variable held, and
keeps the result only if it lowers the objective; sweeps repeat until none does.
A problem without module scopes (search.factors.FactorGraph) brings its own groups.
"""

import logging
import weakref
from operator import itemgetter
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from .eliminate import MAX_ENTRIES, Factor, Program, elimination_width
from .factors import FactorGraph
from .problem import SERIAL, Price, Problem, Weights

log = logging.getLogger(__name__)

REL_TOL = 1e-12
Optimum = Optional[Tuple[Dict[int, int], float]]  # a group's choice and its value; None: too wide
MAX_GROUP_VARS = 400  # search.options.SearchOptions.max_group_vars


def scope_groups(problem: Problem, max_vars: int = MAX_GROUP_VARS) -> List[List[int]]:
    """Variables by module scope, deepest scopes first, then the whole problem: each of at most
    `max_vars` variables (a larger scope is left to its sub-scopes and the neighbourhoods)."""
    by_prefix: Dict[str, set] = {}
    for v, members in enumerate(problem.var_units):
        if not problem.is_free(v):
            continue
        scope = problem.graph.op(problem.units[members[0]].name).scope
        parts = scope.split(".") if scope else []
        for depth in range(len(parts), 0, -1):
            by_prefix.setdefault(".".join(parts[:depth]), set()).add(v)
    ordered = sorted(by_prefix, key=lambda p: (-p.count("."), p))
    groups, seen = [], set()
    for prefix in ordered:
        g = tuple(sorted(by_prefix[prefix]))
        if g not in seen and len(g) <= max_vars:
            seen.add(g)
            groups.append(list(g))
    everything = [v for v in range(len(problem.var_units)) if problem.is_free(v)]
    if tuple(everything) not in seen and len(everything) <= max_vars:
        groups.append(everything)
    return groups


def neighbour_groups(problem: Union[Problem, FactorGraph]) -> List[List[int]]:
    groups = []
    for v in range(len(problem.domain)):
        if problem.is_free(v):
            ring = {
                u
                for f in problem.factors_of[v]
                for u in problem.factors[f].vars
                if problem.is_free(u)
            }
            groups.append(sorted(ring | {v}))
    return groups


def strict_subsets(groups: Sequence[Sequence[int]]) -> List[List[int]]:
    """For each group, the indices of the groups that are its strict subsets. A group's optimum
    with the rest held is one of each of its subsets too (any change of a subset is one of the
    group), so a subset re-solved while nothing around it has changed since finds nothing."""
    sets = [set(g) for g in groups]
    if sum(map(len, sets)) == len(set().union(*sets)):
        return [[] for _ in groups]  # disjoint (a partition's): none holds another
    holding: Dict[int, List[int]] = {}
    for j, members in enumerate(sets):
        for v in members:
            holding.setdefault(v, []).append(j)
    subsets: List[List[int]] = [[] for _ in groups]
    for i, members in enumerate(sets):
        for j in holding[groups[i][0]]:
            if members < sets[j]:
                subsets[j].append(i)
    return subsets


Getter = Callable[[Sequence[int]], Union[int, Tuple[int, ...]]]
# A factor touching a group, as a solve of the group reads it: (its table; the index of its entry
# at a plan, from the plan; the table with the axes of the variables outside the group first;
# their values from a plan, None where every variable is in the group; the group's variables it
# keeps, in its order). Indexing the third with the fourth's values leaves the table over the
# kept variables, the factor conditioned on the held ones, with no per-variable test. A plain
# tuple: a solve of a group made for one use (IOPDDL's partitions) makes one per factor.
Touching = Tuple[np.ndarray, Getter, np.ndarray, Optional[Getter], Tuple[int, ...]]


def touching(f: Factor, inside: Set[int]) -> Touching:
    """How a solve of the variables `inside`, every other one held, reads factor f (Touching):
    made once per group (or per variable: iopddl.solve's local costs), read at every plan."""
    vars_ = f.vars
    held = tuple(v for v in vars_ if v not in inside)
    if not held:
        return f.table, itemgetter(*vars_), f.table, None, vars_
    kept = tuple(v for v in vars_ if v in inside)
    first = (
        f.table
        if vars_[: len(held)] == held
        else f.table.transpose([vars_.index(v) for v in held + kept])
    )
    return f.table, itemgetter(*vars_), first, itemgetter(*held), kept


class Descent:
    def __init__(
        self,
        problem: Union[Problem, FactorGraph],
        memory_weight: Price = 0.0,
        groups: Optional[List[List[int]]] = None,
        weights: Weights = SERIAL,
        programs: Optional[Dict[Tuple[int, ...], Program]] = None,
        max_group_vars: int = MAX_GROUP_VARS,
        max_table_entries: int = MAX_ENTRIES,
    ):
        """`groups`: those of an earlier Descent of the same problem (they depend on its structure
        only, not on the memory price or the weights), so that they are not found again;
        `programs`: their groups' elimination programs (which depend on the structure only).
        A Descent keeps the optima it finds, so a later run under the same prices reuses them.
        It refers to its problem weakly: the problem keeps its Descents (Problem.descents), and a
        cycle between them would leave every problem for the cyclic collector to find and free
        after planning, slower than reference counting frees it as planning returns."""
        self.problem = weakref.proxy(problem)
        self.unary = problem.unary(memory_weight)
        self.tables = problem.tables(weights, memory_weight)
        self.memory_weight = memory_weight
        self.max_table_entries = max_table_entries
        if groups is None:
            suggested = (
                scope_groups(problem, max_group_vars)
                if isinstance(problem, Problem)
                else problem.groups
            )
            scoped = [g for g in suggested if self._solvable(g)]
            covered = [set(g) for g in scoped]
            extra = [
                g
                for g, members in ((g, set(g)) for g in neighbour_groups(problem))
                if not any(members <= c for c in covered) and self._solvable(g)
            ]
            groups = scoped + extra
        self.groups = groups
        self.steps = 0
        self.memo: Dict[tuple, Optimum] = {}  # group optima by the group's boundary values
        self._boundaries: Dict[Tuple[int, ...], Tuple[int, ...]] = {}
        self._arounds: Dict[Tuple[int, ...], List[Touching]] = {}
        self.programs: Dict[Tuple[int, ...], Program] = {} if programs is None else programs
        self._whole_group: Optional[List[int]] = None
        self._reaches: Optional[List[Set[int]]] = None  # of each group, found on the first run
        self._subsets: Optional[List[List[int]]] = None  # of each group (strict_subsets)
        self._whole_sought = False

    def _solvable(self, group: Sequence[int]) -> bool:
        """Whether eliminating the group keeps every table within `max_table_entries` (structure
        only, no tables)."""
        p, members = self.problem, set(group)
        fids = {f for v in group for f in p.factors_of[v]}
        scopes = {tuple(v for v in p.factors[f].vars if v in members) for f in fids}
        domain = {v: int(p.domain[v]) for v in group}
        scoped = [s for s in scopes if s]
        limit = self.max_table_entries
        return elimination_width(group, domain, scoped, limit) <= limit

    def _around(self, group: Sequence[int]) -> List[Touching]:
        """How each factor touching `group` is read (Touching), found once per group, since every
        solve of the group reads them alike."""
        key = tuple(group)
        found = self._arounds.get(key)
        if found is None:
            inside = set(group)
            fids = sorted({f for v in group for f in self.problem.factors_of[v]})
            found = [touching(self.tables[f], inside) for f in fids]
            self._arounds[key] = found
        return found

    def _local(
        self, free: Sequence[int], x: Sequence[int]
    ) -> Tuple[List[np.ndarray], List[Factor], float]:
        """(each free variable's unary table plus the factors left on it alone once the others
        are held; the factors left on several free variables; the objective's part that `free`
        can change, at x). The one-variable tables are summed here, not left to the elimination:
        a variable can have dozens of held neighbours (IOPDDL's graphs), and each table the
        elimination takes costs it a view and a merge to plan and to run."""
        alone: Dict[int, np.ndarray] = {}
        factors, current = [], 0.0
        for whole, at, held_first, held, kept in self._around(free):
            current += whole.item(at(x))
            table = held_first if held is None else held_first[held(x)]
            if len(kept) > 1:
                factors.append(Factor(kept, table))
            elif kept[0] in alone:
                alone[kept[0]] += table
            else:
                alone[kept[0]] = self.unary[kept[0]] + table
        current += sum(self.unary[v].item(x[v]) for v in free)
        return [alone.get(v, self.unary[v]) for v in free], factors, current

    def _boundary(self, group: Sequence[int]) -> Tuple[int, ...]:
        key = tuple(group)
        if key not in self._boundaries:
            inside = set(group)
            self._boundaries[key] = tuple(sorted(self._reach(group) - inside))
        return self._boundaries[key]

    def _current(self, group: Sequence[int], x: Sequence[int]) -> float:
        """The objective's part that `group` can change, at x."""
        total = sum(whole.item(at(x)) for whole, at, *_ in self._around(group))
        return total + sum(self.unary[v].item(x[v]) for v in group)

    def _solve(self, group: Sequence[int], x: List[int]) -> Tuple[Optimum, Optional[float]]:
        """(choice, its value) for `group` with every other variable held at x, and the objective's
        part the group can change at x (None where the choice is x's own: nothing to compare). The
        group's optimum depends only on its boundary's values, so it is memoised on them."""
        key = (tuple(group), tuple(x[u] for u in self._boundary(group)))
        if key in self.memo:
            result = self.memo[key]
            if result is None or all(x[v] == k for v, k in result[0].items()):
                return result, None
            return result, self._current(group, x)
        unary, factors, current = self._local(group, x)
        program = self.programs.get(key[0])
        if program is None:
            domain = {v: int(self.problem.domain[v]) for v in group}
            scopes = [f.vars for f in factors]
            program = Program(group, domain, scopes, self.max_table_entries)
            self.programs[key[0]] = program
        result = program.run(unary + [f.table for f in factors])
        self.memo[key] = result
        return result, current

    def step(self, group: Sequence[int], x: List[int]) -> bool:
        result, current = self._solve(group, x)
        if result is None:
            return False
        choice, value = result
        self.steps += 1
        if current is not None and value < current - REL_TOL * max(1.0, abs(current)):
            for v, k in choice.items():
                x[v] = k
            return True
        return False

    def whole(self) -> Optional[List[int]]:
        """The group of every free variable, where it is one of the groups (it is solvable
        within `max_table_entries`): re-solving it gives the objective's exact minimum."""
        if not self._whole_sought:
            domain = np.asarray(self.problem.domain)
            n_free = int(np.count_nonzero(domain > 1))
            sized = [g for g in self.groups if len(g) == n_free]  # the list only if one may be
            free = np.flatnonzero(domain > 1).tolist() if sized else []
            self._whole_group = next((g for g in sized if g == free), None)
            self._whole_sought = True
        return self._whole_group

    def _reach(self, group: Sequence[int]) -> Set[int]:
        """Variables whose change can change this group's optimum: it and its neighbours."""
        p = self.problem
        return {u for v in group for f in p.factors_of[v] for u in p.factors[f].vars} | set(group)

    def run(
        self, x0: Sequence[int], max_sweeps: int = 100, max_group: Optional[int] = None
    ) -> List[int]:
        """Sweep the groups (of at most `max_group` variables) until no step improves; a group is
        re-solved only if its reach changed since it, or a group holding it, was last solved.
        Where one group holds every free variable, the run is that group's exact re-solve
        whatever `max_group` says: no group can lower its optimum, and it is solved once for
        every start (its boundary is empty, so it is memoised)."""
        x = list(x0)
        whole = self.whole()
        if whole is not None:
            self.step(whole, x)
            return x
        if self._reaches is None:
            self._reaches = [self._reach(g) for g in self.groups]
        if self._subsets is None:
            self._subsets = strict_subsets(self.groups)
        reach, subsets = self._reaches, self._subsets
        stamp = [0] * len(x)  # step at which each variable last changed
        solved_at = [-1] * len(self.groups)
        clock = 0
        for _ in range(max_sweeps):
            improved = False
            for i, group in enumerate(self.groups):
                if max_group is not None and len(group) > max_group:
                    continue
                if solved_at[i] >= 0 and all(stamp[u] <= solved_at[i] for u in reach[i]):
                    continue
                clock += 1
                before = [x[v] for v in group]
                changed = self.step(group, x)
                solved_at[i] = clock
                if changed:
                    clock += 1
                    for v, old in zip(group, before):
                        if x[v] != old:
                            stamp[v] = clock
                    solved_at[i] = clock
                    improved = True
                if subsets[i] and self.programs[tuple(group)].feasible:  # so are its subsets
                    for k in subsets[i]:
                        solved_at[k] = solved_at[i]
            if not improved:
                break
        return x
