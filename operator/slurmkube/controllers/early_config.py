"""A cluster's config written before Slurm is read, on its own queue.

A Node label the config reads changed: the new config is made from Kubernetes
alone and written at once when `plan.holds.early_delivery_safe` allows it (no
line of the config in force leaves or changes shape), so the change reaches
the ConfigMap in the time the config takes to make. The cluster's reconcile,
which follows, reads Slurm first: after each reconfigure that is a full node
list (~16 s at 25,000 nodes), and a label change queued behind it would wait
that long for its turn.

Two writers, then: this path and the reconcile (its own early write, and the
plan's config after the Slurm read). Each config is made from the Node cache
as it was at one instant; one made from an older instant than the config in
force is not written (the reconcile that made it runs again after the event
that made the newer one). On a release that moves nodes live, a write whose
reconfigure hash did not change moves the relabelled nodes in Slurm, and one
that reconfigures first settles the nodes moved so far, or is not written
(controllers/topology_moves.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import replace

from slurmkube.api import well_known as wk
from slurmkube.api.slurm_version import parse_slurm_version
from slurmkube.controllers.apply import deliver_config
from slurmkube.controllers.memory import ClusterMemory
from slurmkube.controllers.observe import NodeEntry, Snapshot, observe_again
from slurmkube.controllers.topology_moves import (
    move_nodes,
    settle_overrides,
    with_overrides,
    written,
)
from slurmkube.kube.client import Kube, Manifest
from slurmkube.plan.cluster import Configured, configure
from slurmkube.plan.holds import ConfigInForce, early_delivery_safe
from slurmkube.plan.model import Plan, PodView
from slurmkube.render.live_topology import Move, moves, units_of
from slurmkube.slurm.conf_text import node_shapes

log = logging.getLogger(__name__)

# How long a reconfiguring write waits for Slurm to settle the nodes moved live.
SETTLE_WAIT_SECONDS = 300.0


def deliver(
    kube: Kube,
    snap: Snapshot,
    memory: ClusterMemory,
    configured: Configured | Plan,
    nodes_at: float,
    *,
    only_if_safe: bool = False,
) -> str:
    """Write the config made from the Node cache of instant `nodes_at` and
    remember it as the one in force; where nodes move live, move them. Returns
    its hash ("" when not written: a config made from a later instant is in
    force, `only_if_safe` and `early_delivery_safe` refuses it against the
    config in force now, or Slurm did not take the settling of a live move's
    override before a reconfigure)."""
    rendered = configured.rendered
    assert configured.config_map is not None and rendered is not None
    with memory.delivering:
        if nodes_at < memory.delivered_nodes_at:
            return ""
        config = configured.config
        if only_if_safe and memory.delivered is None:
            memory.delivered = config_in_force(kube, configured.config_map)
        if only_if_safe and (config is None or not early_delivery_safe(memory.delivered, config)):
            return ""
        clock = memory.config_clock
        before, overridden = memory.units_in_slurm, memory.overridden
        held = clock.hash if clock is not None else None
        if before is None and rendered.topology_frame is not None:
            # Since the operator started: what the files it is about to replace hold.
            found = written(kube, configured.config_map)
            if found is not None:
                before, held, overridden = found.units, found.config_hash, found.overridden
        # A reconfigure, or a slurmctld that starts, reads the new file: it places every node.
        reconfigures = held != rendered.hash
        live = config is not None and rendered.topology_frame is not None
        wanted = units_of(config) if live and config is not None else {}
        config_map = configured.config_map
        planned: tuple[Move, ...] = ()
        if before is not None and reconfigures:
            settled = settle_overrides(kube, snap, before, wanted, overridden)
            if settled is None and not settling_given_up(memory, snap):
                return ""
            overridden = overridden if settled is None else settled
        elif before is not None and live:
            # Each node moved may keep an override: listed before it is sent.
            planned = moves(before, wanted)
            overridden = overridden.union(n for move in planned for n in move.nodes)
        memory.settling_since = None
        config_map = with_overrides(config_map, overridden)
        fresh = rendered.content_hash != memory.delivered_content
        memory.config_clock = deliver_config(kube, snap, config_map, rendered, clock, changed=fresh)
        memory.delivered = config
        memory.delivered_nodes_at = nodes_at
        memory.delivered_content = rendered.content_hash
        memory.overridden = overridden
        memory.delivered_units = wanted
        if live:
            memory.units_in_slurm = (
                wanted
                if reconfigures or before is None
                else move_nodes(kube, snap, before, wanted, planned)
            )
        else:
            memory.units_in_slurm = None
        return rendered.hash


def config_in_force(kube: Kube, config_map: Manifest) -> ConfigInForce | None:
    """The config the ConfigMap holds, as `early_delivery_safe` reads it: what an
    operator that restarted has in force (None: no ConfigMap, or one written
    before it named its Slurm release)."""
    meta = config_map["metadata"]
    found = kube.get("v1", "ConfigMap", meta["name"], meta["namespace"]) or {}
    release = ((found.get("metadata") or {}).get("annotations") or {}).get(
        wk.ANNOTATION_SLURM_RELEASE
    )
    text = (found.get("data") or {}).get("slurm.conf")
    if release is None or text is None:
        return None
    try:
        version = parse_slurm_version(release, f"ConfigMap {meta['name']} annotation")
        return ConfigInForce(version, node_shapes(text))
    except ValueError as err:
        log.warning("config in force unread configmap=%s error=%s", meta["name"], err)
        return None


def settling_given_up(memory: ClusterMemory, snap: Snapshot) -> bool:
    """Whether a reconfiguring write has waited `SETTLE_WAIT_SECONDS` on Slurm to
    settle the nodes moved live. The wait protects a running slurmctld; one that
    has not answered that long is likely down, and the new files may be its fix."""
    now = time.monotonic()
    if memory.settling_since is None:
        memory.settling_since = now
    if now - memory.settling_since < SETTLE_WAIT_SECONDS:
        return False
    meta = snap.cluster_obj["metadata"]
    log.warning(
        "config written unsettled cluster=%s/%s: Slurm took no settling of its moved nodes "
        "for %.0fs; a slurmctld that still holds their moves may not start on the new files",
        meta["namespace"],
        meta["name"],
        now - memory.settling_since,
    )
    return True


def deliver_if_safe(
    kube: Kube,
    snap: Snapshot,
    memory: ClusterMemory,
    configured: Configured | object,
    nodes_at: float,
) -> str:
    """Write `configured` before Slurm is read, if that is safe; returns the hash
    written ("" when nothing was)."""
    if not isinstance(configured, Configured):
        return ""
    return deliver(kube, snap, memory, configured, nodes_at, only_if_safe=True)


def deliver_early(
    kube: Kube,
    key: tuple[str, str],
    memory: ClusterMemory,
    *,
    nodes: Mapping[str, NodeEntry],
    node_sets: tuple[Manifest, ...],
    pods: tuple[PodView, ...],
    nodes_at: float,
) -> str:
    """The config queue's work: observe Kubernetes, make the config, write it if
    safe. Returns the hash written ("" when nothing was)."""
    started = time.monotonic()
    snap = observe_again(kube, *key, nodes, node_sets, last=memory.observed)
    if snap is None:
        return ""
    observed = time.monotonic()
    # The pods' images too: the files suit the oldest Slurm a slurmd runs.
    configured = configure(replace(snap.observed, pods=pods))
    made = time.monotonic()
    unchanged = (
        isinstance(configured, Configured)
        and configured.rendered.content_hash == memory.delivered_content
    )
    # The reconcile that follows writes it again anyway (level-based repair).
    written = "" if unchanged else deliver_if_safe(kube, snap, memory, configured, nodes_at)
    log.info(
        "config made cluster=%s/%s written=%s seconds=%.2f (observe=%.2f config=%.2f write=%.2f)",
        *key,
        written,
        time.monotonic() - nodes_at,
        observed - started,
        made - observed,
        time.monotonic() - made,
    )
    return written
