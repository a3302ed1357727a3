"""Nodes changing hands between Slurm and Kubernetes, as the operator made them.

Three moments, each recorded by the operator as an Event on the node's
SlurmCluster with its time to the microsecond: the bridge set the node's lease
label (`LENT`, to a Workload), removed it (`LEASE_ENDED`), and the cluster
reconcile undrained the node once its slurmd was back (`BACK`). With the
Workload's own times (admitted, finished) they give a lend's transfers
(docs/goodput.md, "Waste"):

    LENT ........ admitted ......... finished ....... LEASE_ENDED ....... BACK
    on its way to Kubernetes | Kubernetes' | on its way (idle) ... back to Slurm | Slurm's

The live exporter times a node's transfer by these moments rather than by its
tick (`transfer_times`); `slurmkube goodput` recomputes them from the Events
(`handover_events`). Both take them in whole seconds, rounded down, as Slurm
and Kueue report their own times: a change seen later then never has an
earlier time than one seen before it, which the exporter's "never back in
time" would otherwise move (goodput/live.py).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from slurmkube.goodput.events import Event, NodeTransferBegan, NodeTransferEnded, Side

LENT = "Lent"
LEASE_ENDED = "LeaseEnded"
BACK = "BackInSlurm"
KINDS = (LENT, LEASE_ENDED, BACK)


@dataclass(frozen=True, slots=True)
class Handover:
    t: float
    node: str
    kind: str  # one of KINDS
    lease: str = ""  # the Workload's uid (LENT)


@dataclass(frozen=True, slots=True)
class LeaseTimes:
    """A lending Workload's own times: when it was admitted and when it finished."""

    admitted: float | None = None
    finished: float | None = None


def transfer_times(
    stamps: Mapping[str, Handover], owner: Side, moving_to: Side | None, lease: LeaseTimes
) -> tuple[float | None, float | None]:
    """(began, ended) of the transfer a node in this state is in or came out of, when
    the operator saw it happen; None where only the exporter's tick can tell.
    `stamps`: the node's latest handover of each kind; `lease`: its Workload's times.
    A lend's way back begins when its Workload finishes (the node sits lent and idle
    until the lease ends), else when the lease ends."""
    last = latest(stamps)
    lent, ended_at = _at(stamps, LENT), _at(stamps, LEASE_ENDED)
    began = ended = None
    if moving_to is Side.KUBERNETES:
        began = lease.finished if lease.finished is not None else lent
    elif owner is Side.KUBERNETES:
        began, ended = lent, lease.admitted
        if began is not None and ended is not None:
            ended = max(began, ended)  # a node added to a lease already admitted
    elif moving_to is Side.SLURM:
        began = lease.finished if lease.finished is not None else ended_at
    elif last is not None and last.kind == BACK:
        began = lease.finished if lease.finished is not None else ended_at
        ended = second(last.t)
    return began, ended


def latest(stamps: Mapping[str, Handover]) -> Handover | None:
    """The newest of a node's handovers (kept as the latest of each kind)."""
    return max(stamps.values(), key=lambda h: h.t, default=None)


def _at(stamps: Mapping[str, Handover], kind: str) -> float | None:
    found = stamps.get(kind)
    return second(found.t) if found is not None else None


def second(t: float) -> float:
    return float(math.floor(t))


def lent_nodes(handovers: Iterable[Handover]) -> dict[str, list[str]]:
    """Each lease's nodes, in name order."""
    out: defaultdict[str, set[str]] = defaultdict(set)
    for h in handovers:
        if h.kind == LENT:
            out[h.lease].add(h.node)
    return {lease: sorted(nodes) for lease, nodes in out.items()}


def handover_events(handovers: Sequence[Handover], leases: Mapping[str, LeaseTimes]) -> list[Event]:
    """The ledger's transfer events of the recorded handovers (unsorted): a node lent is
    on its way to Kubernetes until its Workload is admitted, Kubernetes' until it
    finishes, on its way again (lent, idle) until the lease ends, and on its way back
    until Slurm has it again."""
    out: list[Event] = []
    for h in handovers:
        t = second(h.t)
        if h.kind == LENT:
            out.append(NodeTransferBegan(t, h.node, Side.KUBERNETES))
            lease = leases.get(h.lease, LeaseTimes())
            if lease.admitted is not None:
                admitted = max(lease.admitted, t)
                out.append(NodeTransferEnded(admitted, h.node, Side.KUBERNETES))
                if lease.finished is not None:
                    finished = max(lease.finished, admitted)
                    out.append(NodeTransferBegan(finished, h.node, Side.KUBERNETES))
        elif h.kind == LEASE_ENDED:
            out.append(NodeTransferBegan(t, h.node, Side.SLURM))
        elif h.kind == BACK:
            out.append(NodeTransferEnded(t, h.node, Side.SLURM))
    return out
