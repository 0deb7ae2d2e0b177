"""Graphs of the ASPLOS 2025 / EuroSys 2025 IOPDDL contest, read and checked, and the contest's
rules as an evaluator.

The format (../shared/iopddl/README.md; the contest's iopddl.h): JSON, gzip'd or plain, key
`problem` with `nodes.costs[i][k]`, `nodes.usages[i][k]`, `nodes.intervals[i] = [a, b]` (node i's
memory is in use at steps a .. b-1), `edges.nodes[e]` (the nodes an edge joins, usually two) and
`edges.costs[e]` (row-major over those nodes' strategies), and `usage_limit` (optional: without
it, memory is unconstrained). A solution is one strategy index per node. It is valid when every
index is in range, no chosen node or edge cost is FORBIDDEN or more, and at every step the sum
of the chosen usages of the nodes in use then is at most `usage_limit`; it costs the sum of the
chosen node and edge costs. Costs and usages are integers; the evaluator sums them exactly.
"""

import gzip
import json
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..errors import GraphError

FORBIDDEN = 10**18  # a cost this large or larger marks a combination a solution must avoid


@dataclass
class Instance:
    name: str
    costs: List[List[int]]
    usages: List[List[int]]
    intervals: List[List[int]]
    edge_nodes: List[List[int]]
    edge_costs: List[List[int]]
    usage_limit: Optional[int]

    @property
    def steps(self) -> int:
        return max((b for _, b in self.intervals), default=0)


@dataclass
class Evaluation:
    cost: int  # sum of the chosen node and edge costs (forbidden ones included)
    peak: int  # the largest memory in use at one step
    valid: bool
    problems: List[str] = field(default_factory=list)  # why it is not valid


def read(path: str) -> Instance:
    """The graph in `path` (gzip'd or plain JSON)."""
    opener = gzip.open if _is_gzip(path) else open
    try:
        with opener(path, "rt") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise GraphError(f"{path}: not readable as JSON ({e})") from e
    return parse(data)


def _is_gzip(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def parse(data: Any) -> Instance:
    """An Instance from the file's JSON, every length and index checked."""
    problem = _field(data, "problem", dict, "")
    nodes = _field(problem, "nodes", dict, "problem.")
    edges = _field(problem, "edges", dict, "problem.")
    costs = _field(nodes, "costs", list, "nodes.")
    usages = _field(nodes, "usages", list, "nodes.")
    intervals = _field(nodes, "intervals", list, "nodes.")
    edge_nodes = _field(edges, "nodes", list, "edges.")
    edge_costs = _field(edges, "costs", list, "edges.")
    limit = problem.get("usage_limit")
    if limit is not None and not isinstance(limit, int):
        raise GraphError(f"usage_limit is {limit!r}, not an integer")
    _same_length(costs, "nodes.costs", [(usages, "nodes.usages"), (intervals, "nodes.intervals")])
    _same_length(edge_nodes, "edges.nodes", [(edge_costs, "edges.costs")])
    for i, (c, u, span) in enumerate(zip(costs, usages, intervals)):
        if not isinstance(c, list) or not c:
            raise GraphError(f"nodes.costs[{i}] is not a non-empty list of strategy costs")
        if not isinstance(u, list) or len(u) != len(c):
            raise GraphError(
                f"nodes.usages[{i}] needs {len(c)} entries, one per strategy in nodes.costs[{i}]"
            )
        if not (isinstance(span, list) and len(span) == 2 and 0 <= span[0] and span[1] >= 0):
            raise GraphError(f"nodes.intervals[{i}] is {span!r}, not [start, end] steps")
    for e, (members, table) in enumerate(zip(edge_nodes, edge_costs)):
        if not isinstance(members, list) or not members:
            raise GraphError(f"edges.nodes[{e}] is {members!r}, not a list of node indices")
        for v in members:
            if not isinstance(v, int) or not 0 <= v < len(costs):
                raise GraphError(f"edges.nodes[{e}] names node {v!r}; there are {len(costs)}")
        size = math.prod(len(costs[v]) for v in members)
        if not isinstance(table, list) or len(table) != size:
            raise GraphError(
                f"edges.costs[{e}] needs {size} entries (the strategies of nodes {members} "
                f"multiplied), has {len(table) if isinstance(table, list) else table!r}"
            )
    return Instance(
        str(problem.get("name", "")), costs, usages, intervals, edge_nodes, edge_costs, limit
    )


def _field(parent: Any, key: str, kind: type, prefix: str) -> Any:
    if not isinstance(parent, dict) or key not in parent:
        raise GraphError(f"missing {prefix}{key}")
    value = parent[key]
    if not isinstance(value, kind):
        raise GraphError(f"{prefix}{key} is a {type(value).__name__}, not a {kind.__name__}")
    return value


def _same_length(first: list, name: str, others: Sequence) -> None:
    for other, other_name in others:
        if len(other) != len(first):
            raise GraphError(f"{other_name} has {len(other)} entries, {name} has {len(first)}")


def evaluate(instance: Instance, solution: Sequence[int]) -> Evaluation:
    """The solution's cost and peak memory under the contest's rules, and whether it is valid."""
    n = len(instance.costs)
    if len(solution) != n:
        return Evaluation(0, 0, False, [f"{len(solution)} strategies for {n} nodes"])
    problems: List[str] = []
    for i, k in enumerate(solution):
        if not (isinstance(k, int) and 0 <= k < len(instance.costs[i])):
            problems.append(f"node {i}: strategy {k!r} of {len(instance.costs[i])}")
    if problems:
        return Evaluation(0, 0, False, problems)
    cost = 0
    for i, k in enumerate(solution):
        c = instance.costs[i][k]
        cost += c
        if c >= FORBIDDEN:
            problems.append(f"node {i}: strategy {k} is forbidden (cost {c})")
    for e, members in enumerate(instance.edge_nodes):
        index = 0
        for v in members:
            index = index * len(instance.costs[v]) + solution[v]
        c = instance.edge_costs[e][index]
        cost += c
        if c >= FORBIDDEN:
            problems.append(f"edge {e} {members}: its strategies are forbidden (cost {c})")
    peak, step = peak_usage(instance, solution)
    limit = instance.usage_limit
    if limit is not None and peak > limit:
        problems.append(f"step {step} uses {peak}, over the usage limit {limit}")
    return Evaluation(cost, peak, not problems, problems)


def peak_usage(instance: Instance, solution: Sequence[int]) -> Tuple[int, int]:
    """(largest memory in use at one step, the first step using it), summed exactly."""
    change: Dict[int, int] = {}
    for i, (a, b) in enumerate(instance.intervals):
        if b > a:
            u = instance.usages[i][solution[i]]
            change[a] = change.get(a, 0) + u
            change[b] = change.get(b, 0) - u
    peak, step, running = 0, 0, 0
    for t in sorted(change):
        running += change[t]
        if running > peak:
            peak, step = running, t
    return peak, step
