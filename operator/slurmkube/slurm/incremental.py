"""The last full answer of a Slurm list, read again only after slurmctld changed it.

slurmctld stamps its node and job tables with the time of their last change
(`last_node_update`, `last_job_update`) and each list it sends with the time it
made it; asked with that `update_time`, it answers SLURM_NO_CHANGE_IN_DATA
instead of the list when nothing changed since the second before
(src/slurmctld/proc_req.c). A list of 25,000 nodes takes slurmrestd ~16 s,
the "no change" answer milliseconds; so a reconcile, a bridge round and the
autoscale poll keep the last list and its time, ask with that time, and read
in full only after a change. One full read at a time per list: callers that
waited for it take its answer after a cheap check, instead of each reading
the whole fleet again (and holding its decoded copy) at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from slurmkube.slurm.models import JobList, NodeList

__all__ = ["FULL_READ_EVERY_SECONDS", "LastList", "SlurmLists", "Stamped", "UnchangedSince"]


class Stamped(Protocol):
    """A full answer of a Slurm list and when slurmctld made it (epoch seconds; 0
    when the answer gave none: then it cannot be asked again with `update_time`
    and every read is full)."""

    @property
    def update_time(self) -> int: ...


L = TypeVar("L", bound=Stamped)

# A kept list is read in full again after this long whatever the probe says: the
# probe trusts slurmctld's clock, and a slurmctld restarted on a host whose clock
# is behind may stamp its tables earlier than the kept list.
FULL_READ_EVERY_SECONDS = 600.0


# Asked with the kept list's update_time (0: nothing kept): a full answer, or
# None when slurmctld says nothing changed since then.
UnchangedSince = Callable[[int], L | None]


class LastList(Generic[L]):
    """One Slurm list's last full answer, shared by the threads of one cluster."""

    def __init__(
        self,
        full_read_every: float = FULL_READ_EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kept: L | None = None
        self._kept_at = 0.0
        self._full_read_every = full_read_every
        self._clock = clock
        # Held for a full read, so only one runs at a time.
        self._reading = threading.Lock()

    @property
    def kept(self) -> L | None:
        return self._kept

    def keep(self, answer: L) -> L:
        """A full answer, here or read outside `current` (`RestClient.node_list`):
        the latest answer is kept."""
        self._kept, self._kept_at = answer, self._clock()
        return answer

    def current(
        self, ask: UnchangedSince[L], changed_since: Callable[[int], bool] | None = None
    ) -> L:
        """The list as slurmctld has it now. `ask(t)` reads it (None: unchanged since
        t). `changed_since(t)`, where Slurm has a cheaper question than the read
        itself (nodes: a 304 to an empty GET), is asked first, outside the read's lock."""
        seen = self._fresh()
        if seen is not None and _unchanged(seen, changed_since):
            return seen
        with self._reading:
            kept = self._fresh()
            if kept is not seen and kept is not None and _unchanged(kept, changed_since):
                return kept  # another caller read it while this one waited
            answer = ask(kept.update_time if kept is not None else 0)
            if answer is not None:
                return self.keep(answer)
            if kept is None:
                raise ValueError("a Slurm list asked with update_time 0 gave no answer")
            return kept

    def _fresh(self) -> L | None:
        """The kept list, unless it is due for a full read."""
        if self._clock() - self._kept_at >= self._full_read_every:
            return None
        return self._kept


def _unchanged(listed: L, changed_since: Callable[[int], bool] | None) -> bool:
    return (
        bool(listed.update_time)
        and changed_since is not None
        and not changed_since(listed.update_time)
    )


class SlurmLists:
    """The node and job lists one cluster's clients keep: they outlive a client made
    again (a new URL or key, the 10-minute refresh), since the times in them are
    slurmctld's, not the client's; a restarted slurmctld stamps its tables anew,
    so its first answer is a change."""

    def __init__(
        self,
        full_read_every: float = FULL_READ_EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.nodes: LastList[NodeList] = LastList(full_read_every, clock)
        self.jobs: LastList[JobList] = LastList(full_read_every, clock)
