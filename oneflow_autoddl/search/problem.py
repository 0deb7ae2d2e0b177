"""The planning problem as numbers: one variable per class of tied units, a cost table per tensor.

Variable c picks one of `domain[c]` candidates. The search's objective for a choice is
    sum_c unary[c][x_c]  +  sum_f factor_f[x_f]
where unary holds compute time (and, under a memory limit, a memory penalty) and each
factor holds the boxing time of one or more tensors over the variables at their ends: all
of it (compute and boxing one after the other), or under other Weights its moving bytes and
its latency priced apart. The predicted step time is the schedule of `evaluate`.
OneFlow boxes a tensor once per distinct target SBP (GroupBoxingByDstParallel; measured:
two consumers wanting B of one S(0) tensor cost one all-gather), so a tensor is one
factor over its producer and all its consumers, not a sum of pairwise edges. A factor
whose table would be too large is split into several over runs of consumers, an upper
bound that is exact unless consumers in different runs want the same SBP; `evaluate`
is always exact.
"""

import logging
import math
from dataclasses import dataclass, field
from operator import itemgetter
from typing import (
    TYPE_CHECKING,
    AbstractSet,
    Dict,
    FrozenSet,
    Hashable,
    List,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
)

import numpy as np

from ..cost.cluster import Cluster
from ..cost.collectives import added
from ..cost.memory import Peak
from ..cost.model import INFEASIBLE, CostModel, Transfer
from ..cost.schedule import Scheduler
from ..ir import Graph, Tensor
from ..rules import reads_same_sbp
from ..sbp import NdSbp, Signature
from .eliminate import Factor, filled
from .prices import StepPrices
from .ties import tie_ops
from .units import Unit, build_units, fill_candidates

if TYPE_CHECKING:
    from .descent import Descent
    from .memory import PeakIndex

log = logging.getLogger(__name__)

# A tensor's factor joins its producer and consumers; past this many entries its consumers are
# split into runs, each its own factor. A boxing two consumers in different runs share (the same
# target SBP) is then counted once per run: the objective can only over-count, never hide a cost.
# Plans are therefore compared exactly where it matters (Problem.evaluate, in the planner).
# 1 << 18 found plans 0.3% faster on the examples' GPT on 2x2 but took 1.7x as long to plan them.
MAX_FACTOR_ENTRIES = 1 << 16
MAX_FACTOR_VARS = 16  # numpy arrays hold at most 32 axes; elimination joins two factors


@dataclass(frozen=True)
class Weights:
    """What a second of each part of a boxing costs in a descent's objective. SERIAL adds it all
    to compute; other weights give descents that price bytes or waits apart (search.descend)."""

    moving: float = 1.0
    latency: float = 1.0


SERIAL = Weights()
Price = Union[float, StepPrices]  # of memory: per byte across the step, or per time step
TensorFactors = List[Tuple[Tuple[int, ...], np.ndarray, np.ndarray]]  # (vars, time, latency)


@dataclass
class Endpoint:
    var: int
    unit: int
    pos: int  # op position inside the unit
    bn: str
    strict: bool = False  # a consumer that must see the producer's SBP unchanged


@dataclass
class TensorEnds:
    tensor: Tensor
    producer: Endpoint
    consumers: List[Endpoint]
    remote: int  # other placements its consumers run on (costed as a full copy to each)
    readers: FrozenSet[str]  # every op that reads it, on any placement


@dataclass
class Breakdown:
    """The exact predicted cost of one assignment, with the detail a report prints."""

    step_time: float  # compute and boxing overlapped (cost.schedule)
    compute_time: float
    comm_time: float
    exposed_comm_time: float
    bytes_per_device: float
    memory_per_device: float
    op_compute: Dict[str, float] = field(default_factory=dict)
    tensor_comm: Dict[str, Transfer] = field(default_factory=dict)

    @property
    def serial_time(self) -> float:
        """Compute and boxing one after the other: what the SERIAL objective adds up."""
        return self.compute_time + self.comm_time

    def op_comm(self, graph: Graph) -> Dict[str, float]:
        """Seconds of boxing per op: each boxed tensor's shared among all its consumers (the
        report's split; the step's own sum does not need it)."""
        out: Dict[str, float] = {}
        for lbn, tr in self.tensor_comm.items():
            consumers = graph.tensor(lbn).consumers
            for c, _ in consumers:
                out[c] = out.get(c, 0.0) + tr.time / max(1, len(consumers))
        return out

    @property
    def inter_node_bytes_per_device(self) -> float:
        """Of bytes_per_device, those sent to devices on other nodes."""
        return sum(tr.inter_node_bytes for tr in self.tensor_comm.values())


