"""The operator's heap after a reconcile: collected, frozen, and trimmed.

A full collection of Python's cyclic collector walks every object the process
holds, with every thread stopped. At 25,000 nodes that is millions (the Node
entries, Slurm's node list, the config in force): about a second. CPython runs
one whenever the objects that survived into the oldest generation since the
last grew by a quarter, which a replaced Slurm node list or a new config does
on its own, so a label change's config often waited behind one. Instead, at
most once a `SWEEP_SECONDS`, a reconcile's worker collects everything and
freezes what survived (`gc.freeze`): until the next sweep the collector's own
runs walk only what was made since. Each sweep unfreezes first, so garbage
that formed among frozen objects is found within one interval. The youngest
generation is collected less often than CPython's default (`tune_collector`),
so what a read or a config makes and drops is rarely promoted at all.

Then the free pages go back: glibc keeps what is freed in its arenas, one per
thread that allocated, and returns to the system only what lies at a heap's
top, so the operator's RSS would stay at its highest reconcile's.
`malloc_trim(0)` releases the free pages inside every arena too (malloc_trim(3),
glibc 2.8+). Elsewhere (no glibc) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import threading
import time
from collections.abc import Callable

__all__ = ["HEAP", "SWEEP_SECONDS", "YOUNG_OBJECTS", "Heap", "tune_collector"]

# One full pause a minute, at a reconcile's end, instead of one behind any change.
SWEEP_SECONDS = 60.0
# CPython collects its youngest generation every 700 new objects. A read of
# 25,000 Slurm nodes makes some 300,000 that live until the read is done: each
# is walked by a dozen young collections and promoted, which is what fills the
# oldest generation. Collected every 50,000, most die young, and a collection
# still walks only milliseconds' worth.
YOUNG_OBJECTS = 50_000


def tune_collector() -> None:
    """The operator's thresholds, set once at start (the older generations keep
    CPython's: collected after 10 of the younger's collections)."""
    gc.set_threshold(YOUNG_OBJECTS, 10, 10)


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


_TRIM = _malloc_trim()


class Heap:
    """The process's heap, settled after each reconcile (from any worker thread)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._sweeping = threading.Lock()
        self._swept_at: float | None = None

    def settle(self) -> bool:
        """Sweep (collect all, freeze the survivors) if none ran for
        `SWEEP_SECONDS`, then trim the heap. Returns whether it swept."""
        swept = False
        with self._sweeping:
            now = self._clock()
            if self._swept_at is None or now - self._swept_at >= SWEEP_SECONDS:
                gc.unfreeze()
                gc.collect()
                gc.freeze()
                self._swept_at, swept = self._clock(), True
        if _TRIM is not None:
            _TRIM(0)
        return swept


HEAP = Heap()
