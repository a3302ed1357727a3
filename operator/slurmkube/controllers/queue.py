"""A rate-limited work queue of keys, in the spirit of controller-runtime's.

Events add keys; workers reconcile due keys. The queue holds every "when
next" a controller needs: a key added for now, after a delay (a reconcile's
`requeue_after`), debounced (a burst of events reconciled once it is quiet,
`topology/debounce.py`), or backed off after a failure. Its guarantees:

- a key is never reconciled by two workers at once; a key added while it is
  being reconciled runs again right after (the reconcile may have read the
  world before the change);
- a reconcile that raises is retried after `base_delay * 2**failures`, capped
  at `max_delay`; a success resets that;
- only while `leading()` is true are keys reconciled; a standby keeps its keys
  due and takes them up the moment it leads.

`add` may be called from any thread (kopf runs sync handlers in threads).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from slurmkube.topology.debounce import Burst, extend, settles_at

log = logging.getLogger(__name__)
K = TypeVar("K", bound=Hashable)
Key = tuple[str, str]  # an object's (namespace, name): most queues' keys

STANDBY_LOOK_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Result:
    """What a reconcile asks of the queue: come back after this many seconds
    (None: only when an event adds the key again)."""

    requeue_after: float | None = None


class WorkQueue(Generic[K]):
    def __init__(
        self,
        reconcile: Callable[[K], Awaitable[Result]],
        *,
        name: str,
        workers: int = 1,
        base_delay: float = 0.5,
        max_delay: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reconcile = reconcile
        self.name = name
        self._workers = workers
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._clock = clock
        self._guard = threading.Lock()
        # When each key is next due: the earliest of its timer and its burst.
        self._timer: dict[K, float] = {}
        self._bursts: dict[K, tuple[Burst, float]] = {}
        self._failures: dict[K, int] = {}
        self._running: set[K] = set()
        self._again: set[K] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None

    # --- adding (any thread) -------------------------------------------------------------

    def add(self, key: K, after: float = 0.0) -> None:
        """Reconcile `key` after `after` seconds, or earlier if it is due earlier."""
        with self._guard:
            at = self._clock() + max(after, 0.0)
            self._timer[key] = min(at, self._timer.get(key, at))
            self._note_running_add(key, after)
        self._wake()

    def add_debounced(self, key: K, quiet: float) -> None:
        """Reconcile `key` once its events have been quiet `quiet` seconds (or
        `MAX_WAIT_FACTOR` times that after the first event of the burst)."""
        with self._guard:
            burst, _ = self._bursts.get(key, (None, quiet))
            self._bursts[key] = (extend(burst, self._clock()), quiet)
            self._note_running_add(key, quiet)
        self._wake()

    def forget(self, key: K) -> None:
        """The key's object is gone: drop its schedule, burst and backoff."""
        with self._guard:
            self._timer.pop(key, None)
            self._bursts.pop(key, None)
            self._failures.pop(key, None)
            self._again.discard(key)

    def pending(self) -> int:
        with self._guard:
            return len(self._timer.keys() | self._bursts.keys())

    def due_at(self, key: K) -> float | None:
        with self._guard:
            return self._due_at(key)

    def _note_running_add(self, key: K, after: float) -> None:
        if key in self._running and after <= 0:
            self._again.add(key)

    def _due_at(self, key: K) -> float | None:
        times = [self._timer[key]] if key in self._timer else []
        if key in self._bursts:
            burst, quiet = self._bursts[key]
            times.append(settles_at(burst, quiet))
        return min(times) if times else None

    def _wake(self) -> None:
        loop, changed = self._loop, self._changed
        if loop is None or changed is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            changed.set()
        else:
            loop.call_soon_threadsafe(changed.set)

    # --- running (the event loop) --------------------------------------------------------

    def _take(self, now: float) -> tuple[K | None, float | None]:
        """The first due key not being reconciled (removed from the schedule), and
        when the next one is due."""
        with self._guard:
            soonest: float | None = None
            for key in list(self._timer.keys() | self._bursts.keys()):
                if key in self._running:
                    continue
                at = self._due_at(key)
                if at is None:
                    continue
                if at <= now:
                    self._timer.pop(key, None)
                    self._bursts.pop(key, None)
                    self._running.add(key)
                    return key, None
                soonest = at if soonest is None else min(soonest, at)
            return None, soonest

    def _finish(self, key: K, after: float | None) -> None:
        with self._guard:
            self._running.discard(key)
            if key in self._again:
                self._again.discard(key)
                after = 0.0
            if after is not None:
                at = self._clock() + after
                self._timer[key] = min(at, self._timer.get(key, at))

    async def _process(self, key: K) -> None:
        try:
            result = await self._reconcile(key)
        except Exception:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
            delay = min(self._base_delay * 2**failures, self._max_delay)
            log.exception(
                "reconcile failed queue=%s key=%s failures=%d retry_in=%.1f",
                self.name,
                key,
                failures + 1,
                delay,
            )
            self._finish(key, delay)
            return
        self._failures.pop(key, None)
        self._finish(key, result.requeue_after)

    async def _worker(self, leading: Callable[[], bool]) -> None:
        assert self._changed is not None
        while True:
            if not leading():
                await asyncio.sleep(STANDBY_LOOK_SECONDS)
                continue
            # Cleared before the schedule is read: an add from here on wakes the wait.
            self._changed.clear()
            key, soonest = self._take(self._clock())
            if key is None:
                timeout = None if soonest is None else max(soonest - self._clock(), 0.0)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout=timeout)
                continue
            # Another worker may have a key due too.
            self._changed.set()
            await self._process(key)

    async def run(self, leading: Callable[[], bool]) -> None:
        """Reconcile due keys until cancelled, only while `leading()`."""
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self._changed.set()
        workers = [asyncio.create_task(self._worker(leading)) for _ in range(self._workers)]
        try:
            await asyncio.gather(*workers)
        finally:
            for task in workers:
                task.cancel()
