"""A node's health over a window, from Slurm's accounting (`sacctmgr list event`).

slurmdbd keeps what Slurm's job and node lists do not: each time slurmctld
took a node out of service (DOWN, DRAIN, FAIL), with its start and, once the
node was back, its end. `slurmkube goodput --node-events` reads that list, so
the recompute counts drained and down GPUs as the live exporter does
(`goodput_observe.slurm_health`). While a node is lent to Kubernetes its
Slurm drain is the lend's, not an outage: the exporter takes a lent node's
health from Kubernetes, and the recompute takes it as healthy from the lend
(`LENT`) until Slurm has it back (`BACK`). Power saving's events (a state
with `~`, "Powered down") are not outages: the recompute takes the nodes as
present the whole window.

The list to read, in whole seconds:

    SLURM_TIME_FORMAT=%s sacctmgr -P -n list event Event=Node All_Time \
        Format=NodeName,TimeStart,TimeEnd,State,Reason
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from slurmkube.goodput.events import Health, NodeHealthChanged
from slurmkube.goodput.handovers import BACK, LENT, Handover, second

FORMAT = ("NodeName", "TimeStart", "TimeEnd", "State", "Reason")
SACCTMGR_ARGV = (
    "sacctmgr",
    "-P",
    "-n",
    "list",
    "event",
    "Event=Node",
    "All_Time",
    f"Format={','.join(FORMAT)}",
)
TIME_FORMAT = "%s"  # SLURM_TIME_FORMAT: epoch seconds, whatever the time zone
OPEN = frozenset({"", "Unknown", "None", "0"})  # an event not ended yet
# A state flag or base state that means slurmd is not serving (squeue(1)'s
# NODE STATE CODES; "*" marks a node not responding).
DOWN_STATES = frozenset({"DOWN", "FAIL", "FAILING", "NOT_RESPONDING", "NO_RESPOND", "UNKNOWN"})
SEVERITY = {Health.UP: 0, Health.DRAINED: 1, Health.DOWN: 2}


@dataclass(frozen=True, slots=True)
class Outage:
    """One node event: out of service from `start` until `end` (None: still out);
    `powered_down`: out of the fleet (power saving), not unhealthy."""

    node: str
    start: float
    end: float | None
    health: Health
    reason: str = ""
    powered_down: bool = False


def event_health(state: str) -> Health:
    """DOWN when slurmd was not serving, else DRAINED: slurmdbd records a node event
    only when slurmctld takes the node out of service."""
    flags = {f.strip("*$~#!%@^-") for f in state.upper().split("+")}
    if "*" in state or flags & DOWN_STATES:
        return Health.DOWN
    return Health.DRAINED


def powered_down(state: str) -> bool:
    """sinfo's `~` (POWERED_DOWN) or the flag itself: power saving, not an outage."""
    return "~" in state or "POWERED_DOWN" in state.upper()


def parse_events(text: str, source: str = "sacctmgr") -> list[Outage]:
    """`sacctmgr -P -n list event` lines in `FORMAT` (times as epoch seconds) as outages;
    a line that is not one raises ValueError naming the line and field. Lines of
    cluster events (no node name) are skipped."""
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) < len(FORMAT) - 1:
            raise ValueError(
                f"{source} line {number}: {len(fields)} fields, expected "
                f"{'|'.join(FORMAT)} (sacctmgr -P -n ... Format={','.join(FORMAT)})"
            )
        node, start, end, state = (f.strip() for f in fields[:4])
        reason = "|".join(fields[4:]).strip()  # a reason may hold the delimiter
        if not node:
            continue
        out.append(
            Outage(
                node,
                _epoch(start, source, number, "TimeStart"),
                None if end in OPEN else _epoch(end, source, number, "TimeEnd"),
                event_health(state),
                reason,
                powered_down(state),
            )
        )
    return out


def _epoch(text: str, source: str, number: int, field: str) -> float:
    if not text.isdigit():
        raise ValueError(
            f"{source} line {number}: {field} {text!r} is not epoch seconds "
            f"(run sacctmgr with SLURM_TIME_FORMAT={TIME_FORMAT})"
        )
    return float(text)


def lent_spans(handovers: Iterable[Handover]) -> dict[str, list[tuple[float, float | None]]]:
    """Per node, from each lend to Slurm having the node back (None: not yet)."""
    spans: defaultdict[str, list[tuple[float, float | None]]] = defaultdict(list)
    for h in sorted(handovers, key=lambda h: h.t):
        mine = spans[h.node]
        if h.kind == LENT and (not mine or mine[-1][1] is not None):
            mine.append((second(h.t), None))
        elif h.kind == BACK and mine and mine[-1][1] is None:
            mine[-1] = (mine[-1][0], second(h.t))
    return dict(spans)


def health_events(
    outages: Iterable[Outage],
    lent: Mapping[str, Sequence[tuple[float, float | None]]] | None = None,
    nodes: Iterable[str] | None = None,
) -> list[NodeHealthChanged]:
    """Each node's health changes (unsorted across nodes): its worst open outage, UP
    while it is lent. Only `nodes` (default: every node named) are kept."""
    by_node: defaultdict[str, list[Outage]] = defaultdict(list)
    for outage in outages:
        if not outage.powered_down:
            by_node[outage.node].append(outage)
    wanted = set(by_node) if nodes is None else set(nodes) & set(by_node)
    out: list[NodeHealthChanged] = []
    for node in sorted(wanted):
        out += _changes(node, by_node[node], (lent or {}).get(node, ()))
    return out


def _changes(
    node: str, outages: Sequence[Outage], lent: Sequence[tuple[float, float | None]]
) -> list[NodeHealthChanged]:
    moments = sorted(
        {o.start for o in outages}
        | {o.end for o in outages if o.end is not None}
        | {t for span in lent for t in span if t is not None}
    )
    out = []
    health = Health.UP
    for t in moments:
        now = _health_at(t, outages, lent)
        if now is not health:
            out.append(NodeHealthChanged(t, node, now))
            health = now
    return out


def _health_at(
    t: float, outages: Sequence[Outage], lent: Sequence[tuple[float, float | None]]
) -> Health:
    if any(start <= t and (end is None or t < end) for start, end in lent):
        return Health.UP
    open_ = [o.health for o in outages if o.start <= t and (o.end is None or t < o.end)]
    return max(open_, key=SEVERITY.__getitem__, default=Health.UP)
