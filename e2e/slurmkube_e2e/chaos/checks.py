"""What the suite checks after each fault (and samples during it): is the
cluster converged (Ready, one Ready slurmd pod per wanted node, every such node
in service in Slurm), what leaked, and were there ever two slurmd pods on one node."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from slurmkube.api import well_known as wk
from slurmkube_e2e.chaos.jobs import ctld
from slurmkube_e2e.chaos.report import duplicate_slurmd
from slurmkube_e2e.kube import Kube, Manifest
from slurmkube_e2e.operator_cluster import API, LOCAL
from slurmkube_e2e.waiting import condition, has_condition

SLURMD = "app.kubernetes.io/name=slurmd"
IN_SERVICE = frozenset({"idle", "allocated", "mixed", "completing", "planned"})
LOCAL_NODES = ",".join(f"{k}={v}" for k, v in LOCAL.items())


def slurmd_pods(kube: Kube, namespace: str) -> list[Manifest]:
    return kube.list("v1", "Pod", namespace=namespace, label_selector=SLURMD)


def slurmd_pod_on(kube: Kube, namespace: str, node: str) -> Manifest | None:
    """The live (not terminating) slurmd pod on `node`."""
    for pod in slurmd_pods(kube, namespace):
        if pod["spec"].get("nodeName") == node and not pod["metadata"].get("deletionTimestamp"):
            return pod
    return None


def slurm_nodes(namespace: str) -> dict[str, tuple[str, str]]:
    """node -> (sinfo state, reason)."""
    out = ctld(namespace, "sinfo", "-h", "-N", "-o", "%N|%T|%E")
    rows = [line.split("|", 2) for line in out.splitlines() if line.count("|") >= 2]
    return {node: (state, reason) for node, state, reason in rows}


def not_converged(kube: Kube, namespace: str, replicas: int) -> list[str]:
    """Why the cluster is not converged; empty when it is."""
    cluster = kube.get(API, "SlurmCluster", "local", namespace=namespace)
    if cluster is None:
        return ["no SlurmCluster"]
    why = []
    if not has_condition(cluster, "Ready"):
        ready = condition(cluster, "Ready") or {}
        why.append(f"not Ready ({ready.get('reason')}: {ready.get('message')})")
    pods = slurmd_pods(kube, namespace)
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    if len(pods) != len(live):
        why.append(f"{len(pods) - len(live)} slurmd pods terminating")
    if len(live) != replicas:
        why.append(f"{len(live)} slurmd pods, want {replicas}")
    unready = [p["metadata"]["name"] for p in live if not has_condition(p, "Ready")]
    if unready:
        why.append(f"slurmd pods not Ready: {unready}")
    if why:
        return why
    states = slurm_nodes(namespace)
    for node in sorted(p["spec"].get("nodeName") or "" for p in live):
        state, reason = states.get(node, ("(not in Slurm)", ""))
        if state not in IN_SERVICE:
            why.append(f"{node} is {state} ({reason})")
    return why


def wait_converged(
    kube: Kube,
    namespace: str,
    replicas: int,
    timeout: float,
    settled: Callable[[], str | None] | None = None,
) -> tuple[float | None, list[str]]:
    """Seconds until converged (and `settled()` says nothing is missing), or None
    and the reasons it was not when `timeout` ran out."""
    started = time.monotonic()
    while True:
        try:
            why = not_converged(kube, namespace, replicas)
            extra = settled() if settled is not None and not why else None
        except Exception as err:  # the API server or slurmctld away for a moment
            why, extra = [f"not readable: {err}"], None
        if extra:
            why = [extra]
        if not why:
            return round(time.monotonic() - started, 1), []
        if time.monotonic() - started > timeout:
            return None, why
        time.sleep(2)


def leaks(kube: Kube, namespace: str, budgets: set[str], held: str = "") -> list[str]:
    """What a converged cluster should not have: reservations, Leases in its
    namespace, lending labels or cordons on the local nodes, disruption budgets
    other than `budgets`; the reservation and lease label of the workload whose
    uid is `held` excepted (it holds lent nodes). (A node with a slurmd pod left
    drained fails convergence; one without keeps the operator's removal drain,
    its record that the pod went, until the node is wanted again.)"""
    found = []
    reservations = ctld(namespace, "scontrol", "-o", "show", "reservation").strip()
    if reservations and not reservations.startswith("No reservations"):
        found += [
            f"reservation: {line.split()[0]}"
            for line in reservations.splitlines()
            if not (held and line.split()[0] == f"ReservationName={wk.RESERVATION_PREFIX}{held}")
        ]
    found += [
        f"Lease {lease['metadata']['name']}"
        for lease in kube.list("coordination.k8s.io/v1", "Lease", namespace=namespace)
    ]
    for kube_node in kube.list("v1", "Node", label_selector=LOCAL_NODES):
        name = kube_node["metadata"]["name"]
        lease = (kube_node["metadata"].get("labels") or {}).get(wk.LABEL_LEASE)
        if lease and lease != held:
            found.append(f"Node {name} lease label {lease}")
        if kube_node["spec"].get("unschedulable"):
            found.append(f"Node {name} cordoned")
    found += [
        f"PodDisruptionBudget {pdb['metadata']['name']}"
        for pdb in kube.list("policy/v1", "PodDisruptionBudget", namespace=namespace)
        if pdb["metadata"]["name"] not in budgets
    ]
    return found


class PodSampler(threading.Thread):
    """Lists the slurmd pods every second and keeps each moment two of them were
    on one node, under the name of the fault running then."""

    def __init__(self, kube: Kube, namespace: str, interval: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.kube = Kube(kube.kubeconfig)  # its own client: the suite's is not shared
        self.namespace = namespace
        self.interval = interval
        self.fault = "setup"
        self.duplicates: dict[str, set[str]] = {}
        self.done = threading.Event()

    def sample(self) -> None:
        pods: list[dict[str, Any]] = slurmd_pods(self.kube, self.namespace)
        pairs = [(p["spec"].get("nodeName") or "", p["metadata"]["name"]) for p in pods]
        for node, names in duplicate_slurmd(pairs).items():
            self.duplicates.setdefault(self.fault, set()).add(f"{node}: {', '.join(names)}")

    def run(self) -> None:
        while not self.done.is_set():
            # The API server restarting: sample again next time.
            with contextlib.suppress(Exception):
                self.sample()
            self.done.wait(self.interval)
