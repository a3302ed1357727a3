"""Hand the heap's free pages back to the system after a reconcile.

A reconcile at 25,000 nodes makes and drops tens of MB (the config, slurmrestd's
node list). glibc keeps what is freed in its arenas, one per thread that
allocated, and returns to the system only what lies at a heap's top, so the
operator's RSS stays at its highest reconcile's. `malloc_trim(0)` releases the
free pages inside every arena too (malloc_trim(3), glibc 2.8+). Elsewhere (no
glibc) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

__all__ = ["release_free_heap"]


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


def release_free_heap() -> None:
    if _TRIM is not None:
        _TRIM(0)
