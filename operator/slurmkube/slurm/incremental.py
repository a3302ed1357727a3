"""The last full answer of a Slurm list, read again only after slurmctld changed it.

slurmctld stamps its node and job tables with the time of their last change
(`last_node_update`, `last_job_update`) and, asked with an `update_time` no
older than that, answers SLURM_NO_CHANGE_IN_DATA instead of the list
(src/slurmctld/proc_req.c). A list of 25,000 nodes takes slurmrestd ~16 s,
the "no change" answer milliseconds; so a reconcile, a bridge round and the
autoscale poll keep the last list and its time, ask with that time, and read
in full only after a change. One full read at a time per list: callers that
waited for it take its answer after a cheap check, instead of each reading
the whole fleet again (and holding its decoded copy) at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from slurmkube.slurm.models import JobList, NodeList

__all__ = ["LastList", "SlurmLists", "Stamped", "UnchangedSince", "kept_after"]


class Stamped(Protocol):
    """A full answer of a Slurm list: slurmctld's time of its last change to it
    (epoch seconds; 0 when the answer gave none: then it cannot be asked again
    with `update_time` and every read is full)."""

    @property
    def update_time(self) -> int: ...


L = TypeVar("L", bound=Stamped)


# Asked with the kept list's update_time (0: nothing kept): a full answer, or
# None when slurmctld says nothing changed since then.
UnchangedSince = Callable[[int], L | None]


def kept_after(kept: L | None, answer: L | None) -> L | None:
    """What is kept once `answer` came: "no change" (None) keeps the list, and an
    answer older than the kept list (two readers finishing out of order) never
    replaces it, so the kept update_time never goes back."""
    if answer is None:
        return kept
    if kept is not None and answer.update_time < kept.update_time:
        return kept
    return answer


class LastList(Generic[L]):
    """One Slurm list's last full answer, shared by the threads of one cluster."""

    def __init__(self) -> None:
        self._kept: L | None = None
        # Held for a full read, so only one runs at a time.
        self._reading = threading.Lock()

    @property
    def kept(self) -> L | None:
        return self._kept

    def keep(self, answer: L) -> L:
        """A full answer read outside `current` (`RestClient.node_list`)."""
        self._kept = kept_after(self._kept, answer)
        return answer

    def current(
        self, ask: UnchangedSince[L], changed_since: Callable[[int], bool] | None = None
    ) -> L:
        """The list as slurmctld has it now. `ask(t)` reads it (None: unchanged since
        t). `changed_since(t)`, where Slurm has a cheaper question than the read
        itself (nodes: a 304 to an empty GET), is asked first, outside the read's lock."""
        seen = self._kept
        if seen is not None and _unchanged(seen, changed_since):
            return seen
        with self._reading:
            kept = self._kept
            if kept is not seen and kept is not None and _unchanged(kept, changed_since):
                return kept  # another caller read it while this one waited
            since = kept.update_time if kept is not None else 0
            now = kept_after(kept, ask(since))
            if now is None:
                raise ValueError("a Slurm list asked with update_time 0 gave no answer")
            self._kept = now
            return now


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

    def __init__(self) -> None:
        self.nodes: LastList[NodeList] = LastList()
        self.jobs: LastList[JobList] = LastList()