class Problem:
    def __init__(
        self,
        graph: Graph,
        model: CostModel,
        hold: Optional[Dict[str, str]] = None,
        tie: bool = True,
        max_factor_entries: int = MAX_FACTOR_ENTRIES,
    ):
        """`hold`: op name -> why it keeps OneFlow's signature (user SBP, shared parameters).
        `tie`: repeated layers share one choice; `max_factor_entries`: see SearchOptions."""
        self.graph, self.model = graph, model
        self.max_factor_entries = max_factor_entries
        self.mesh = graph.main_placement()
        self.units: List[Unit] = build_units(graph)
        self.unit_of: Dict[str, Tuple[int, int]] = {
            name: (u, pos) for u, unit in enumerate(self.units) for pos, name in enumerate(unit.ops)
        }
        self._sbp_vocab: Dict[NdSbp, int] = {}
        self._sbp_ids: Dict[tuple, np.ndarray] = {}
        self._boxing: Dict[tuple, Tuple[np.ndarray, np.ndarray]] = {}
        self.peaks: Dict[Tuple[int, ...], Peak] = {}  # search.memory.peak_memory's, by plan
        self.peak_index: Optional[PeakIndex] = None  # peak_memory's, made on first use
        # search.descend's Descents, by price, weights and group limits: kept with the problem,
        # so that they go when it goes (a Descent refers to its problem weakly)
        self.descents: Dict[tuple, Descent] = {}
        self._make_vars(hold or {}, tie)
        self._make_unary()
        self._make_ends()
        # tensors alike (tied layers': same ends, shape and dtype) share a class, and so their
        # boxing tables and, at the same choices, their moves
        classes: Dict[tuple, int] = {}
        self._class_of = [classes.setdefault(self._tensor_key(e), len(classes)) for e in self.ends]
        self.factors, self._latency = self._make_factors(len(classes))  # time, its latency part
        self._moves_memo: Dict[Tuple[int, Hashable], Tuple[Transfer, Optional[FrozenSet[int]]]] = {}
        self._weighted: Dict[Weights, List[Factor]] = {SERIAL: self.factors}
        self._priced_tables: Dict[tuple, List[Factor]] = {}
        self.scheduler = Scheduler(graph)
        self._ends_index = self._index_ends()
        self._op_compute_index = self._index_op_compute()
        self.factors_of: List[List[int]] = [[] for _ in self.var_units]
        for i, f in enumerate(self.factors):
            for v in set(f.vars):
                self.factors_of[v].append(i)
        self._tensors_of: List[List[int]] = [
            [] for _ in self.var_units
        ]  # of each variable's first unit
        self._vars_of: List[Tuple[int, ...]] = []  # of each tensor's ends
        for i, ends in enumerate(self.ends):
            ends_at = {(ends.producer.var, ends.producer.unit)} | {
                (c.var, c.unit) for c in ends.consumers
            }
            self._vars_of.append(tuple(sorted({v for v, _ in ends_at})))
            for v in sorted({v for v, u in ends_at if u == self.var_units[v][0]}):
                self._tensors_of[v].append(i)
        self._choices_of = [itemgetter(*vars_) for vars_ in self._vars_of]  # see choices_at
        self._transfer_memo: Dict[Tuple[int, Hashable], Tuple[Transfer, AbstractSet[str]]] = {}
        self._evaluated: Dict[Tuple[int, ...], Breakdown] = {}
        self._around: Dict[int, Tuple[int, ...]] = {}
        # search.memory's boxing blob bytes, by (SBPs, shape, dtype)
        self.blob_tables: Dict[tuple, np.ndarray] = {}
        self._priced: Dict[float, List[np.ndarray]] = {}
        self._gathers: Dict[tuple, Gather] = {}
        self._bytes_memo: Dict[tuple, np.ndarray] = {}
        self._sbp_of_id: List[NdSbp] = []  # the inverse of _sbp_vocab

    # -- variables ---------------------------------------------------------------------------
    def _make_vars(self, hold: Dict[str, str], tie: bool) -> None:
        rep = tie_ops(self.graph) if tie else {name: name for name in self.graph.ops}
        by_key: Dict[Tuple[str, ...], List[int]] = {}
        for u, unit in enumerate(self.units):
            by_key.setdefault(tuple(rep[name] for name in unit.ops), []).append(u)
        self.var_units: List[List[int]] = []
        self.var_of_unit: List[int] = [0] * len(self.units)
        for members in by_key.values():
            head = self.units[members[0]]
            fill_candidates(self.graph, head, self.mesh, hold)
            if head.fixed is not None:
                groups = [[u] for u in members]  # fixed units keep their own native signature
                for u in members[1:]:
                    fill_candidates(self.graph, self.units[u], self.mesh, hold)
            else:
                groups = [members]
                for u in members[1:]:
                    self.units[u].candidates = head.candidates
            for group in groups:
                for u in group:
                    self.var_of_unit[u] = len(self.var_units)
                self.var_units.append(group)
        self.domain = np.array([len(self.units[g[0]].candidates) for g in self.var_units])

    def signature(self, op_name: str, x: Sequence[int]) -> Signature:
        u, pos = self.unit_of[op_name]
        return self.units[u].candidates[x[self.var_of_unit[u]]][pos]

    def is_free(self, var: int) -> bool:
        return self.domain[var] > 1

    # -- unary: compute time and memory ------------------------------------------------------
    def _make_unary(self) -> None:
        """Compute time and memory per candidate, costed once per class on its first unit.

        Tied units have the same types, shapes and attributes, so the same costs: a 96-layer
        model costs one layer's worth of cost-model calls here.
        """
        self.unit_compute: List[np.ndarray] = []  # var -> [candidate, op position] seconds
        self.compute, self.memory = [], []
        for members in self.var_units:
            unit = self.units[members[0]]
            ops = [self.graph.op(name) for name in unit.ops]
            times = np.array(
                [
                    [self.model.op_time(self.graph, op, sig) for op, sig in zip(ops, joint)]
                    for joint in unit.candidates
                ]
            )
            mem = np.array(
                [
                    sum(self.model.op_memory(self.graph, op, sig) for op, sig in zip(ops, joint))
                    for joint in unit.candidates
                ]
            )
            self.unit_compute.append(times)
            self.compute.append(times.sum(axis=1) * len(members))
            self.memory.append(mem * len(members))

    # -- tensors and factors -----------------------------------------------------------------
    def _endpoint(self, op_name: str, bn: str) -> Endpoint:
        u, pos = self.unit_of[op_name]
        return Endpoint(self.var_of_unit[u], u, pos, bn, reads_same_sbp(self.graph.op(op_name), bn))

    def _make_ends(self) -> None:
        self.ends: List[TensorEnds] = []
        for t in self.graph.tensors.values():
            producer = self.graph.op(t.producer)
            local, remote = [], set()
            for c, ibn in t.consumers:
                if self.graph.op(c).placement == producer.placement:
                    if producer.placement.size > 1:  # one device boxes nothing to itself
                        local.append(self._endpoint(c, ibn))
                else:
                    remote.add(
                        self.graph.op(c).placement
                    )  # boxed once per placement (grouped by OneFlow)
            readers = frozenset(c for c, _ in t.consumers)
            producer_end = self._endpoint(t.producer, t.obn)
            self.ends.append(TensorEnds(t, producer_end, local, len(remote), readers))

    def sbp_ids(self, e: Endpoint) -> np.ndarray:
        """Candidate index -> an id of the SBP endpoint e's blob takes (equal ids, equal SBPs)."""
        key = (e.var, e.pos, e.bn)
        ids = self._sbp_ids.get(key)
        if ids is None:
            ids = self._sbp_ids[key] = self._ids(e, self._sbp_vocab)
        return ids

    def sbp_at(self, e: Endpoint, k: int) -> NdSbp:
        """The SBP endpoint e's blob takes when its variable picks candidate k."""
        return self.units[e.unit].candidates[k][e.pos][e.bn]

    def _ids(self, e: Endpoint, vocab: Dict[NdSbp, int]) -> np.ndarray:
        return np.array(
            [vocab.setdefault(self.sbp_at(e, k), len(vocab)) for k in range(self.domain[e.var])]
        )

    def _make_factors(self, classes: int) -> Tuple[List[Factor], List[np.ndarray]]:
        acc: Dict[Tuple[int, ...], Tuple[np.ndarray, np.ndarray]] = {}
        memo: List[Optional[TensorFactors]] = [None] * classes
        for ends, c in zip(self.ends, self._class_of):
            found = memo[c]
            if found is None:
                found = memo[c] = self._tensor_factors(ends)
            for vars_, table, latency in found:
                if vars_ in acc:
                    acc[vars_] = (acc[vars_][0] + table, acc[vars_][1] + latency)
                else:
                    acc[vars_] = (table, latency)
        kept = [(v, t, lat) for v, (t, lat) in acc.items() if np.any(t)]
        return [Factor(v, t) for v, t, _ in kept], [lat for _, _, lat in kept]

    @staticmethod
    def _tensor_key(ends: TensorEnds) -> tuple:
        endpoints = tuple((e.var, e.pos, e.bn, e.strict) for e in [ends.producer] + ends.consumers)
        return ends.remote, endpoints, ends.tensor.shape, ends.tensor.dtype

    def _tensor_factors(self, ends: TensorEnds) -> TensorFactors:
        """(variables, boxing time table, its latency part) of one tensor."""
        t, p = ends.tensor, ends.producer
        vocab: Dict[NdSbp, int] = {}
        first_ids = [self._ids(e, vocab) for e in [p] + ends.consumers]
        # numbered in sorted order, so that tensors of one shape whose ends take the same SBPs
        # share one boxing table, in whatever order their candidates list them
        sbps = tuple(sorted(vocab))
        position = {nd: k for k, nd in enumerate(sbps)}
        renumber = np.array([position[nd] for nd in vocab])  # vocab is in first-id order
        src, *dsts = [renumber[ids] for ids in first_ids]
        box, box_latency = self._boxing_tables(sbps, t.shape, t.dtype)
        strict = np.where(np.eye(len(sbps), dtype=bool), 0.0, INFEASIBLE)
        out: TensorFactors = []
        if ends.remote:
            remote = [
                self.model.remote_transfer(self.sbp_at(p, k), t.shape, t.dtype)
                for k in range(self.domain[p.var])
            ]
            out.append(
                (
                    (p.var,),
                    np.array([tr.time for tr in remote]) * ends.remote,
                    np.array([tr.latency for tr in remote]) * ends.remote,
                )
            )
        if not dsts:
            return out
        for chunk in self.chunks(p, ends.consumers):
            vars_ = tuple(sorted({p.var, *(ends.consumers[i].var for i in chunk)}))
            consumers, ids = [ends.consumers[i] for i in chunk], [dsts[i] for i in chunk]
            boxes = [(strict, None) if c.strict else (box, box_latency) for c in consumers]
            out.append((vars_, *_dedup_tables(vars_, self.domain, p, src, consumers, ids, boxes)))
        return out

    def _boxing_tables(
        self, sbps: Tuple[NdSbp, ...], shape: Tuple[int, ...], dtype: str
    ) -> Tuple[np.ndarray, np.ndarray]:
        """(time, latency) of boxing between every two of `sbps`, for tensors of one shape and
        dtype (tensors alike in shape and in the SBPs their ends take share them)."""
        key = (sbps, shape, dtype)
        if key not in self._boxing:
            transfers = [[self.model.transfer(a, b, shape, dtype) for b in sbps] for a in sbps]
            self._boxing[key] = (
                np.array([[tr.time for tr in row] for row in transfers]),
                np.array([[tr.latency for tr in row] for row in transfers]),
            )
        return self._boxing[key]

    def chunks(self, p: Endpoint, consumers: List[Endpoint]) -> List[List[int]]:
        """Consumers in runs whose joint table with the producer stays under MAX_FACTOR_ENTRIES
        and MAX_FACTOR_VARS variables (a tensor read by dozens of ops with one candidate each
        would otherwise exceed numpy's 32 axes); those of one variable, and those with few
        candidates, first, so that runs hold many."""
        chunks: List[List[int]] = []
        current: List[int] = []
        vars_ = {p.var}
        order = sorted(
            range(len(consumers)), key=lambda i: (self.domain[consumers[i].var], consumers[i].var)
        )
        for i in order:
            c = consumers[i]
            grown = vars_ | {c.var}
            too_big = math.prod(int(self.domain[v]) for v in grown) > self.max_factor_entries
            if current and (too_big or len(grown) > MAX_FACTOR_VARS):
                chunks.append(current)
                current, grown = [], {p.var, c.var}
            current.append(i)
            vars_ = grown
        return chunks + [current]

    # -- objective -----------------------------------------------------------------------------
    def unary(self, memory_weight: "Price" = 0.0) -> List[np.ndarray]:
        """Compute time plus the price of memory: `memory_weight` seconds per byte held across
        the step, or a price per time step (search.prices)."""
        if isinstance(memory_weight, StepPrices):
            return [c + e for c, e in zip(self.compute, memory_weight.unary)]
        if memory_weight == 0.0:
            return self.compute
        if memory_weight not in self._priced:
            self._priced[memory_weight] = [
                c + memory_weight * m for c, m in zip(self.compute, self.memory)
            ]
        return self._priced[memory_weight]

    def memory_cost(self, x: Sequence[int], memory_weight: "Price") -> float:
        """What the price of memory adds to the objective at x."""
        if isinstance(memory_weight, StepPrices):
            unary = float(sum(e[x[v]] for v, e in enumerate(memory_weight.unary)))
            return unary + memory_weight.factor_cost([f.vars for f in self.factors], x)
        return memory_weight * self.memory_of(x) if memory_weight else 0.0

    def _gather(self, key: tuple, make) -> "Gather":
        """The gather under `key`, made once; those of one price per time step are kept only
        until another price's are made (the search moves on from a price, never back)."""
        if key not in self._gathers:
            prices = [k for k in key if isinstance(k, StepPrices)]
            if prices:
                stale = [
                    k
                    for k in self._gathers
                    if any(isinstance(i, StepPrices) and i is not prices[0] for i in k)
                ]
                for k in stale:
                    del self._gathers[k]
            self._gathers[key] = make()
        return self._gathers[key]

    def tables(self, weights: Weights = SERIAL, memory_weight: "Price" = 0.0) -> List[Factor]:
        """The factors as `weights` price them (aligned with self.factors: same variables), plus
        what a price per time step charges for the boxings' blobs. What OneFlow cannot do stays
        INFEASIBLE whatever the weights."""
        if isinstance(memory_weight, StepPrices) and memory_weight.factors:
            key = (weights, memory_weight)
            if key not in self._priced_tables:
                timed = list(self.tables(weights))
                for f, extra in memory_weight.factors.items():
                    timed[f] = Factor(timed[f].vars, timed[f].table + extra)
                self._priced_tables = {key: timed}  # one price at a time: the search's order
            return self._priced_tables[key]
        if weights not in self._weighted:
            self._weighted[weights] = [
                Factor(
                    f.vars,
                    np.where(
                        f.table >= INFEASIBLE,
                        INFEASIBLE,
                        weights.moving * (f.table - lat) + weights.latency * lat,
                    ),
                )
                for f, lat in zip(self.factors, self._latency)
            ]
        return self._weighted[weights]

    def objective(
        self, x: Sequence[int], memory_weight: "Price" = 0.0, weights: Weights = SERIAL
    ) -> float:
        """Compute (plus the price of memory) and every factor's boxing, at x."""
        unary = self._gather(
            ("unary", memory_weight), lambda: Gather.of_unary(self.unary(memory_weight))
        )
        priced = memory_weight if isinstance(memory_weight, StepPrices) else None
        factors = self._gather(
            ("factors", weights, priced),
            lambda: Gather.of_factors(self.tables(weights, memory_weight)),
        )
        xa: np.ndarray = np.asarray(x, dtype=np.int64)
        return unary.total(xa) + factors.total(xa)

    def change(
        self,
        x: Sequence[int],
        var: int,
        k: int,
        memory_weight: "Price" = 0.0,
        weights: Weights = SERIAL,
    ) -> float:
        """What setting `var` to candidate k adds to objective(x, memory_weight, weights)."""
        unary = self.unary(memory_weight)[var]
        delta = float(unary[k] - unary[x[var]])
        tables = self.tables(weights, memory_weight)
        for fid in self.factors_of[var]:
            f = tables[fid]
            delta += float(
                f.table[tuple(k if u == var else x[u] for u in f.vars)]
                - f.table[tuple(x[u] for u in f.vars)]
            )
        return delta

    def changes(
        self,
        x: Sequence[int],
        var: int,
        memory_weight: "Price" = 0.0,
        weights: Weights = SERIAL,
    ) -> np.ndarray:
        """`change(x, var, k, ...)` for every candidate k of `var` at once (a factor holds each of
        its variables once)."""
        unary = self.unary(memory_weight)[var]
        delta = unary - unary[x[var]]
        for fid in self.factors_of[var]:
            f = self.tables(weights, memory_weight)[fid]
            row = f.table[tuple(slice(None) if u == var else x[u] for u in f.vars)]
            delta = delta + (row - f.table[tuple(x[u] for u in f.vars)])
        return delta

    def compute_of(self, x: Sequence[int]) -> float:
        return self._gather(("unary", 0.0), lambda: Gather.of_unary(self.compute)).total(
            np.asarray(x, dtype=np.int64)
        )

    def memory_of(self, x: Sequence[int]) -> float:
        return self._gather(("memory",), lambda: Gather.of_unary(self.memory)).total(
            np.asarray(x, dtype=np.int64)
        )

    def min_memory(self) -> float:
        """The least memory per device any assignment needs."""
        return float(sum(m.min() for m in self.memory))

    def bytes_around(self, x: Sequence[int], var: int) -> float:
        """Bytes per device that the boxings of the tensors `var`'s first unit produces or reads
        move under x, times the units tied to it: what changing `var` alone can change, up to
        tied units whose neighbours differ (for ranking moves; evaluate is exact)."""
        return sum(self._transfer_of(i, x)[0].bytes for i in self._tensors_of[var]) * len(
            self.var_units[var]
        )

    def around(self, var: int) -> Tuple[int, ...]:
        """The variables whose values `bytes_around_all` and `changes` of `var` read (it among
        them): where none of them changed, neither did those."""
        if var not in self._around:
            near = {var}
            for i in self._tensors_of[var]:
                near.update(self._vars_of[i])
            for f in self.factors_of[var]:
                near.update(self.factors[f].vars)
            self._around[var] = tuple(sorted(near))
        return self._around[var]

    def bytes_around_all(self, x: Sequence[int], var: int) -> np.ndarray:
        """`bytes_around` with `var` set to each of its candidates in turn, memoised per tensor on
        the choices of the other variables at its ends."""
        total = np.zeros(int(self.domain[var]))
        for i in self._tensors_of[var]:
            key = (i, var, tuple(-1 if v == var else x[v] for v in self._vars_of[i]))
            row = self._bytes_memo.get(key)
            if row is None:
                row = self._bytes_memo[key] = self._bytes_row(self.ends[i], x, var)
            total += row
        return total * len(self.var_units[var])

    def _bytes_row(self, ends: TensorEnds, x: Sequence[int], var: int) -> np.ndarray:
        """The bytes of one tensor's boxings (as _moves sums them) with `var` set to each
        of its candidates, over SBP ids: the moves to fewer bytes weigh every candidate of every
        variable, each through every tensor around it."""
        domain = int(self.domain[var])

        def ids(e: Endpoint) -> List[int]:
            at = self.sbp_ids(e)
            return at.tolist() if e.var == var else [int(at[x[e.var]])] * domain

        src, dsts = ids(ends.producer), [(ids(c), c.strict) for c in ends.consumers]
        t, p = ends.tensor, ends.producer
        remote = self.model.remote_transfer(self.sbp_at(p, x[p.var]), t.shape, t.dtype).bytes
        row = np.empty(domain)
        for k in range(domain):
            total, seen = 0.0, set()
            for dst, strict in dsts:
                d = dst[k]
                if d == src[k]:
                    continue
                if strict:  # before the twins: a strict consumer's INF is never hidden
                    total = math.inf
                    break
                if d not in seen:
                    seen.add(d)
                    total += self._pair_bytes(src[k], d, t)
            for _ in range(ends.remote):
                total += remote
            row[k] = total
        return row

    def _pair_bytes(self, src: int, dst: int, t: Tensor) -> float:
        """Bytes of boxing tensor t between the SBPs with these ids (Problem.sbp_ids)."""
        if len(self._sbp_of_id) < len(self._sbp_vocab):
            self._sbp_of_id = sorted(self._sbp_vocab, key=self._sbp_vocab.__getitem__)
        a, b = self._sbp_of_id[src], self._sbp_of_id[dst]
        return self.model.transfer(a, b, t.shape, t.dtype).bytes

    def choices_at(self, i: int, x: Sequence[int]) -> Hashable:
        """The choices of x that tensor i's boxing depends on, its producer's and consumers': a
        key to memoise what depends on them only."""
        return self._choices_of[i](x)

    def _transfer_of(self, i: int, x: Sequence[int]) -> Tuple[Transfer, AbstractSet[str]]:
        """Tensor i's boxing under x and the consumers that read it through it (on another
        placement, or in another SBP than its producer's), memoised on the choices of the
        variables at its ends (the final picks weigh many assignments one variable apart); its
        moves are its class's at those choices."""
        key = (i, self.choices_at(i, x))
        found = self._transfer_memo.get(key)
        if found is None:
            shared = (self._class_of[i], key[1])
            if shared not in self._moves_memo:
                self._moves_memo[shared] = self._moves(self.ends[i], x)
            moves, unboxed = self._moves_memo[shared]
            found = self._transfer_memo[key] = (moves, self._boxed_readers(self.ends[i], unboxed))
        return found

    def _boxed_readers(self, ends: TensorEnds, unboxed: Optional[FrozenSet[int]]) -> FrozenSet[str]:
        """The readers of the tensor but the consumers at positions `unboxed` (all: None)."""
        if not unboxed:
            return ends.readers
        c = ends.consumers
        return ends.readers - {self.units[c[k].unit].ops[c[k].pos] for k in unboxed}

    def evaluate(self, x: Sequence[int]) -> Breakdown:
        """Exact step time, bytes and memory per device of assignment `x` (memoised: the search
        weighs the same assignments many times)."""
        key = tuple(x)
        if key not in self._evaluated:
            self._evaluated[key] = self._evaluate(x)
        return self._evaluated[key]

    def _evaluate(self, x: Sequence[int]) -> Breakdown:
        b = Breakdown(0.0, 0.0, 0.0, 0.0, 0.0, self.memory_of(x))
        flat, base, var, width = self._op_compute_index
        times = flat[base + np.asarray(x, dtype=int)[var] * width].tolist()
        b.op_compute = dict(zip(self.graph.ops, times))
        b.compute_time = sum(times)
        waiting = {}
        for i in self.boxed_tensors(x):
            ends = self.ends[i]
            tr, boxed = self._transfer_of(i, x)
            if tr.bytes or tr.time:
                b.tensor_comm[ends.tensor.lbn] = tr
                waiting[ends.tensor.lbn] = (tr.time, tr.latency, boxed)
                b.comm_time += tr.time
                b.bytes_per_device += tr.bytes
        cluster = self.model.cluster
        schedule = self.scheduler.run(times, waiting, cluster.comm_overlap, cluster.boxing_on_cpu)
        b.step_time, b.exposed_comm_time = schedule.step_time, schedule.exposed_comm_time
        return b

    def _index_op_compute(self) -> Tuple[np.ndarray, ...]:
        """(flat, base, var, width): every op's compute time under any assignment in one array, the
        ops in the graph's order; op i's under x is flat[base[i] + x[var[i]] * width[i]]."""
        offsets = np.cumsum([0] + [t.size for t in self.unit_compute[:-1]])
        where = [self.unit_of[name] for name in self.graph.ops]
        var: np.ndarray = np.array([self.var_of_unit[u] for u, _ in where], dtype=int)
        width: np.ndarray = np.array([self.unit_compute[v].shape[1] for v in var], dtype=int)
        base = offsets[var] + np.array([pos for _, pos in where], dtype=int)
        flat = np.concatenate([t.ravel() for t in self.unit_compute] or [np.zeros(0)])
        return flat, base, var, width

    def _index_ends(self) -> Tuple[np.ndarray, ...]:
        """Every endpoint's candidate -> SBP id table in one flat array, with where each starts and
        whose variable picks in it: to find the tensors an assignment boxes without a loop."""
        tables: List[np.ndarray] = []
        offsets: Dict[tuple, int] = {}
        size = 0

        def start(e: Endpoint) -> int:
            nonlocal size
            key = (e.var, e.pos, e.bn)
            if key not in offsets:
                offsets[key] = size
                tables.append(self.sbp_ids(e))
                size += len(tables[-1])
            return offsets[key]

        consumers = [(i, c) for i, ends in enumerate(self.ends) for c in ends.consumers]
        p_start: np.ndarray = np.array([start(ends.producer) for ends in self.ends], dtype=int)
        c_start: np.ndarray = np.array([start(c) for _, c in consumers], dtype=int)
        return (
            np.concatenate(tables) if tables else np.zeros(0, int),
            p_start,
            np.array([ends.producer.var for ends in self.ends], dtype=int),
            c_start,
            np.array([c.var for _, c in consumers], dtype=int),
            np.array([i for i, _ in consumers], dtype=int),
            np.array([ends.remote > 0 for ends in self.ends]),
        )

    def boxed_lbns(self, x: Sequence[int]) -> Set[str]:
        """The tensors some consumer reads in another SBP, or on another placement, under x."""
        return {self.ends[i].tensor.lbn for i in self.boxed_tensors(x)}

    def boxed_tensors(self, x: Sequence[int]) -> List[int]:
        """Indices into self.ends of the tensors some consumer reads in another SBP, or on another
        placement."""
        ids, p_start, p_var, c_start, c_var, c_tensor, remote = self._ends_index
        xa: np.ndarray = np.asarray(x, dtype=int)
        src = ids[p_start + xa[p_var]]
        differs = remote.copy()
        differs[c_tensor[ids[c_start + xa[c_var]] != src[c_tensor]]] = True
        return np.flatnonzero(differs).tolist()

    def _moves(
        self, ends: TensorEnds, x: Sequence[int]
    ) -> Tuple[Transfer, Optional[FrozenSet[int]]]:
        """One tensor's boxing under x (a move to each distinct SBP its consumers take it in,
        a copy to each other placement), and the positions of the consumers that take it as
        produced (None where a strict consumer cannot: infeasible)."""
        t = ends.tensor
        src = self.sbp_at(ends.producer, x[ends.producer.var])
        targets, unboxed = [], set()
        for k, c in enumerate(ends.consumers):
            dst = self.sbp_at(c, x[c.var])
            if dst == src:
                unboxed.add(k)
            elif c.strict:
                return Transfer(float("inf"), INFEASIBLE), None
            elif dst not in targets:
                targets.append(dst)
        moves = [self.model.transfer(src, dst, t.shape, t.dtype) for dst in targets]
        moves += [self.model.remote_transfer(src, t.shape, t.dtype)] * ends.remote
        return added(moves), frozenset(unboxed)

    def assignment_of(self, signatures: Dict[str, Signature]) -> Optional[List[int]]:
        """The variable assignment realising per-op signatures (None if some op cannot take its)."""
        x = []
        for members in self.var_units:
            unit = self.units[members[0]]
            wanted = tuple(signatures.get(name) for name in unit.ops)
            match = [
                k
                for k, joint in enumerate(unit.candidates)
                if all(w is None or w == s for w, s in zip(wanted, joint))
            ]
            if not match:
                return None
            x.append(match[0])
        return x


