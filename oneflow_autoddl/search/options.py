"""Every knob of the search in one place, each with its meaning and unit.

The defaults are the planner's; `SearchOptions()` is what `planner.plan` uses unless given
another. A plan depends on these, so the plan cache keys on them (`SearchOptions.key`).
"""

from dataclasses import asdict, dataclass
from typing import Optional, Tuple

from .problem import Weights


@dataclass(frozen=True)
class SearchOptions:
    # -- the problem -------------------------------------------------------------------------
    # Repeated layers (search.ties: sibling scopes alike op for op) share one choice, so a
    # 96-layer model costs about one layer to plan.
    tie_layers: bool = True
    # Entries (candidate combinations) a tensor's boxing table may hold over its producer and
    # consumers before its consumers are split into runs of their own (search.problem): larger
    # tables see more shared boxings exactly, and cost time and memory to build.
    max_factor_entries: int = 1 << 16

    # -- seeds -------------------------------------------------------------------------------
    # On n-D meshes whose axes all run over the same links, the best plan for the 1-D mesh of
    # the same devices, lifted (S(0) over 4 devices is (S(0), S(0)) over 2 x 2): a start the
    # descent does not reach from the others, since it moves one group at a time.
    flat_seed: bool = True

    # -- descents ----------------------------------------------------------------------------
    # What the descents minimise (search.problem.Weights: the price of a second of a boxing's
    # moving bytes and of its latency); None: by the cluster's backend (search.descend.objectives).
    objectives: Optional[Tuple[Weights, ...]] = None
    # Largest group (variables) a descent step re-solves: a module scope with more is left to its
    # sub-scopes and to each variable's neighbourhood (a group's table work grows with its size;
    # on the zoo's Swin a scope of ~950 variables took half the planning time).
    max_group_vars: int = 400
    # Largest table (entries) eliminating a group may build; a group that needs a larger one is
    # left to the others (on the examples' GPT and VGG on 2, 4 and 2 x 2 CPU ranks and two of
    # plan_quality's rows, 2^22 found the same plans in more time, 2^19 a VGG plan on 2 x 2
    # moving 2% more bytes).
    max_table_entries: int = 1 << 20
    # Largest group the first sweep from every seed re-solves; the finalists' descents to
    # convergence solve every group.
    seed_sweep_group: int = 32
    # Starts that descend to convergence under the serial objective (compute plus every
    # boxing), and under each other objective (search.descend.objectives), ranked by it.
    finalists: int = 2
    finalists_other: int = 1
    # Rounds in which the pick descends again under every objective, until it stays the pick.
    polish_rounds: int = 3

    # -- the pick ----------------------------------------------------------------------------
    # A plan at most this fraction of a step slower than the fastest may win by moving fewer
    # bytes (search.select.pick): below it predicted step times do not tell plans apart (the
    # model's resolution between plans, see docs/cost-model.md), while bytes are exact and what a
    # shared network charges for.
    bytes_tie: float = 0.03
    # Single-variable moves to fewer bytes the pick is weighed against in a round, and how many
    # rounds (moves taken one after another) at most.
    byte_moves_offered: int = 8
    byte_moves_taken: int = 16
    # The least a move must save (a fraction of the plan's bytes) to be offered: each offered move
    # costs an exact schedule. 0 here: moves of under 0.1% open the way to larger ones (with 1e-3,
    # the examples' GPT on 2 x 2 of tests/unit/test_pinned_plans.py was 1.1% slower and sent 1.7%
    # more bytes). `fit_byte_move_floor` is the memory fit's, in its bisections (search.fit).
    byte_move_floor: float = 0.0
    fit_byte_move_floor: float = 1e-3

    # -- memory ------------------------------------------------------------------------------
    # Rounds that raise the price of a byte of memory (search.fit.PRICE_STEP times each) until
    # the plan fits, then bisections of the interval back towards the cheapest price that fits.
    penalty_rounds: int = 12
    bisections: int = 2
    # Passes of unpriced moves that keep a fitted plan within the limit (search.tighten): each
    # re-solves every group of the descent and then every variable alone.
    tighten_passes: int = 3
    # Where no plan fits, recompute the activations of every repeated block (search.ties) in
    # backward, as OneFlow's activation checkpointing does, and search that graph
    # (oneflow_autoddl.recompute): a block then holds its inputs only, for one more forward.
    recompute: bool = True
    # Where recomputing finds no plan and the device reuses memory, give the readers of each
    # phase their own copy of a parameter (and of a recomputed block's input, and the updates
    # one of a gradient), so that it is boxed in the phase that reads it and freed after, as
    # ZeRO stage 3 gathers a parameter where it is used and reduces a gradient as it is made
    # (oneflow_autoddl.regather): held for less of the step, a parameter sent once per phase.
    regather: bool = True

    # -- the report --------------------------------------------------------------------------
    transfers_kept: int = 50  # the costliest boxings a plan lists

    def key(self) -> Tuple:
        """What a plan made with these options depends on, for the plan cache."""
        return tuple(sorted(asdict(self).items()))
