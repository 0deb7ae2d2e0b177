"""Dimensions as monomials over a model's named sizes: `4*heads*head_dim`, `batch*seq_len`, `-1`.

A template is traced with a distinct prime for every free size, so each traced dimension
factorises uniquely into those primes and a constant (powers of 2, the 3 of RGB): 84 with
heads=3, head_dim=7 is `4*heads*head_dim`. Evaluating the monomial at other sizes gives the
dimension OneFlow would infer there, exactly, as long as every dimension is a product of
sizes (no sums, no rounding) -- which the tracing tool checks against a second trace.
"""

from typing import Dict, Mapping, Sequence, Tuple


class SymbolError(ValueError):
    """A dimension that is not a monomial of the sizes, or a size missing at evaluation."""


def factorise(value: int, primes: Mapping[str, int]) -> str:
    """`factorise(84, {"heads": 3, "head_dim": 7})` -> `"4*heads*head_dim"`; constants stay
    numbers."""
    if value == 0:
        raise SymbolError("a zero dimension cannot be made symbolic")
    rest, factors = value, []
    for name, p in primes.items():
        e = 0
        while rest % p == 0:
            rest //= p
            e += 1
        if e:
            factors.append(name if e == 1 else f"{name}^{e}")
    if rest != 1 or not factors:
        factors.insert(0, str(rest))
    return "*".join(factors)


def parse(text: str) -> Tuple[int, Tuple[Tuple[str, int], ...]]:
    """`"4*heads*head_dim"` -> (4, (("heads", 1), ("head_dim", 1)))."""
    const, powers = 1, []
    for factor in text.split("*"):
        name, _, exp = factor.partition("^")
        if name.lstrip("-").isdigit():
            const *= int(name)
        elif name.isidentifier() and (not exp or exp.isdigit()):
            powers.append((name, int(exp or 1)))
        else:
            raise SymbolError(f"not a monomial: {text!r}")
    return const, tuple(powers)


class Evaluator:
    """Evaluates monomials at one set of sizes; each distinct text is parsed once."""

    def __init__(self, sizes: Mapping[str, int]):
        self.sizes = dict(sizes)
        self._cache: Dict[str, int] = {}

    def dim(self, text: str) -> int:
        if text not in self._cache:
            const, powers = parse(text)
            v = const
            for name, e in powers:
                if name not in self.sizes:
                    raise SymbolError(f"dimension {text!r} needs the size {name!r}")
                v *= self.sizes[name] ** e
            self._cache[text] = v
        return self._cache[text]

    def shape(self, dims: Sequence[str]) -> Tuple[int, ...]:
        return tuple(self.dim(d) for d in dims)
