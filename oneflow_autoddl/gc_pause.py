"""Python's cyclic garbage collector paused while the planner works.

Planning allocates millions of small containers (tuples, lists, dicts, numpy scalars) that die
by reference counting and form almost no cycles; every so many allocations the collector still
walks the objects of the whole process, OneFlow's included, in search of cycles that are not
there. Paused, it walks none: the same plan in less time. The few cycles planning does leave
are collected once it is back on.
"""

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The collector off inside the block (or the function it decorates) and, if it was on
    before, on again after it, however the block ends; one already off stays off."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
