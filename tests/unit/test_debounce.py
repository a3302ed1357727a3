"""A burst of fleet changes is rebuilt once quiet, or at the latest after 5 x the quiet time."""

from __future__ import annotations

import pytest

from slurmkube.topology.debounce import MAX_WAIT_FACTOR, Burst, extend, settled, settles_at

QUIET = 1.0


def burst_of(*times: float) -> Burst:
    burst = None
    for t in times:
        burst = extend(burst, t)
    assert burst is not None
    return burst


@pytest.mark.parametrize(
    ("events", "now", "ready"),
    [
        ((0.0,), 0.5, False),
        ((0.0,), 1.0, True),
        # Each event restarts the quiet time.
        ((0.0, 0.6, 1.2), 2.0, False),
        ((0.0, 0.6, 1.2), 2.2, True),
        # A fleet that never goes quiet is still followed.
        (tuple(i * 0.5 for i in range(11)), QUIET * MAX_WAIT_FACTOR, True),
        (tuple(i * 0.5 for i in range(9)), QUIET * MAX_WAIT_FACTOR - 0.1, False),
    ],
    ids=[
        "not-quiet-yet",
        "quiet",
        "restarted",
        "quiet-after-burst",
        "max-wait",
        "before-max-wait",
    ],
)
def test_a_burst_settles_when_quiet_or_after_the_max_wait(
    events: tuple[float, ...], now: float, ready: bool
) -> None:
    assert settled(burst_of(*events), now, QUIET) is ready


def test_zero_debounce_reconciles_at_the_next_tick() -> None:
    assert settled(burst_of(3.0), 3.0, 0.0)


def test_a_burst_settles_at_its_last_event_plus_the_quiet_time_or_the_max_wait() -> None:
    assert settles_at(burst_of(0.0, 0.6), QUIET) == 1.6
    never_quiet = burst_of(*(i * 0.5 for i in range(20)))
    assert settles_at(never_quiet, QUIET) == QUIET * MAX_WAIT_FACTOR
