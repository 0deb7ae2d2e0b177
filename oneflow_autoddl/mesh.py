"""Device meshes written as `8`, `2x4` or `16x64`: the shape of a placement's hierarchy."""

import re
from typing import Tuple

from .errors import ConfigError

Mesh = Tuple[int, ...]


def parse_mesh(text: str) -> Mesh:
    """`"2x4"` -> (2, 4). Every axis must be a positive integer."""
    t = str(text).strip().lower()
    if not re.fullmatch(r"\d+(x\d+)*", t):
        raise ConfigError(f"mesh {text!r} is not of the form N or AxB (e.g. 8, 2x4, 16x64)")
    mesh = tuple(int(p) for p in t.split("x"))
    if any(h < 1 for h in mesh):
        raise ConfigError(f"mesh {text!r} has an axis of size 0")
    return mesh


def format_mesh(mesh: Mesh) -> str:
    return "x".join(str(h) for h in mesh)


def mesh_size(mesh: Mesh) -> int:
    n = 1
    for h in mesh:
        n *= h
    return n


def rank_grid(mesh: Mesh, start: int = 0):
    """Nested lists of ranks in row-major order, as `flow.placement(ranks=...)` takes them."""
    if len(mesh) == 1:
        return list(range(start, start + mesh[0]))
    step = mesh_size(mesh[1:])
    return [rank_grid(mesh[1:], start + i * step) for i in range(mesh[0])]
