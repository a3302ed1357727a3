"""The Kueue bridge on real parts: Kueue admits a Job onto nodes the operator took from
Slurm (real slurmctld and slurmd pods on local-0..3) through a Slurm reservation, and
gives them back when the Job ends; busy nodes are waited for, never killed; a killed
operator converges with nothing leaked.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from slurmkube_e2e.kube import Kube, Manifest
from slurmkube_e2e.lending import KUEUE, LEASE, cluster_scoped, gpu_job, kueue_docs
from slurmkube_e2e.operator import OperatorProcess
from slurmkube_e2e.operator_cluster import API, LOCAL, docs, in_ctld, job_state, wait_job
from slurmkube_e2e.waiting import has_condition, stays, wait_for, wait_for_list, wait_gone

pytestmark = pytest.mark.e2e

CLIQUE = "nvidia.com/gpu.clique"
LENDERS = [f"local-{i}" for i in range(4)]  # one NVLink block of the local runtime


@dataclass(frozen=True)
class Bridge:
    namespace: str
    check: str
    clique: str


def _cluster_docs(namespace: str, clique: str) -> list[Manifest]:
    """The shared sample cluster, its NodeSet narrowed to one block, every node running slurmd."""
    cluster, node_set = docs(namespace)
    spec = dict(node_set["spec"])
    spec.pop("replicas")
    spec["nodeSelector"] = {"matchLabels": {**LOCAL, CLIQUE: clique}}
    return [cluster, {**node_set, "spec": spec}]


@pytest.fixture(scope="module")
def bridge(kube: Kube, operator: OperatorProcess) -> Iterator[Bridge]:
    namespace = f"e2e-bridge-{secrets.token_hex(2)}"
    local0 = kube.get("v1", "Node", "local-0")
    assert local0 is not None
    clique = local0["metadata"]["labels"][CLIQUE]
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_for(kube, "v1", "ServiceAccount", "default", lambda _: True, namespace=namespace)
    try:
        # NodeSet first: a first render without nodes would cost a reconfigure.
        for doc in reversed(_cluster_docs(namespace, clique)):
            kube.apply(doc)
        wait_for(
            kube,
            API,
            "SlurmCluster",
            "local",
            lambda o: has_condition(o, "Ready") and o["status"]["nodes"]["idle"] == 4,
            namespace=namespace,
            timeout=180,
        )
        for doc in kueue_docs(namespace):
            kube.apply(doc)
        wait_for(
            kube,
            KUEUE,
            "AdmissionCheck",
            namespace,
            lambda o: has_condition(o, "Active"),
            timeout=60,
        )
        yield Bridge(namespace, namespace, clique)
    finally:
        if operator.proc is None or operator.proc.poll() is not None:
            operator.start()
        for api, kind, name in cluster_scoped(namespace):
            kube.delete(api, kind, name)
        kube.delete("v1", "Namespace", namespace)
        wait_gone(kube, "v1", "Namespace", namespace, timeout=180)
        for node in kube.list("v1", "Node", label_selector=LEASE):
            kube.patch(
                "v1", "Node", node["metadata"]["name"], {"metadata": {"labels": {LEASE: None}}}
            )


# --- helpers -----------------------------------------------------------------------------


def reservations(namespace: str) -> dict[str, list[str]]:
    """Slurm reservations (name -> nodes), read in the slurmctld pod."""
    out = in_ctld(namespace, "scontrol", "-o", "show", "reservation")
    found = {}
    for line in out.splitlines():
        name = re.search(r"ReservationName=(\S+)", line)
        nodes = re.search(r" Nodes=(\S+)", line)
        if name and nodes:
            found[name.group(1)] = expand(nodes.group(1))
    return found


def expand(hostlist: str) -> list[str]:
    match = re.fullmatch(r"(\S+?)\[([0-9,-]+)\]", hostlist)
    if not match:
        return hostlist.split(",")
    names = []
    for part in match.group(2).split(","):
        low, _, high = part.partition("-")
        names += [f"{match.group(1)}{i}" for i in range(int(low), int(high or low) + 1)]
    return names


def workload_of(kube: Kube, namespace: str, job: str) -> Manifest | None:
    for w in kube.list(KUEUE, "Workload", namespace=namespace):
        owners = w["metadata"].get("ownerReferences") or []
        if any(o["name"] == job for o in owners):
            return w
    return None


def wait_workload(kube: Kube, namespace: str, job: str, predicate: Any, timeout: float) -> Manifest:
    items = wait_for_list(
        kube,
        KUEUE,
        "Workload",
        lambda ws: any(predicate(w) for w in ws if _owned_by(w, job)),
        namespace=namespace,
        timeout=timeout,
        what=f"workload of {job}",
    )
    return next(w for w in items if _owned_by(w, job) and predicate(w))


def _owned_by(w: Manifest, job: str) -> bool:
    return any(o["name"] == job for o in w["metadata"].get("ownerReferences") or [])


def leased_nodes(kube: Kube, uid: str) -> list[str]:
    return sorted(
        n["metadata"]["name"] for n in kube.list("v1", "Node", label_selector=f"{LEASE}={uid}")
    )


def slurm_states(namespace: str, nodes: list[str]) -> dict[str, str]:
    out = in_ctld(namespace, "sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%N %T")
    return dict(line.split() for line in out.splitlines() if line.strip())


def wait_returned(kube: Kube, namespace: str, uid: str, nodes: list[str]) -> None:
    """Lease labels and reservation gone; the nodes idle in Slurm again."""
    wait_for_list(
        kube,
        "v1",
        "Node",
        lambda ns: not ns,
        label_selector=f"{LEASE}={uid}",
        timeout=60,
        what="without the lease label",
    )
    wait_for(
        kube,
        API,
        "SlurmCluster",
        "local",
        lambda _: (
            f"slurmkube-{uid}" not in reservations(namespace)
            and set(slurm_states(namespace, nodes).values()) == {"idle"}
        ),
        namespace=namespace,
        timeout=150,
        what="reservation deleted and lent nodes idle in Slurm",
    )


def submitted_and_reserved(kube: Kube, namespace: str, job: str) -> str:
    """The UID of the Job's Workload, once Slurm holds a reservation for it."""
    uid = str(
        wait_workload(kube, namespace, job, lambda w: w["metadata"]["uid"], timeout=30)["metadata"][
            "uid"
        ]
    )
    wait_for(
        kube,
        API,
        "SlurmCluster",
        "local",
        lambda _: f"slurmkube-{uid}" in reservations(namespace),
        namespace=namespace,
        timeout=60,
        what=f"a Slurm reservation for the workload of {job}",
    )
    return uid


