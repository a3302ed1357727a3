"""Lent nodes that node health took out (pure): what their workload is told.

Health drains a sick node in Slurm (`slurmkube:health: <severity> <causes>`)
and taints it; a lent node's drain is the lease's own, so health writes its
reason over it and the node stays drained in Slurm when the lease ends. The
lending planner reads that reason back here:

- `drain` severity: the workload runs on (its pods already hold the node's
  GPUs, and evicting a gang for a fault that lets its jobs finish would cost
  every node's work); it is told which node and why, and the lease ends with
  the workload as always;
- `fatal` severity: the fault means the node's jobs cannot go on, as health
  requeues Slurm jobs there; the workload's check turns Retry, which Kueue
  answers by evicting the workload and requeueing it after
  `requeueAfterSeconds`, and its nodes go back at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from slurmkube.lending.model import NodeView, Sickness


def sick_among(names: Iterable[str], nodes: Mapping[str, NodeView]) -> dict[str, Sickness]:
    """The nodes of `names` that health has taken out, by name."""
    found = {}
    for name in sorted(names):
        view = nodes.get(name)
        if view is not None and view.sickness is not None:
            found[name] = view.sickness
    return found


def is_fatal(sick: Mapping[str, Sickness]) -> bool:
    return any(s.fatal for s in sick.values())


def describe(sick: Mapping[str, Sickness], *, lent: bool) -> str:
    """`lent node gb-02 turned sick (fatal condition SysLogsXIDError True)`."""
    what = "lent" if lent else "reserved"
    nodes = "; ".join(f"{name} ({s.cause})" for name, s in sick.items())
    plural = "s" if len(sick) > 1 else ""
    return f"{what} node{plural} turned sick: {nodes}"


def tell_ready(sick: Mapping[str, Sickness]) -> str:
    """The Ready message's note for a `drain`-severity fault."""
    names = ", ".join(sick)
    verb = "go" if len(sick) > 1 else "goes"
    return (
        f"{describe(sick, lent=True)}; the workload runs on, and {names} {verb} back to Slurm "
        "drained by node health when it ends"
    )


def tell_retry(sick: Mapping[str, Sickness]) -> str:
    """The Retry message for a `fatal` fault: Kueue evicts and requeues the workload."""
    return (
        f"{describe(sick, lent=True)}: a fatal fault, the workload is evicted and requeued; "
        "its nodes go back to Slurm, the sick ones drained by node health"
    )
