"""A lent node that turns sick, on real slurmd pods and real Kueue (issue 21): a
`drain` rule lets the workload run on and tells it why, and the node goes back
to Slurm drained when the workload ends, never lent again while sick; a `fatal`
rule answers the check Retry, so Kueue evicts the workload and requeues it onto
healthy nodes, and the sick node is returned drained at once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from slurmkube_e2e.health import (
    SLOW,
    flags,
    health_spec,
    set_condition,
    slurm_node,
    tainted,
    untaint,
    wait_slurm_node,
)
from slurmkube_e2e.kube import Kube, Manifest
from slurmkube_e2e.lending import (
    KUEUE,
    Bridge,
    check_entry,
    events_of,
    gpu_job,
    leased_nodes,
    lending_cluster,
    reservations,
    wait_complete,
    wait_pods_started,
    wait_workload,
    workload_of,
)
from slurmkube_e2e.operator import OperatorProcess
from slurmkube_e2e.operator_cluster import slurm_node as sample_node
from slurmkube_e2e.waiting import eventually, has_condition, stays, wait_for, wait_for_list

pytestmark = [pytest.mark.e2e, pytest.mark.extended]
FATAL = "E2eLentXidError"
DRAIN = "E2eLentNvlinkDown"
HEALTH = health_spec(FATAL, DRAIN)
# One NVLink block: local-0..3, or the first four of eight real nodes; in name
# order, as leases and pods are compared.
LENDERS = sorted(sample_node(i) for i in range(4))


@pytest.fixture(scope="module")
def bridge(kube: Kube, operator: OperatorProcess) -> Iterator[Bridge]:
    def healthy_again() -> None:
        for node in LENDERS:
            set_condition(kube, node, FATAL, "False")
            set_condition(kube, node, DRAIN, "False")

    try:
        with lending_cluster(
            kube, "e2e-lent-health", health=HEALTH, before_cleanup=healthy_again
        ) as found:
            yield found
    finally:
        for node in LENDERS:
            untaint(kube, node)


def admitted_on(kube: Kube, bridge: Bridge, job_doc: Manifest) -> tuple[str, list[str]]:
    """The Job created; its workload UID and its lent nodes, once its pods run there."""
    kube.create(job_doc, namespace=bridge.namespace)
    job, pods = job_doc["metadata"]["name"], job_doc["spec"]["parallelism"]
    w = wait_workload(kube, bridge.namespace, job, lambda w: has_condition(w, "Admitted"), SLOW)
    uid = str(w["metadata"]["uid"])
    lent = leased_nodes(kube, uid)
    assert len(lent) == pods
    wait_pods_started(kube, bridge.namespace, job, pods)
    return uid, lent


def told(kube: Kube, bridge: Bridge, job: str, text: str) -> Manifest:
    def says(w: Manifest) -> bool:
        entries = (w.get("status") or {}).get("admissionChecks") or []
        return any(text in e.get("message", "") for e in entries if e["name"] == bridge.check)

    return wait_workload(kube, bridge.namespace, job, says, SLOW)


def health_drained(namespace: str, node: str, severity: str, condition: str) -> None:
    found = wait_slurm_node(
        namespace, node, lambda n: n.get("Reason", "").startswith("slurmkube:health:")
    )
    assert "DRAIN" in flags(found)
    assert found["Reason"].startswith(f"slurmkube:health: {severity} condition {condition} True")


def test_a_drain_fault_lets_the_workload_run_on_and_returns_the_node_drained(
    kube: Kube, bridge: Bridge
) -> None:
    ns = bridge.namespace
    uid, lent = admitted_on(kube, bridge, gpu_job("runs-on", pods=2, seconds=45))
    sick = lent[1]
    set_condition(kube, sick, DRAIN, "True")

    w = told(kube, bridge, "runs-on", f"{sick} (drain condition {DRAIN} True)")
    entry = check_entry(w, bridge.check)
    assert entry["state"] == "Ready" and "the workload runs on" in entry["message"]
    assert any(sick in m for m in events_of(kube, ns, w, "LentNodeSick"))
    health_drained(ns, sick, "drain", DRAIN)
    wait_for(kube, "v1", "Node", sick, tainted, timeout=SLOW)
    # Not evicted: the same pods keep running on the lent nodes.
    stays(
        lambda: (
            not has_condition(workload_of(kube, ns, "runs-on"), "Evicted")
            and leased_nodes(kube, uid) == lent
        ),
        seconds=5,
        what="the workload admitted on its lent nodes",
        describe_state=lambda: str(leased_nodes(kube, uid)),
    )

    wait_complete(kube, ns, "runs-on")
    wait_for_list(
        kube,
        "v1",
        "Node",
        lambda nodes: not nodes,
        label_selector=f"slurmkube.io/lease={uid}",
        timeout=SLOW,
        what="lease labels removed",
    )
    wait_for(
        kube,
        KUEUE,
        "Workload",
        w["metadata"]["name"],
        lambda _: f"slurmkube-{uid}" not in reservations(ns),
        namespace=ns,
        timeout=SLOW,
        what="the workload's reservation deleted",
    )
    # Back in Slurm, drained by health: the healthy one is idle again.
    wait_slurm_node(ns, lent[0], lambda n: "IDLE" in flags(n) and "DRAIN" not in flags(n))
    assert slurm_node(ns, sick)["Reason"].startswith("slurmkube:health: drain")

    # The next workload that fits in the healthy three never gets the sick node.
    _, lent_next = admitted_on(kube, bridge, gpu_job("next", pods=3, seconds=5))
    assert sick not in lent_next and set(lent_next) <= set(LENDERS)
    wait_complete(kube, ns, "next")

    # Cleared: the slurmd pod is back on the tainted node, so the check runs and passes.
    set_condition(kube, sick, DRAIN, "False")
    wait_slurm_node(ns, sick, lambda n: "IDLE" in flags(n) and not {"DRAIN"} & flags(n))
    wait_for(kube, "v1", "Node", sick, lambda n: not tainted(n), timeout=SLOW)


def test_a_fatal_fault_evicts_and_requeues_the_workload_onto_healthy_nodes(
    kube: Kube, bridge: Bridge
) -> None:
    ns = bridge.namespace
    uid, lent = admitted_on(kube, bridge, gpu_job("evicted", pods=2, seconds=600))
    sick = lent[0]
    set_condition(kube, sick, FATAL, "True")

    # Told why (the Retry answer's Warning event), then evicted by Kueue: its pods go.
    workload = workload_of(kube, ns, "evicted")
    assert workload is not None
    eventually(
        "a CheckRetry event naming the sick node and cause",
        lambda: events_of(kube, ns, workload, "CheckRetry"),
        lambda found: any(f"{sick} (fatal condition {FATAL} True)" in m for m in found),
        SLOW,
    )
    eventually(
        "the Job's pods gone from the sick node",
        lambda: kube.list("v1", "Pod", namespace=ns, label_selector="job-name=evicted"),
        lambda pods: all(p["spec"].get("nodeName") != sick for p in pods),
        SLOW,
    )
    health_drained(ns, sick, "fatal", FATAL)
    # Kueue requeues it after requeueAfterSeconds; the bridge lends it healthy nodes.
    again = wait_workload(
        kube,
        ns,
        "evicted",
        lambda w: has_condition(w, "Admitted") and sick not in leased_nodes(kube, uid),
        SLOW,
    )
    assert check_entry(again, bridge.check)["state"] == "Ready"
    relent = leased_nodes(kube, uid)
    assert len(relent) == 2 and sick not in relent
    assert sorted(reservations(ns)[f"slurmkube-{uid}"]) == relent
    assert "DRAIN" in flags(slurm_node(ns, sick))
    kube.delete("batch/v1", "Job", "evicted", namespace=ns)
