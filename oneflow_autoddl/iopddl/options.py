"""Every knob of the IOPDDL solve (iopddl.solve) in one place, each with its meaning and unit.

`SolveOptions()` is what `solve` uses unless given another; `benchmarks.iopddl --option
NAME=VALUE` sets one for a run, and `benchmarks.iopddl_seeds` runs one setting over several
seeds, which is how a change to these should be judged (one seed's result moves by points from
run to run: docs/results.md, The IOPDDL contest's graphs).
"""

import ast
from dataclasses import dataclass, fields, replace
from typing import Sequence, Tuple

from ..errors import AutoDDLError
from ..search.partition import MAX_CHECKS


@dataclass(frozen=True)
class SolveOptions:
    # -- the rounds of item weights (Search.balance) -----------------------------------------
    # Share of the time (after reading and reducing) for the rounds; the rest for the kicks.
    rounds_share: float = 0.97
    # Partitions a round descends under one set of item weights before they move.
    round_passes: int = 2
    # Share of the rounds' time without a cheaper fit after which the next round starts again
    # from the cheapest fit.
    stale_share: float = 0.08
    # Such a restart takes the weights that found the cheapest fit times one of these, drawn.
    restart_scales: Tuple[float, ...] = (0.5, 1.0, 2.0)
    # Or, this often (a probability), from the cheapest assignment a round reached over the
    # limit, where it costs less than the cheapest fit, under fresh weights.
    from_lowest: float = 0.5
    # Restarts in a row that find nothing before the partitions grow in program order.
    in_order_after: int = 2
    # Rounds, from the first, in which an item never yet over the limit sees its weight halve
    # every round (search.weights.ItemWeights.update's `fall`): the weights of items with room
    # fall in a few rounds instead of dozens, which a short run needs and a long one can spare.
    fall_rounds: int = 40

    # -- the partitions and their descents ---------------------------------------------------
    # Most variables in one group of a partition.
    group_vars: int = 300
    # Most variables closing a cycle a group weighs taking in: each costs a count of the
    # group's elimination width (search.partition.grow_group); the cycles are what make a
    # group's descent worth more than single moves, and what make it dear.
    group_checks: int = MAX_CHECKS
    # Variables a descent takes between looks at the clock.
    chunk_vars: int = 600
    # Partitions in a row that lower nothing end a kick's descent.
    patience: int = 2

    # -- the kicks (Search.improve) ----------------------------------------------------------
    # Most variables a kick sets at random.
    kick: int = 8
    # Variables around a kick that descend again.
    around: int = 120
    # The weights a kick descends under, as multiples of the rounds' last weights.
    levels: Tuple[float, ...] = (0.0, 0.5, 1.0, 2.0)
    # Passes of single-variable moves along the limit after a round or a kick.
    tighten_passes: int = 3


def with_settings(options: SolveOptions, settings: Sequence[str]) -> SolveOptions:
    """`options` with each `NAME=VALUE` of `settings` set (VALUE a Python literal of the field's
    type: 0.5, 3, (0.5, 1.0)); an AutoDDLError naming the fields where NAME is not one."""
    known = {f.name: type(getattr(options, f.name)) for f in fields(options)}
    changes = {}
    for setting in settings:
        name, sep, text = setting.partition("=")
        if not sep or name not in known:
            raise AutoDDLError(
                f"--option {setting!r}: give NAME=VALUE with NAME one of {', '.join(known)}"
            )
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError) as e:
            raise AutoDDLError(
                f"--option {setting!r}: {text!r} is not a Python literal (a number, or a tuple of "
                "numbers)"
            ) from e
        if known[name] is float and isinstance(value, int):
            value = float(value)
        if not isinstance(value, known[name]):
            raise AutoDDLError(
                f"--option {setting!r}: {name} must be of type {known[name].__name__}, not "
                f"{value!r}"
            )
        changes[name] = value
    return replace(options, **changes)
