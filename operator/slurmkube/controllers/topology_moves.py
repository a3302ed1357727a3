"""Nodes moved between topology units without a reconfigure (26.05; the plan:
render/live_topology.py).

The config's writers (controllers/early_config.py) call this after the
ConfigMap write when the reconfigure hash did not change: the nodes Slurm has
elsewhere are sent where the new file puts them, over slurmrestd (`POST
/nodes/` `topology_str`) or, without one, scontrol. Before a write that does
reconfigure, the nodes moved so far are settled (`settle_overrides`), or the
write waits. Where Slurm has each node, and which nodes it holds an override
for, live in the cluster's memory; after an operator restart they are what
the ConfigMap being replaced says. Each Slurm read is checked against them
(`follow_slurm`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slurmkube.api import well_known as wk
from slurmkube.controllers.memory import ClusterMemory, State
from slurmkube.controllers.observe import Snapshot
from slurmkube.kube.client import Kube, Manifest
from slurmkube.render.files import TOPOLOGY_YAML
from slurmkube.render.hostlist import compress
from slurmkube.render.live_topology import (
    Move,
    Units,
    before_reconfigure,
    moves,
    override_drift,
    still_overridden,
    units_in_file,
)
from slurmkube.slurm.errors import SlurmError
from slurmkube.slurm.hostlist import expand
from slurmkube.slurm.topology_text import parse_topology_yaml

log = logging.getLogger(__name__)

# Past this, the annotation says "*" (every node the file places): annotations
# share 256 KiB per object.
_OVERRIDES_MAX_CHARS = 65536
_EVERY_NODE = "*"


@dataclass(frozen=True, slots=True)
class Written:
    """What the ConfigMap's files hold: where topology.yaml puts each node, the
    config hash, and the nodes Slurm may hold a live move's override for."""

    units: dict[str, Units]
    config_hash: str | None
    overridden: frozenset[str]


def written(kube: Kube, config_map: Manifest) -> Written | None:
    """The ConfigMap as the last writer left it; None when it holds no
    topology.yaml (a new cluster: slurmctld starts on the files written now)."""
    meta = config_map["metadata"]
    found = kube.get("v1", "ConfigMap", meta["name"], meta["namespace"]) or {}
    data = found.get("data") or {}
    text = data.get(TOPOLOGY_YAML)
    if text is None:
        return None
    try:
        parsed = parse_topology_yaml(text)
    except ValueError:
        return None
    placed = {t: {unit: rec.nodes for unit, rec in units.items()} for t, units in parsed.items()}
    units = units_in_file(placed)
    annotations = (found.get("metadata") or {}).get("annotations") or {}
    listed = annotations.get(wk.ANNOTATION_TOPOLOGY_OVERRIDES, "")
    overridden = frozenset(units) if listed == _EVERY_NODE else frozenset(expand(listed))
    return Written(units, data.get("config-hash"), overridden)


def with_overrides(config_map: Manifest, overridden: Iterable[str]) -> Manifest:
    """`config_map` carrying the overridden nodes for a restarted operator."""
    listed = compress(overridden)
    if not listed:
        return config_map
    if len(listed) > _OVERRIDES_MAX_CHARS:
        listed = _EVERY_NODE
    meta = dict(config_map["metadata"])
    annotations = {**(meta.get("annotations") or {}), wk.ANNOTATION_TOPOLOGY_OVERRIDES: listed}
    meta["annotations"] = annotations
    return {**config_map, "metadata": meta}


def settle_overrides(
    kube: Kube,
    snap: Snapshot,
    before: Mapping[str, Units],
    wanted: Mapping[str, Units],
    overridden: frozenset[str],
) -> frozenset[str] | None:
    """Before a reconfigure to `wanted`: send the overridden nodes where it puts
    them, or out of every unit (live_topology.before_reconfigure). Returns the
    nodes still overridden, None when Slurm did not take every update (then the
    new files must not be written: a slurmctld that starts on them may not)."""
    if not overridden:
        return overridden
    planned = before_reconfigure(before, wanted, overridden)
    failed = _send(kube, snap, planned, "settled")
    if failed is None:
        return still_overridden(planned)
    # A unit slurmctld does not hold after all (files it has not loaded): the
    # nodes left go out of every unit, which names no unit.
    left = planned[planned.index(failed) :]
    out = Move(tuple(sorted(n for move in left for n in move.nodes)), ())
    if not failed.units or _send(kube, snap, (out,), "settled") is not None:
        return None
    return still_overridden(planned[: planned.index(failed)])


def move_nodes(
    kube: Kube,
    snap: Snapshot,
    before: Mapping[str, Units],
    wanted: dict[str, Units],
    planned: tuple[Move, ...],
) -> dict[str, Units]:
    """Send `planned` (live_topology.moves from `before` to `wanted`); returns
    where Slurm has the nodes now. A failed move is sent again by the next
    delivery (each reconcile's)."""
    failed = _send(kube, snap, planned, "moved")
    if failed is None:
        return wanted
    placed = dict(before)
    for move in planned[: planned.index(failed)]:
        placed.update(dict.fromkeys(move.nodes, move.units))
    return placed


def follow_slurm(kube: Kube, snap: Snapshot, memory: ClusterMemory) -> None:
    """After a Slurm read: count the overrides Slurm shows and the operator did
    not, and move again the nodes it has elsewhere than the files
    (live_topology.override_drift)."""
    nodes = snap.observed.slurm_nodes
    with memory.delivering:
        placed, wanted = memory.units_in_slurm, memory.delivered_units
        if nodes is None or placed is None or not wanted:
            return
        # A node Slurm does not have holds no override (a move it refused).
        counted = frozenset(n for n in memory.overridden if n in nodes)
        shown = {n: v.topology for n, v in nodes.items() if v.topology or n in counted}
        stray, off = override_drift(shown, wanted, counted)
        memory.overridden = counted | stray
        if off:
            lost = {**placed, **dict.fromkeys(off, ())}
            memory.units_in_slurm = move_nodes(kube, snap, lost, wanted, moves(lost, wanted))


def _send(kube: Kube, snap: Snapshot, planned: tuple[Move, ...], what: str) -> Move | None:
    """Send `planned` in order; returns the first update Slurm did not take."""
    if not planned:
        return None
    cluster = snap.observed.bundle.cluster
    # scontrol where the cluster runs no slurmrestd (spec.restApi.replicas 0).
    slurm = State.clients.rest(kube, cluster) or State.clients.scontrol(kube, cluster)
    meta = snap.cluster_obj["metadata"]
    for move in planned:
        try:
            if slurm is None:
                raise SlurmError("no Slurm client")
            slurm.move_nodes(move.nodes, move.units)
        except SlurmError as err:
            log.warning(
                "topology update failed cluster=%s/%s nodes=%d error=%s",
                meta["namespace"],
                meta["name"],
                len(move.nodes),
                err,
            )
            return move
    count = sum(len(m.nodes) for m in planned)
    log.info("topology %s cluster=%s/%s nodes=%d", what, meta["namespace"], meta["name"], count)
    return None