class Gather:
    """One entry from each of many tables at an assignment, summed: the tables raveled end to
    end (a table that several scopes read, as tied layers' do, once), each entry found by its
    variables' values times its strides, in one numpy gather."""

    def __init__(self, scopes: Sequence[Tuple[int, ...]], tables: Sequence[np.ndarray]):
        arity = max((len(s) for s in scopes), default=0)
        starts: Dict[int, int] = {}  # id of a table -> where it starts in `flat`
        kept: List[np.ndarray] = []
        size = 0
        for t in tables:
            if id(t) not in starts:
                starts[id(t)], size = size, size + t.size
                kept.append(np.ascontiguousarray(t).ravel())
        self.flat = np.concatenate(kept) if kept else np.zeros(0)
        self.base: np.ndarray = np.array([starts[id(t)] for t in tables], dtype=np.int64)
        self.vars: np.ndarray = np.full((len(scopes), arity), -1, dtype=np.int64)  # -1 reads 0
        self.strides: np.ndarray = np.zeros((len(scopes), arity), dtype=np.int64)
        for i, (scope, t) in enumerate(zip(scopes, tables)):
            self.vars[i, : len(scope)] = scope
            self.strides[i, : len(scope)] = _strides(t.shape)

    @classmethod
    def of_unary(cls, tables: Sequence[np.ndarray]) -> "Gather":
        return cls([(v,) for v in range(len(tables))], tables)

    @classmethod
    def of_factors(cls, factors: Sequence[Factor]) -> "Gather":
        return cls([f.vars for f in factors], [f.table for f in factors])

    def entries(self, x: np.ndarray) -> np.ndarray:
        """Each table's entry at x."""
        values = np.append(x, 0)[self.vars]
        return self.flat[self.base + (values * self.strides).sum(axis=1)]

    def total(self, x: np.ndarray) -> float:
        return float(self.entries(x).sum())


