"""A price per byte for each memory item, bisected round by round towards the least that fits.

A Lagrangian price per time step (search.prices) moves every item live at a step together; an
item then costs the sum of its span's prices. Here each item has its own weight instead (as
the winning entry of the IOPDDL contest did per node): after each round's descent, an item
whose span touches a step over the limit is *over*, and its weight is a lower bound on what it
needs; an item whose span stays within the limit is not, and its weight an upper bound. Each
weight moves to the geometric middle of its bounds, which the rounds narrow; where an item
keeps to one side and its weight comes within NEAR of the bound on that side, the bound moves
WIDEN times past the weight (without, the weight would creep towards a bound it cannot pass;
with, an item whose steps always have room loses about a factor WIDEN every few rounds, towards
no price at all). Items at the full steps settle at the weights that just keep them within the
limit, each at its own, so that a long-lived tensor and a brief one are not priced alike.
A caller may have the bound of an item never yet over move every round instead (`update`'s
`fall`): its weight halves each round, so that the weights of items with room fall in a few
rounds where the creeping takes dozens.
"""

from dataclasses import dataclass

import numpy as np

WIDEN = 4.0  # a bound the weight comes within NEAR of moves this factor past it
NEAR = 1.01  # as a ratio


@dataclass
class ItemWeights:
    low: np.ndarray  # per item: a weight at which it was over the limit (or a guess below)
    high: np.ndarray  # a weight at which it was within it (or a guess above)
    seen: np.ndarray  # whether it has been over the limit since these weights started

    @classmethod
    def start(cls, items: int, first: float) -> "ItemWeights":
        """Every item at `first`, bracketed by a factor WIDEN either way."""
        weight = np.full(items, float(first))
        return cls(weight / WIDEN, weight * WIDEN, np.zeros(items, dtype=bool))

    def scaled(self, factor: float) -> "ItemWeights":
        """Every weight and bound times `factor`, in arrays of its own."""
        return ItemWeights(self.low * factor, self.high * factor, self.seen.copy())

    @property
    def weight(self) -> np.ndarray:
        """Per item: the price per byte it holds now (in the objective's unit), the geometric
        middle of its bounds."""
        return np.sqrt(self.low * self.high)

    def update(self, over: np.ndarray, fall: bool = False) -> None:
        """One round's bisection: `over[i]` whether item i's span touched a step over the limit
        under the current weights. `fall`: an item never yet over moves its lower bound WIDEN
        below its weight every round (the weight halves), not only once the weight comes near
        it: the weights of items whose steps have room fall in a few rounds instead of dozens."""
        w = self.weight
        self.seen |= over
        widen = self.low * NEAR >= w
        if fall:
            widen |= ~self.seen
        self.low = np.where(over, w, np.where(widen, w / WIDEN, self.low))
        self.high = np.where(over, np.where(self.high > w * NEAR, self.high, w * WIDEN), w)


def items_over(start: np.ndarray, end: np.ndarray, usage: np.ndarray, limit: float) -> np.ndarray:
    """Per item (live at steps start[i] .. end[i] - 1): whether `usage` (bytes per step) is over
    `limit` at any of its steps."""
    full = np.concatenate([[0], np.cumsum(usage > limit)])
    return full[end] > full[start]
