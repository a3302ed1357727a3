"""One Kubernetes Node as the operator keeps it: converted once per Node event by
the operator's Node cache (controllers/caches.py), read by every reconcile and
bridge round."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TypeVar

from pydantic import ValidationError

from slurmkube.api import well_known as wk
from slurmkube.api.grammar import InvalidValue
from slurmkube.api.models import KubeNode
from slurmkube.kube.client import Manifest
from slurmkube.topology.fleet import FleetNode, fleet_node

log = logging.getLogger(__name__)


def _fleet_node_or_none(raw: Manifest) -> FleetNode | None:
    """The node as the fleet model sees it; None (and a warning) for unusable labels."""
    try:
        return fleet_node(KubeNode.model_validate(raw))
    except (ValidationError, InvalidValue) as err:
        log.warning("node skipped node=%s error=%s", raw["metadata"]["name"], err)
        return None


@dataclass(frozen=True, slots=True)
class NodeEntry:
    """What a cluster reconcile and a bridge round read of one Kubernetes Node: the
    node as the fleet model sees it (None: unusable labels or resources), why it
    may not run slurmd (None: it may), whether it is cordoned, its labels, and the
    conditions (type, status) and taints (key, value, effect) node health reads."""

    fleet: FleetNode | None
    unavailable: str | None
    cordoned: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    conditions: tuple[tuple[str, str], ...] = ()
    taints: tuple[tuple[str, str, str], ...] = ()
    name: str = ""


def node_entry(raw: Manifest) -> NodeEntry:
    """Converted once per Node event, by the operator's Node cache (controllers/caches.py).

    The index holds one entry per Node for the operator's life (25,000 at the
    scale target), so an entry holds one labels dict, shared with its
    FleetNode, and its strings are interned: every watch event is decoded on
    its own, and without interning each Node would keep its own copy of every
    label key and of the values a fleet repeats (`linux`, a product, a rack).
    """
    labels = _interned(raw["metadata"].get("labels") or {})
    node = _fleet_node_or_none(raw)
    if node is not None:
        node = replace(node, labels=labels)
    cordoned = bool((raw.get("spec") or {}).get("unschedulable"))
    unavailable = None
    if wk.LABEL_LEASE in labels:
        unavailable = f"lent to Kueue workload {labels[wk.LABEL_LEASE]}"
    elif cordoned:
        unavailable = "cordoned"
    conditions = _shared(
        tuple(
            (_str(c.get("type", "")), _str(c.get("status", "")))
            for c in (raw.get("status") or {}).get("conditions") or []
        )
    )
    taints = _shared(
        tuple(
            (_str(t.get("key", "")), _str(t.get("value") or ""), _str(t.get("effect", "")))
            for t in (raw.get("spec") or {}).get("taints") or []
        )
    )
    name = _str(raw["metadata"]["name"])
    return NodeEntry(node, unavailable, cordoned, labels, conditions, taints, name)


def _str(value: object) -> str:
    return sys.intern(str(value))


def _interned(labels: Mapping[str, object]) -> dict[str, str]:
    return {_str(key): _str(value) for key, value in labels.items()}


_T = TypeVar("_T", bound=tuple[object, ...])


@lru_cache(maxsize=1024)
def _shared(value: _T) -> _T:
    """One object per distinct tuple: most Nodes of a fleet hold the same
    conditions (Ready True, no pressure) and taints."""
    return value
