"""The heap after a reconcile: swept at most once an interval, survivors frozen,
and garbage among frozen objects found by the next sweep."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from slurmkube.controllers import heap


class Cyclic:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def fresh_heap(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(heap, "_swept_at", None)
    yield
    gc.unfreeze()


def test_a_sweep_freezes_what_survived_and_the_next_waits_its_interval() -> None:
    assert heap.settle_heap(clock=lambda: 1000.0)
    assert gc.get_freeze_count() > 0
    assert not heap.settle_heap(clock=lambda: 1000.0 + heap.SWEEP_SECONDS - 1)
    assert heap.settle_heap(clock=lambda: 1000.0 + heap.SWEEP_SECONDS)


def test_garbage_among_frozen_objects_is_collected_by_the_next_sweep() -> None:
    kept = Cyclic()
    gone = weakref.ref(kept)
    heap.settle_heap(clock=lambda: 1000.0)
    del kept
    gc.collect()
    # Frozen: the collector's own runs do not walk it.
    assert gone() is not None
    heap.settle_heap(clock=lambda: 1000.0 + heap.SWEEP_SECONDS)
    assert gone() is None


def test_the_operator_collects_its_youngest_generation_less_often() -> None:
    before = gc.get_threshold()
    try:
        heap.tune_collector()
        assert gc.get_threshold() == (heap.YOUNG_OBJECTS, 10, 10)
    finally:
        gc.set_threshold(*before)
