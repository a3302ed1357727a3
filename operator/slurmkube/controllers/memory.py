"""What the operator remembers between reconciles, and the one leader check.

Every controller (the SlurmCluster reconciler, the Kueue bridge, node health,
allocation policy, key rotation, live goodput) reads the same `State`: the
settings and Slurm clients the entry point installs, the Kubernetes client and
the operator's Lease made at kopf's startup, and one record per SlurmCluster.
It lives apart from the kopf handlers (`controllers/handlers.py`) so that
reading it does not mean importing the SlurmCluster wiring.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from slurmkube.api.models import TopologySpec
from slurmkube.controllers.clients import SlurmClients
from slurmkube.controllers.queue import Key
from slurmkube.controllers.settings import Settings
from slurmkube.kube.client import Kube
from slurmkube.kube.lease import LeaderLease
from slurmkube.plan.holds import InForce
from slurmkube.plan.reconfigure import ConfigClock
from slurmkube.plan.slurm_poll import NodeReads
from slurmkube.topology.fleet import relabelled

if TYPE_CHECKING:
    from slurmkube.controllers.observe import Snapshot

DEFAULT_DEBOUNCE_SECONDS = TopologySpec.model_fields["debounce_seconds"].default


@dataclass
class ClusterMemory:
    """What the controller remembers of one SlurmCluster between reconciles."""

    debounce: float = DEFAULT_DEBOUNCE_SECONDS
    # The Node label keys its config reads; None until its first reconcile (all count).
    label_keys: frozenset[str] | None = None
    autoscaling: bool = False
    # Its Slurm nodes are polled (plan.slurm_poll.polled).
    polled: bool = False
    # slurmctld's update_time of the last full node read (the poll asks what changed since).
    nodes_read_at: int = 0
    # Slurm answered the last poll (None: not polled yet).
    poll_answered: bool | None = None
    # update_time of the poll's last job probe that saw a change, and when the poll
    # reads nodes although no job changed (plan/slurm_poll.py).
    jobs_read_at: int = 0
    node_reads: NodeReads = field(default_factory=NodeReads)
    # slurm.conf's SuspendTime (None: no power saving).
    suspend_time: int | None = None
    # The last plan's drained nodes whose slurmd pod goes once their job ends.
    pods_go_when_idle: frozenset[str] = frozenset()
    # The last plan's nodes whose slurmd Slurm does not hear yet (Plan.awaited).
    awaited: frozenset[str] = frozenset()
    # The config hash its ConfigMap holds and since when (plan/reconfigure.py). In
    # memory only: after an operator restart the whole window is waited again.
    config_clock: ConfigClock | None = None
    # The config last written (after a restart: what the ConfigMap holds, read back
    # once): a reconcile writes its config before asking Slurm only when no line
    # of this one leaves or shrinks (plan.holds.early_delivery_safe).
    delivered: InForce | None = None
    # When the Node cache it was made from was taken (monotonic), and the lock of
    # its two writers, the config queue and the reconcile (controllers/early_config.py).
    delivered_nodes_at: float = 0.0
    # Every byte of the config last written (RenderedConfig.content_hash).
    delivered_content: str = ""
    # Where Slurm has each node (render/live_topology.units_of) on a release that
    # moves nodes live; None: not known (each node is sent where it goes).
    units_in_slurm: dict[str, tuple[tuple[str, str], ...]] | None = None
    # The nodes a live move may have left an override for in Slurm's state, which
    # the next reconfigure must settle first (live_topology.before_reconfigure);
    # known with `units_in_slurm`, and kept on the ConfigMap for a restart.
    overridden: frozenset[str] = frozenset()
    # Since when (monotonic) a reconfiguring write waits for that settling.
    settling_since: float | None = None
    # Where the config last written places each node (live_topology.units_of).
    delivered_units: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    delivering: threading.Lock = field(default_factory=threading.Lock)
    # The last reconcile's observation without its Nodes, for the config queue
    # (observe.observe_again).
    observed: Snapshot | None = None
    # Since when each node Slurm shows not responding was seen so (epoch seconds).
    not_responding: dict[str, float] = field(default_factory=dict)
    triggers: set[str] = field(default_factory=set)


@dataclass
class OperatorState:
    """The operator's process-wide state; its one instance is `State`."""

    # Installed by the entry point (`slurmkube operator`) before kopf starts.
    settings: Settings = field(default_factory=Settings)
    clients: SlurmClients = field(default_factory=lambda: SlurmClients(Settings()))
    kube: Kube | None = None
    lease: LeaderLease | None = None
    clusters: dict[Key, ClusterMemory] = field(default_factory=dict)
    # Per Node: the fingerprint of its last event that counted, for the SlurmCluster
    # reconciles and for the Kueue bridge (each watcher keeps its own memory; both are
    # made again when the label keys change, `relabel_nodes_seen`).
    nodes_seen: dict[str, int] = field(default_factory=dict)
    bridge_nodes_seen: dict[str, int] = field(default_factory=dict)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


State = OperatorState()


def cluster_memory(key: Key) -> ClusterMemory:
    """The cluster's record, made on first sight (an event may name a cluster not seen yet)."""
    return State.clusters.setdefault(key, ClusterMemory())


def relabel_nodes_seen(
    labels: Mapping[str, Mapping[str, str]], keys: frozenset[str] | None
) -> None:
    """Both Node watchers' memories after the label keys changed (`relabelled`), from
    each node's labels as the reconcile that made the new keys read them."""
    for seen in (State.nodes_seen, State.bridge_nodes_seen):
        relabelled(seen, labels, keys)


def leading() -> bool:
    """The one leader check: only the holder of the operator's Lease acts."""
    return State.lease is not None and State.lease.is_leader


def label_keys() -> frozenset[str] | None:
    """The Node label keys any cluster's config reads (None: all, until every
    cluster has reconciled once)."""
    keys: set[str] = set()
    for memory in list(State.clusters.values()):
        if memory.label_keys is None:
            return None
        keys |= memory.label_keys
    return frozenset(keys)
