"""When the operator may run `scontrol reconfigure`: a window after each ConfigMap change."""

from __future__ import annotations

import pytest

from slurmkube.render.reconfigure import ConfigClock, advance, seconds_left

WINDOW = 12.0


def clock_after(writes: list[tuple[float, str]]) -> ConfigClock:
    clock = None
    for now, wanted in writes:
        clock = advance(clock, wanted, now)
    assert clock is not None
    return clock


@pytest.mark.parametrize(
    ("writes", "now", "left"),
    [
        # First write: the whole window.
        ([(0.0, "A")], 0.0, WINDOW),
        # Rewriting the same content does not restart the clock.
        ([(0.0, "A"), (5.0, "A"), (10.0, "A")], 12.0, 0.0),
        # A new hash restarts it.
        ([(0.0, "A"), (10.0, "B")], 12.0, 10.0),
        # Back to a hash seen before: the pod may still hold B's files, so wait again.
        ([(0.0, "A"), (20.0, "B"), (40.0, "A")], 41.0, 11.0),
    ],
    ids=["first-write", "same-content", "new-hash", "back-to-an-old-hash"],
)
def test_reconfigure_waits_a_window_after_every_configmap_change(
    writes: list[tuple[float, str]], now: float, left: float
) -> None:
    assert seconds_left(clock_after(writes), now, WINDOW) == left
