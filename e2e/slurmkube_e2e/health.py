"""Node health as e2e tests drive and read it: Node conditions set the way a node
monitor sets them (a strategic merge on the Node's status, so the runtime agent's
own conditions stay), health's taint, and a node's state as scontrol shows it."""

from __future__ import annotations

import re
import time
from typing import Any

from kubernetes.client import CoreV1Api

from slurmkube_e2e.kube import Kube
from slurmkube_e2e.operator_cluster import in_ctld

TAINT = "slurmkube.io/unhealthy"
# A loaded 2-core machine: generous, never a timing assertion.
SLOW = 180


def health_spec(fatal: str, drain: str) -> dict[str, Any]:
    """`spec.health` with a fatal and a drain rule on the two condition types; the
    breaker acts on every node (a module turns several of few nodes sick), and a
    failed check may be retried at once."""
    return {
        "rules": [
            {"condition": {"type": fatal}, "severity": "fatal"},
            {"condition": {"type": drain}, "severity": "drain"},
        ],
        "circuitBreaker": {"maxSickShare": 1},
        "recovery": {"checkTimeoutSeconds": 300, "checkIntervalSeconds": 0},
    }


def set_condition(kube: Kube, node: str, kind: str, status: str) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    condition = {
        "type": kind,
        "status": status,
        "reason": "E2eMonitor",
        "message": "set by the node health e2e test",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    CoreV1Api(kube.api_client).patch_node_status(node, {"status": {"conditions": [condition]}})


def untaint(kube: Kube, node: str) -> None:
    """The module's nodes leave without our taint even if a test failed midway."""
    raw = kube.get("v1", "Node", node)
    if raw is None:
        return
    taints = [t for t in (raw.get("spec") or {}).get("taints") or [] if t.get("key") != TAINT]
    kube.patch("v1", "Node", node, {"spec": {"taints": taints or None}})


def slurm_node(namespace: str, node: str) -> dict[str, str]:
    out = in_ctld(namespace, "scontrol", "-o", "show", "node", node)
    return dict(re.findall(r"(\w+)=(.*?)(?= \w+=|$)", out))


def wait_slurm_node(
    namespace: str, node: str, wanted: Any, timeout: float = SLOW
) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    found: dict[str, str] = {}
    while time.monotonic() < deadline:
        found = slurm_node(namespace, node)
        if wanted(found):
            return found
        time.sleep(1)
    raise AssertionError(f"node {node}: {found.get('State')} {found.get('Reason')!r}")


def flags(node: dict[str, str]) -> set[str]:
    """scontrol's State=IDLE+DRAIN+... as a set."""
    return set(node.get("State", "").split("+"))


def tainted(node: dict[str, Any]) -> bool:
    return any(t.get("key") == TAINT for t in (node.get("spec") or {}).get("taints") or [])
