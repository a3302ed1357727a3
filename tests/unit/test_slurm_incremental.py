"""The last full answer of a Slurm list, read again only after slurmctld changed it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkube.slurm.incremental import FULL_READ_EVERY_SECONDS, LastList
from slurmkube.slurm.models import Node, NodeList


def listed(update_time: int, *names: str) -> NodeList:
    return NodeList(tuple(Node(n, frozenset({"IDLE"}), "IDLE") for n in names), update_time)


@dataclass
class Slurm:
    """slurmctld's node table as plain data: its list and its time of last change."""

    now: NodeList
    reads: list[int] = field(default_factory=list)
    probes: list[int] = field(default_factory=list)

    def read(self, since: int) -> NodeList:
        self.reads.append(since)
        return self.now

    def changed_since(self, since: int) -> bool:
        self.probes.append(since)
        return since < self.now.update_time


KEPT = listed(5, "a")
NEWER = listed(6, "a", "b")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@given(st.lists(st.none() | st.integers(min_value=1, max_value=10**10), max_size=20))
def test_the_list_given_is_the_last_full_answer(answers: list[int | None]) -> None:
    """Whatever slurmctld answers in turn ("no change" or a list of any time,
    even an earlier one after a restart), the list given is the last full answer."""
    kept = LastList[NodeList]()
    sequence = iter([1, *answers])
    for _ in range(len(answers) + 1):
        got = kept.current(lambda _: None if (t := next(sequence)) is None else listed(t))
    assert got.update_time == next((t for t in reversed(answers) if t is not None), 1)


def test_the_second_read_is_the_kept_list_while_nothing_changed() -> None:
    slurm, nodes = Slurm(KEPT), LastList[NodeList]()
    first = nodes.current(slurm.read, slurm.changed_since)
    again = nodes.current(slurm.read, slurm.changed_since)
    assert again is first
    assert slurm.reads == [0]
    assert slurm.probes == [5]


def test_a_change_is_read_in_full_once() -> None:
    slurm, nodes = Slurm(KEPT), LastList[NodeList]()
    nodes.current(slurm.read, slurm.changed_since)
    slurm.now = NEWER
    assert nodes.current(slurm.read, slurm.changed_since) is NEWER
    assert nodes.current(slurm.read, slurm.changed_since) is NEWER
    assert slurm.reads == [0, 5]
    assert slurm.probes == [5, 6]


def test_a_list_without_update_time_is_read_in_full_every_time() -> None:
    slurm, nodes = Slurm(listed(0, "a")), LastList[NodeList]()
    nodes.current(slurm.read, slurm.changed_since)
    nodes.current(slurm.read, slurm.changed_since)
    assert slurm.reads == [0, 0]
    assert slurm.probes == []


def test_without_a_cheaper_question_the_read_is_asked_with_the_kept_time() -> None:
    """Jobs: slurmctld answers the read itself with "no change"."""
    answers = iter([KEPT, None, NEWER])
    asked: list[int] = []

    def jobs(since: int) -> NodeList | None:
        asked.append(since)
        return next(answers)

    kept = LastList[NodeList]()
    assert kept.current(jobs) is KEPT
    assert kept.current(jobs) is KEPT
    assert kept.current(jobs) is NEWER
    assert asked == [0, 5, 5]


def test_a_first_read_without_an_answer_is_an_error() -> None:
    with pytest.raises(ValueError, match="update_time 0"):
        LastList[NodeList]().current(lambda _: None)


def test_a_full_read_made_elsewhere_is_kept() -> None:
    slurm, nodes = Slurm(KEPT), LastList[NodeList]()
    assert nodes.keep(KEPT) is KEPT
    assert nodes.current(slurm.read, slurm.changed_since) is KEPT
    assert slurm.reads == []


def test_a_kept_list_is_read_in_full_again_after_a_while() -> None:
    """The probe trusts slurmctld's clock; a slurmctld restarted on a host whose clock
    is behind would answer "no change" to an older list for as long as it lags."""
    clock, slurm = Clock(), Slurm(KEPT)
    nodes = LastList[NodeList](clock=clock)
    nodes.current(slurm.read, slurm.changed_since)
    clock.now += FULL_READ_EVERY_SECONDS - 1
    nodes.current(slurm.read, slurm.changed_since)
    clock.now += 1
    nodes.current(slurm.read, slurm.changed_since)
    assert slurm.reads == [0, 0]
    assert slurm.probes == [5]


def test_callers_waiting_for_a_full_read_take_it_instead_of_reading_again() -> None:
    slurm, nodes = Slurm(KEPT), LastList[NodeList]()
    nodes.keep(KEPT)
    slurm.now = NEWER
    reading, release = threading.Event(), threading.Event()

    def slow_read(since: int) -> NodeList:
        reading.set()
        release.wait(10)
        return slurm.read(since)

    results: list[NodeList] = []
    first = threading.Thread(
        target=lambda: results.append(nodes.current(slow_read, slurm.changed_since))
    )
    first.start()
    assert reading.wait(10)
    second = threading.Thread(
        target=lambda: results.append(nodes.current(slow_read, slurm.changed_since))
    )
    second.start()
    second.join(0.2)  # it probes, sees the change and waits for the read under way
    release.set()
    first.join(10)
    second.join(10)
    assert results == [NEWER, NEWER]
    assert slurm.reads == [5]
