"""A world the live translator can observe, built from a ledger event stream.

`ObservedWorld` plays events into the states a live exporter would read
(Slurm's job list with submit/start/end times, nodes with owner and health)
and takes snapshots of them, so a recorded simulator run can be fed through
`slurmkube.goodput.live` and compared with the simulator's own ledger.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import ClassVar

from slurmkube.goodput import (
    Event,
    GoodputLedger,
    Health,
    JobEnded,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    NodeAdded,
    NodeHealthChanged,
    NodeRemoved,
    NodeTransferBegan,
    NodeTransferEnded,
    Side,
)
from slurmkube.goodput.live import LiveGang, LiveNode, LiveSnapshot


class RecordingLedger(GoodputLedger):
    """A ledger that keeps every event it was fed (the simulator's recorded stream)."""

    recorded: ClassVar[list[list[Event]]] = []

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.events: list[Event] = []
        RecordingLedger.recorded.append(self.events)

    def observe(self, event: Event) -> None:
        self.events.append(event)
        super().observe(event)


@dataclass
class ObservedWorld:
    """Nodes and gangs as observed; ended gangs stay listed for `keep_ended` snapshots
    (Slurm's MinJobAge), then leave the list."""

    keep_ended: int = 3

    def __post_init__(self) -> None:
        self.nodes: dict[str, LiveNode] = {}
        self.gangs: dict[str, LiveGang] = {}
        self.ended_for: dict[str, int] = {}

    def play(self, event: Event) -> None:
        match event:
            case NodeAdded():
                self.nodes[event.node] = LiveNode(
                    event.node,
                    event.gpus,
                    owner=event.owner,
                    pool=event.pool,
                    transferable=event.transferable,
                )
            case NodeRemoved():
                del self.nodes[event.node]
            case NodeHealthChanged():
                self._node(event.node, health=event.health)
            case NodeTransferBegan():
                self._node(event.node, moving_to=event.to)
            case NodeTransferEnded():
                self._node(event.node, owner=event.owner, moving_to=None)
            case JobSubmitted():
                self.gangs[event.job] = LiveGang(
                    event.job,
                    event.team,
                    event.side,
                    event.members,
                    event.gpus_per_member,
                    event.t,
                    pool=event.pool,
                )
            case JobStarted():
                gang = self.gangs[event.job]
                started = gang.started if gang.started is not None else event.t
                self.gangs[event.job] = replace(
                    gang, started=started, nodes=gang.nodes + event.nodes
                )
            case JobPreempted():
                self.gangs[event.job] = replace(self.gangs[event.job], started=None, nodes=())
            case JobEnded():
                self.gangs[event.job] = replace(self.gangs[event.job], ended=event.t)
                self.ended_for[event.job] = self.keep_ended

    def _node(self, name: str, **changes: object) -> None:
        self.nodes[name] = replace(self.nodes[name], **changes)  # type: ignore[arg-type]

    def snapshot(self, t: float) -> LiveSnapshot:
        shot = LiveSnapshot(t, tuple(self.nodes.values()), tuple(self.gangs.values()))
        for job in list(self.ended_for):
            self.ended_for[job] -= 1
            if self.ended_for[job] < 0:
                del self.ended_for[job], self.gangs[job]
        return shot


def snapshots(
    events: Iterable[Event], world: ObservedWorld | None = None
) -> Iterator[LiveSnapshot]:
    """One snapshot after all events of each instant."""
    world = world or ObservedWorld()
    pending_t: float | None = None
    for event in events:
        if pending_t is not None and event.t != pending_t:
            yield world.snapshot(pending_t)
        world.play(event)
        pending_t = event.t
    if pending_t is not None:
        yield world.snapshot(pending_t)


def node(name: str, gpus: int = 8, **changes: object) -> LiveNode:
    return replace(LiveNode(name, gpus), **changes)  # type: ignore[arg-type]


def gang(key: str, submitted: float, members: int = 1, per: int = 8, **changes: object) -> LiveGang:
    base = LiveGang(key, "team-a", Side.SLURM, members, per, submitted)
    return replace(base, **changes)  # type: ignore[arg-type]


DOWN = Health.DOWN
