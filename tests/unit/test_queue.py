"""The work queue: one reconcile per key at a time, debounced adds, backoff, requeue."""

from __future__ import annotations

import asyncio

import pytest

from slurmkube.controllers.queue import Result, WorkQueue


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def _nothing(_: str) -> Result:
    return Result()


def _queue(clock: Clock) -> WorkQueue[str]:
    return WorkQueue(_nothing, name="test", clock=clock)


@pytest.mark.parametrize(
    ("adds", "due"),
    [
        ({"now": 0.0}, 100.0),
        ({"later": 5.0}, 105.0),
        ({"later": 5.0, "sooner": 1.0}, 101.0),
        ({"sooner": 1.0, "later": 5.0}, 101.0),
    ],
)
def test_the_earliest_add_wins(adds: dict[str, float], due: float) -> None:
    clock = Clock()
    queue = _queue(clock)
    for after in adds.values():
        queue.add("k", after)
    assert queue.due_at("k") == due


def test_a_burst_is_due_once_quiet_or_five_quiets_after_its_first_event() -> None:
    clock = Clock()
    queue = _queue(clock)
    queue.add_debounced("k", 1.0)
    assert queue.due_at("k") == 101.0
    clock.now = 100.8
    queue.add_debounced("k", 1.0)
    assert queue.due_at("k") == pytest.approx(101.8)
    for _ in range(10):  # a fleet that never stops changing
        clock.now += 0.9
        queue.add_debounced("k", 1.0)
    assert queue.due_at("k") == 105.0


def test_forget_drops_every_schedule() -> None:
    clock = Clock()
    queue = _queue(clock)
    queue.add("k", 3.0)
    queue.add_debounced("k", 1.0)
    queue.forget("k")
    assert queue.due_at("k") is None
    assert queue.pending() == 0


async def _run_until(queue: WorkQueue[str], done: asyncio.Event, leading: bool = True) -> None:
    task = asyncio.create_task(queue.run(lambda: leading))
    try:
        await asyncio.wait_for(done.wait(), timeout=10)
    finally:
        task.cancel()


def test_a_key_is_never_reconciled_twice_at_once_and_an_add_meanwhile_runs_it_again() -> None:
    runs: list[str] = []
    active = 0
    most = 0
    done = asyncio.Event()

    async def reconcile(key: str) -> Result:
        nonlocal active, most
        active += 1
        most = max(most, active)
        runs.append(key)
        if len(runs) == 1:
            queue.add("k")  # an event while the first reconcile reads the world
            queue.add("k")
        await asyncio.sleep(0.01)
        active -= 1
        if len(runs) == 2:
            done.set()
        return Result()

    queue: WorkQueue[str] = WorkQueue(reconcile, name="test", workers=3)

    async def main() -> None:
        queue.add("k")
        await _run_until(queue, done)

    asyncio.run(main())
    assert runs == ["k", "k"]
    assert most == 1


def test_a_failing_reconcile_is_retried_with_a_growing_delay() -> None:
    clock = Clock()
    seen: list[float] = []
    succeeded: list[float] = []
    done = asyncio.Event()

    async def reconcile(_: str) -> Result:
        seen.append(queue.due_at("k") or 0.0)
        if len(seen) < 3:
            raise RuntimeError("slurmrestd down")
        succeeded.append(clock.now)
        done.set()
        return Result(requeue_after=30.0)

    queue: WorkQueue[str] = WorkQueue(reconcile, name="test", base_delay=0.02, clock=clock)

    async def main() -> None:
        queue.add("k")
        task = asyncio.create_task(queue.run(lambda: True))
        delays = []
        while not done.is_set():
            await asyncio.sleep(0.005)
            due = queue.due_at("k")
            if due is not None and due > clock.now:
                delays.append(due - clock.now)
                clock.now = due  # time passes until the retry
        task.cancel()
        assert delays[:2] == pytest.approx([0.02, 0.04])
        # Success: requeue_after, and the backoff starts over.
        assert queue.due_at("k") == succeeded[0] + 30.0

    asyncio.run(main())


def test_a_standby_reconciles_nothing() -> None:
    runs: list[str] = []

    async def reconcile(key: str) -> Result:
        runs.append(key)
        return Result()

    queue: WorkQueue[str] = WorkQueue(reconcile, name="test")

    async def main() -> None:
        queue.add("k")
        task = asyncio.create_task(queue.run(lambda: False))
        await asyncio.sleep(0.05)
        task.cancel()

    asyncio.run(main())
    assert runs == []
    assert queue.pending() == 1
