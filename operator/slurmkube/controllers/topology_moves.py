"""Nodes moved between topology units without a reconfigure (26.05; the plan:
render/live_topology.py).

The config's writers (controllers/early_config.py) call this after the
ConfigMap write when the reconfigure hash did not change: the nodes Slurm has
elsewhere are sent where the new file puts them, over slurmrestd (`POST
/nodes/` `topology_str`) or, without one, scontrol. Where Slurm has each node
lives in the cluster's memory; after an operator restart it is what the
ConfigMap being replaced says.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from slurmkube.controllers.memory import State
from slurmkube.controllers.observe import Snapshot
from slurmkube.kube.client import Kube, Manifest
from slurmkube.render.files import TOPOLOGY_YAML
from slurmkube.render.live_topology import Units, moves, units_in_file
from slurmkube.slurm.errors import SlurmError
from slurmkube.slurm.topology_text import parse_topology_yaml

log = logging.getLogger(__name__)


def written_units(kube: Kube, config_map: Manifest) -> tuple[dict[str, Units] | None, str | None]:
    """Where the ConfigMap's topology.yaml puts each node, and its config hash;
    (None, None) when it holds none (a new cluster: slurmctld starts on the
    files written now)."""
    meta = config_map["metadata"]
    data = (kube.get("v1", "ConfigMap", meta["name"], meta["namespace"]) or {}).get("data") or {}
    text = data.get(TOPOLOGY_YAML)
    if text is None:
        return None, None
    try:
        parsed = parse_topology_yaml(text)
    except ValueError:
        return None, None
    placed = {t: {unit: rec.nodes for unit, rec in units.items()} for t, units in parsed.items()}
    return units_in_file(placed), data.get("config-hash")


def move_nodes(
    kube: Kube, snap: Snapshot, before: Mapping[str, Units], wanted: dict[str, Units]
) -> dict[str, Units]:
    """Move the nodes Slurm has elsewhere than `wanted`; returns where Slurm has
    them now. A failed move is sent again by the next delivery (each reconcile's)."""
    planned = moves(before, wanted)
    if not planned:
        return wanted
    cluster = snap.observed.bundle.cluster
    # scontrol where the cluster runs no slurmrestd (spec.restApi.replicas 0).
    slurm = State.clients.rest(kube, cluster) or State.clients.scontrol(kube, cluster)
    if slurm is None:
        return dict(before)
    meta = snap.cluster_obj["metadata"]
    placed = dict(before)
    for move in planned:
        try:
            slurm.move_nodes(move.nodes, move.units)
        except SlurmError as err:
            log.warning(
                "topology move failed cluster=%s/%s nodes=%d error=%s",
                meta["namespace"],
                meta["name"],
                len(move.nodes),
                err,
            )
            return placed
        placed.update(dict.fromkeys(move.nodes, move.units))
    moved = sum(len(m.nodes) for m in planned)
    log.info("topology moved cluster=%s/%s nodes=%d", meta["namespace"], meta["name"], moved)
    return wanted
