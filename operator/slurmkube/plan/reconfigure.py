"""When a new rendered config is in force in slurmctld, and when to reconfigure it ourselves (pure).

slurmctld reads its files from a ConfigMap volume. Its pod's config reloader
(build/reloader.py) runs `scontrol reconfigure` as soon as the kubelet has
copied a new ConfigMap into the volume, and the operator makes that copy
prompt by annotating the pod. The operator then looks for evidence in Slurm
that the change took: slurmctld re-read its files after the ConfigMap was
written (`Configuration data as of`), and every block and switch of the
rendered topology file is in force: topology.conf against `scontrol show
topology`, topology.yaml (25.05+) per named topology against `scontrol show
topoconf`.

Only if that evidence is still missing a propagation window after the write
does the operator issue a reconfigure itself: a reloader that could not run
it, or a kubelet that synced late. A reconfigure issued before the files
arrive re-reads the old ones, so that one waits out the window.

The window starts when the wanted hash last changed, not when a hash was first
seen: a fleet that goes A -> B -> A (a node relabelled and back) writes A again
while the pod still holds B, and must wait again before reconfiguring to A.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from slurmkube.api.slurm_version import SlurmVersion


@dataclass(frozen=True, slots=True)
class ConfigClock:
    """The config hash the ConfigMap holds, and since when.

    `since` is monotonic seconds (for the window); `written_at` the wall clock,
    which is what Slurm's `Configuration data as of` can be compared with.
    """

    hash: str
    since: float
    written_at: datetime


def advance(clock: ConfigClock | None, wanted: str, now: float, wall: datetime) -> ConfigClock:
    """The clock after writing `wanted` to the ConfigMap at `now` (`wall`)."""
    if clock is not None and clock.hash == wanted:
        return clock
    return ConfigClock(wanted, now, wall)


# While a change is pending, Slurm is asked this often whether it took.
CONFIRM_EVERY_SECONDS = 1.0


def next_look(clock: ConfigClock | None, now: float, window: float) -> float:
    """Seconds until a pending config is looked at again (0 when due)."""
    if clock is None:
        return 0.0
    return min(CONFIRM_EVERY_SECONDS, seconds_left(clock, now, window))


def seconds_left(clock: ConfigClock, now: float, window: float) -> float:
    """Seconds until the pod surely holds the files (0: reconfigure now)."""
    return max(0.0, window - (now - clock.since))


class TopologyRecord(Protocol):
    """A block or switch as parsed from topology.conf or `scontrol show topology`."""

    @property
    def nodes(self) -> Set[str]: ...

    @property
    def switches(self) -> Set[str]: ...


def topology_shown(
    rendered: Mapping[str, TopologyRecord], shown: Mapping[str, TopologyRecord]
) -> bool:
    """Does Slurm show every rendered block and switch with the same members?

    Nodes are compared where the rendered record lists nodes (blocks, leaf
    switches), switches where it lists switches: `scontrol show topology`
    also prints the nodes below an upper switch, and for topology/block the
    aggregated blocks of BlockSizes, which topology.conf does not name.
    """
    for name, want in rendered.items():
        got = shown.get(name)
        if got is None:
            return False
        if want.nodes and set(got.nodes) != set(want.nodes):
            return False
        if want.switches and set(got.switches) != set(want.switches):
            return False
    return True


def topologies_shown(
    rendered: Mapping[str, Mapping[str, TopologyRecord]],
    shown: Mapping[str, Mapping[str, TopologyRecord]],
) -> bool:
    """topology.yaml (25.05+): is every rendered topology in force, each showing
    every block and switch rendered for it (`topology_shown`)?"""
    return all(
        name in shown and topology_shown(records, shown[name]) for name, records in rendered.items()
    )


def loaded_since(clock: ConfigClock, loaded_at: datetime) -> bool:
    """Did slurmctld re-read its files after the ConfigMap got this hash?

    `Configuration data as of` has whole seconds, so a load in the second of the
    write does not count: it may be another reconfigure that read the old files
    (the operator-kill e2e saw Ready with the previous partition MaxTime). Such a
    change is confirmed by the next load, or the backstop reconfigure.
    """
    return loaded_at >= clock.written_at.replace(microsecond=0) + timedelta(seconds=1)


def asks_scontrol(client: SlurmVersion | None, slurmctld: str) -> bool:
    """Is the operator's scontrol (`client`, its release) of the release slurmctld
    runs (`slurmctld`, the one the config is rendered for: `Plan.slurm_version`)?"""
    return client is not None and str(client) == slurmctld