def check_entry(w: Manifest, check: str) -> Manifest:
    return next(e for e in w["status"]["admissionChecks"] if e["name"] == check)


# --- tests -------------------------------------------------------------------------------


def test_job_is_admitted_after_a_reservation_on_two_nodes_of_one_block_and_returned(
    kube: Kube, bridge: Bridge
) -> None:
    ns = bridge.namespace
    kube.create(gpu_job("two", nodes=2, seconds=20), namespace=ns)
    uid = submitted_and_reserved(kube, ns, "two")
    reserved = sorted(reservations(ns)[f"slurmkube-{uid}"])
    assert len(reserved) == 2 and set(reserved) <= set(LENDERS)  # both in one NVLink block
    # Slurm starts nothing new on them from now on.
    blocked = in_ctld(
        ns, "sbatch", "--parsable", "-N1", "-w", reserved[0], "--wrap", "true"
    ).strip()

    admitted = wait_workload(kube, ns, "two", lambda w: has_condition(w, "Admitted"), timeout=90)
    entry = check_entry(admitted, bridge.check)
    assert entry["state"] == "Ready"
    assert entry["podSetUpdates"][0]["nodeSelector"] == {LEASE: uid}
    assert leased_nodes(kube, uid) == reserved
    # The reservation existed before the check said Ready, and still does.
    assert sorted(reservations(ns)[f"slurmkube-{uid}"]) == reserved

    pods = wait_for_list(
        kube,
        "v1",
        "Pod",
        lambda ps: (
            len(ps) == 2
            and all((p.get("status") or {}).get("phase") in ("Running", "Succeeded") for p in ps)
        ),
        namespace=ns,
        label_selector="job-name=two",
        timeout=90,
    )
    assert sorted(p["spec"]["nodeName"] for p in pods) == reserved
    assert job_state(ns, blocked)[0] == "PENDING"

    wait_for(
        kube,
        "batch/v1",
        "Job",
        "two",
        lambda j: has_condition(j, "Complete"),
        namespace=ns,
        timeout=90,
    )
    assert job_state(ns, blocked)[0] in ("PENDING", "RUNNING", "COMPLETED")
    wait_returned(kube, ns, uid, reserved)
    in_ctld(ns, "scancel", blocked)


def test_busy_nodes_are_waited_for_and_the_slurm_job_is_never_killed(
    kube: Kube, bridge: Bridge
) -> None:
    ns = bridge.namespace
    busy = ",".join(LENDERS[:3])
    slurm_job = in_ctld(ns, "sbatch", "--parsable", "-N3", "-w", busy, "--wrap", "sleep 25").strip()
    wait_job(ns, slurm_job, {"RUNNING"})
    kube.create(gpu_job("waits", nodes=2, seconds=5), namespace=ns)
    pending = wait_workload(
        kube,
        ns,
        "waits",
        lambda w: (
            "waits for Slurm jobs" in check_entry(w, bridge.check).get("message", "")
            if (w.get("status") or {}).get("admissionChecks")
            else False
        ),
        timeout=60,
    )
    uid = pending["metadata"]["uid"]
    reserved = sorted(reservations(ns)[f"slurmkube-{uid}"])
    assert len(reserved) == 2 and LENDERS[3] in reserved
    stays(
        lambda: (
            job_state(ns, slurm_job)[0] == "RUNNING"
            and not has_condition(workload_of(kube, ns, "waits"), "Admitted")
        ),
        seconds=5,
        what="the Slurm job running and the workload waiting",
        describe_state=lambda: str(job_state(ns, slurm_job)),
    )
    wait_job(ns, slurm_job, {"COMPLETED"}, timeout=60)
    wait_workload(kube, ns, "waits", lambda w: has_condition(w, "Admitted"), timeout=90)
    assert job_state(ns, slurm_job)[0] == "COMPLETED"
    wait_for(
        kube,
        "batch/v1",
        "Job",
        "waits",
        lambda j: has_condition(j, "Complete"),
        namespace=ns,
        timeout=90,
    )
    wait_returned(kube, ns, uid, reserved)


