"""Observe what a Slurm upgrade reads (plan/upgrade.py): the images the control
plane's objects run and whether they rolled out, the status.upgrade last
written, and our maintenance reservations in Slurm. Reads only."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from slurmkube.api.models import SlurmCluster
from slurmkube.build.names import names_of
from slurmkube.kube.client import Kube, Manifest
from slurmkube.plan.upgrade_model import (
    LOGIN,
    SLURMCTLD,
    SLURMDBD,
    SLURMRESTD,
    ComponentView,
    ReservationView,
    UpgradeMemory,
)
from slurmkube.plan.upgrade_window import RESERVATION_PREFIX
from slurmkube.slurm.errors import SlurmError
from slurmkube.slurm.protocol import SlurmClient

log = logging.getLogger(__name__)


def observe_components(
    kube: Kube, cluster: SlurmCluster, namespace: str
) -> dict[str, ComponentView]:
    """The control plane's Deployments and StatefulSet that exist, by component."""
    names = names_of(cluster)
    wanted = {
        SLURMCTLD: ("StatefulSet", names.controller, "slurmctld"),
        SLURMRESTD: ("Deployment", names.restapi, "slurmrestd"),
        LOGIN: ("Deployment", names.login, "sackd"),
        SLURMDBD: ("Deployment", names.slurmdbd, "slurmdbd"),
    }
    out = {}
    for component, (kind, name, container) in wanted.items():
        obj = kube.get("apps/v1", kind, name, namespace)
        if obj is not None:
            out[component] = component_view(obj, container)
    return out


def component_view(obj: Mapping[str, Any], container: str) -> ComponentView:
    """The daemon container's image in the template, and whether every replica runs
    that template and is Ready (kubectl rollout status's test)."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    image = next((str(c.get("image", "")) for c in containers if c.get("name") == container), "")
    replicas = int(spec.get("replicas", 1))
    current = int(status.get("observedGeneration", 0)) >= int(
        (obj.get("metadata") or {}).get("generation", 0)
    )
    rolled_out = (
        current
        and int(status.get("updatedReplicas", 0)) == replicas
        and int(status.get("readyReplicas", 0)) == replicas
        and int(status.get("replicas", 0)) == replicas
    )
    if obj.get("kind") == "StatefulSet":
        rolled_out = rolled_out and status.get("currentRevision") == status.get("updateRevision")
    return ComponentView(image, rolled_out)


def upgrade_memory(cluster_obj: Manifest) -> UpgradeMemory | None:
    """The status.upgrade the last reconcile wrote."""
    raw = (cluster_obj.get("status") or {}).get("upgrade")
    if not isinstance(raw, Mapping) or not raw.get("to"):
        return None
    return UpgradeMemory(
        from_image=str(raw.get("from", "")),
        to_image=str(raw["to"]),
        phase=str(raw.get("phase", "")),
        nodes_done=int(raw.get("nodesDone", 0)),
        since=_epoch(raw.get("since")),
    )


def _epoch(value: object) -> float:
    if not isinstance(value, str):
        return 0.0
    try:
        return dt.datetime.fromisoformat(value).timestamp()
    except ValueError:
        return 0.0


def maintenance_reservations(slurm: SlurmClient) -> dict[str, ReservationView] | None:
    """Our upgrade reservations as Slurm shows them; None when Slurm did not answer."""
    try:
        listed = slurm.list_reservations()
    except SlurmError as err:
        log.warning("reservations not read error=%s", err)
        return None
    return {
        r.name: ReservationView(
            r.name,
            tuple(sorted(r.nodes)),
            r.start.timestamp() if r.start else 0.0,
            r.end.timestamp() if r.end else 0.0,
        )
        for r in listed
        if r.name.startswith(RESERVATION_PREFIX)
    }