def _strides(shape: Tuple[int, ...]) -> List[int]:
    """The strides, in entries, of a C-ordered table of this shape."""
    out = [1] * len(shape)
    for axis in range(len(shape) - 2, -1, -1):
        out[axis] = out[axis + 1] * shape[axis + 1]
    return out


def _dedup_tables(
    vars_: Tuple[int, ...],
    domain: np.ndarray,
    p: Endpoint,
    src: np.ndarray,
    consumers: List[Endpoint],
    dsts: List[np.ndarray],
    boxes: Sequence[Tuple[np.ndarray, Optional[np.ndarray]]],
) -> Tuple[np.ndarray, np.ndarray]:
    """Tables over `vars_` of the sum over distinct consumer SBPs of (time, latency)[src][dst],
    each consumer's pair from `boxes` (latency None: the time table holds all of it, as a strict
    consumer's INFEASIBLE does)."""
    axis = {v: i for i, v in enumerate(vars_)}
    shape = tuple(int(domain[v]) for v in vars_)

    def grid(e: Endpoint, ids: np.ndarray) -> np.ndarray:
        view = [1] * len(shape)
        view[axis[e.var]] = shape[axis[e.var]]
        return ids.reshape(view)

    s = grid(p, src)
    seen: List[np.ndarray] = []
    time_table: Union[float, np.ndarray] = 0.0
    latency_table: Union[float, np.ndarray] = 0.0
    for c, ids, (box, latency) in zip(consumers, dsts, boxes):
        d = grid(c, ids)
        new: Optional[np.ndarray] = None  # None: every entry is a new SBP
        if not c.strict:  # a strict consumer's INF must not be hidden by an earlier twin
            for prev in seen:
                new = (d != prev) if new is None else new & (d != prev)
            seen.append(d)
        time_table = time_table + (box[s, d] if new is None else box[s, d] * new)
        if latency is not None:
            latency_table = latency_table + (latency[s, d] if new is None else latency[s, d] * new)
    return (
        filled(time_table, shape),
        filled(latency_table, shape),
    )


def build_problem(
    graph: Graph,
    cluster: Cluster,
    hold: Optional[Dict[str, str]] = None,
    ranks_per_node: Optional[int] = None,
    tie: bool = True,
    max_factor_entries: int = MAX_FACTOR_ENTRIES,
) -> Problem:
    """The problem of planning `graph` on its main placement for `cluster`, whose nodes hold
    `ranks_per_node` consecutive ranks (default: the cluster's devices per node)."""
    mesh = graph.main_placement()
    model = CostModel(cluster, mesh.hierarchy, mesh.ranks, ranks_per_node)
    return Problem(graph, model, hold=hold, tie=tie, max_factor_entries=max_factor_entries)