def test_two_workloads_racing_for_one_block_get_disjoint_nodes_and_deactivation_returns_them(
    kube: Kube, bridge: Bridge
) -> None:
    ns = bridge.namespace
    for name in ("race-a", "race-b"):
        kube.create(gpu_job(name, nodes=2, seconds=600), namespace=ns)
    a, b = (
        wait_workload(kube, ns, name, lambda w: has_condition(w, "Admitted"), timeout=120)
        for name in ("race-a", "race-b")
    )
    nodes_a = leased_nodes(kube, a["metadata"]["uid"])
    nodes_b = leased_nodes(kube, b["metadata"]["uid"])
    assert len(nodes_a) == len(nodes_b) == 2
    assert not set(nodes_a) & set(nodes_b)
    assert set(nodes_a) | set(nodes_b) == set(LENDERS)
    # Deactivated: Kueue evicts it, and its nodes go back to Slurm; the other keeps its own.
    kube.patch(KUEUE, "Workload", a["metadata"]["name"], {"spec": {"active": False}}, namespace=ns)
    wait_returned(kube, ns, a["metadata"]["uid"], nodes_a)
    assert leased_nodes(kube, b["metadata"]["uid"]) == nodes_b
    for name in ("race-a", "race-b"):
        kube.delete("batch/v1", "Job", name, namespace=ns)
    wait_returned(kube, ns, b["metadata"]["uid"], nodes_b)


def test_killing_the_operator_between_steps_leaks_nothing(
    kube: Kube, bridge: Bridge, operator: OperatorProcess
) -> None:
    ns = bridge.namespace
    kube.create(gpu_job("crash", nodes=2, seconds=600), namespace=ns)
    # Killed right after the reservation: the restarted operator finishes the lend.
    uid = submitted_and_reserved(kube, ns, "crash")
    operator.kill()
    operator.start()
    wait_workload(kube, ns, "crash", lambda w: has_condition(w, "Admitted"), timeout=90)
    reserved = leased_nodes(kube, uid)
    # Killed while the nodes are lent; the Job (and its Workload) deleted while it is down:
    # the lease and the reservation are collected as leaks once it is back.
    operator.kill()
    kube.delete("batch/v1", "Job", "crash", namespace=ns)
    wait_for_list(
        kube,
        KUEUE,
        "Workload",
        lambda ws: not any(_owned_by(w, "crash") for w in ws),
        namespace=ns,
        timeout=60,
    )
    operator.start()
    wait_returned(kube, ns, uid, reserved)
    assert not [r for r in reservations(ns) if r.startswith("slurmkube-")]
    pods = kube.list("v1", "Pod", namespace=ns, label_selector="app.kubernetes.io/name=slurmd")
    assert sorted(p["spec"]["nodeName"] for p in pods) == LENDERS


def test_leases_left_when_the_queue_and_check_go_while_the_operator_is_down_are_collected(
    kube: Kube, bridge: Bridge, operator: OperatorProcess
) -> None:
    """Last in the module: it deletes the queue and the check. Kueue keeps an
    AdmissionCheck while a ClusterQueue uses it, and the bridge keeps a workload's
    nodes while its check exists; once all is gone, no check names the cluster and
    the lease is found through the NodeSet that selects the node."""
    ns = bridge.namespace
    kube.create(gpu_job("orphan", nodes=2, seconds=600), namespace=ns)
    admitted = wait_workload(kube, ns, "orphan", lambda w: has_condition(w, "Admitted"), timeout=90)
    uid = admitted["metadata"]["uid"]
    lent = leased_nodes(kube, uid)
    assert len(lent) == 2
    operator.kill()
    kube.delete("batch/v1", "Job", "orphan", namespace=ns)
    wait_for_list(
        kube,
        KUEUE,
        "Workload",
        lambda ws: not any(_owned_by(w, "orphan") for w in ws),
        namespace=ns,
        timeout=60,
    )
    for api, kind, name in cluster_scoped(ns):
        kube.delete(api, kind, name)
    wait_gone(kube, KUEUE, "AdmissionCheck", bridge.check, timeout=60)
    operator.start()
    wait_returned(kube, ns, uid, lent)
