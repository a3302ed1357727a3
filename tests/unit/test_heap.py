"""The heap after a reconcile: swept at most once an interval, survivors frozen,
and garbage among frozen objects found by the next sweep."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from slurmkube.controllers.heap import SWEEP_SECONDS, YOUNG_OBJECTS, Heap, tune_collector


class Cyclic:
    def __init__(self) -> None:
        self.me = self


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()


def test_a_sweep_freezes_what_survived_and_the_next_waits_its_interval() -> None:
    clock = Clock()
    heap = Heap(clock)
    assert heap.settle()
    assert gc.get_freeze_count() > 0
    clock.now += SWEEP_SECONDS - 1
    assert not heap.settle()
    clock.now += 1
    assert heap.settle()


def test_garbage_among_frozen_objects_is_collected_by_the_next_sweep() -> None:
    clock = Clock()
    heap = Heap(clock)
    kept = Cyclic()
    gone = weakref.ref(kept)
    heap.settle()
    del kept
    gc.collect()
    # Frozen: the collector's own runs do not walk it.
    assert gone() is not None
    clock.now += SWEEP_SECONDS
    heap.settle()
    assert gone() is None


def test_the_operator_collects_its_youngest_generation_less_often() -> None:
    before = gc.get_threshold()
    try:
        tune_collector()
        assert gc.get_threshold() == (YOUNG_OBJECTS, 10, 10)
    finally:
        gc.set_threshold(*before)
