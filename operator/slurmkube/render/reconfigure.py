"""When to run `scontrol reconfigure` after the rendered config changed (pure).

slurmctld reads its files from a ConfigMap volume, and the kubelet copies a
changed ConfigMap into the pod only on its next sync (about a minute;
configMapAndSecretChangeDetectionStrategy). A reconfigure issued earlier
re-reads the old files and the change is lost, so it waits a window after the
ConfigMap was *written* with the new content.

The window starts when the wanted hash last changed, not when a hash was first
seen: a fleet that goes A -> B -> A (a node relabelled and back) writes A again
while the pod still holds B, and must wait again before reconfiguring to A.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConfigClock:
    """The config hash the ConfigMap holds, and since when (monotonic seconds)."""

    hash: str
    since: float


def advance(clock: ConfigClock | None, wanted: str, now: float) -> ConfigClock:
    """The clock after writing `wanted` to the ConfigMap at `now`."""
    if clock is not None and clock.hash == wanted:
        return clock
    return ConfigClock(wanted, now)


def seconds_left(clock: ConfigClock, now: float, window: float) -> float:
    """Seconds until the pod surely holds the files (0: reconfigure now)."""
    return max(0.0, window - (now - clock.since))
