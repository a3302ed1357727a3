"""Node health on real slurmd (the local runtime's or the real nodes'): a Node
condition a `spec.health` rule reads drains the node in Slurm with an owned reason
(requeueing its job when the rule is fatal, letting it finish when not) and taints
it; once the condition clears, the active check runs on the node inside its own
reservation before the node is resumed, and an admin's drain elsewhere is never
touched.

Conditions are set the way a node monitor sets them: a strategic merge on the
Node's status, so the runtime agent's (or kubelet's) own conditions (Ready) stay.
"""

from __future__ import annotations

import re
import secrets
import time
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
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.namespaces import delete_namespace
from slurmkube_e2e.operator_cluster import API, docs, in_ctld, job_state, ready_cluster, wait_job
from slurmkube_e2e.operator_cluster import slurm_node as sample_node
from slurmkube_e2e.waiting import wait_for

pytestmark = pytest.mark.e2e
FATAL = "E2eGpuXidError"
DRAIN = "E2eNvlinkDown"
HEALTH = health_spec(FATAL, DRAIN)
# The sample's nodes 0..3, which run slurmd: local-0..3 on the runtime, the first
# NVLink domain's real nodes with SLURMKUBE_E2E_NODES=real.
NODE = [sample_node(i) for i in range(4)]


@pytest.fixture(scope="module")
def cluster(kube: Kube, operator: None) -> Iterator[str]:
    namespace = f"e2e-node-health-{secrets.token_hex(2)}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_for(kube, "v1", "ServiceAccount", "default", lambda _: True, namespace=namespace)
    nodes = (NODE[1], NODE[2], NODE[3])
    try:
        cluster_doc, node_set = docs(namespace)
        cluster_doc["spec"]["health"] = HEALTH
        for doc in (cluster_doc, node_set):
            kube.apply(doc)
        ready_cluster(kube, namespace)
        yield namespace
    finally:
        for node in nodes:
            set_condition(kube, node, FATAL, "False")
            set_condition(kube, node, DRAIN, "False")
        delete_namespace(kube, namespace)
        for node in nodes:
            untaint(kube, node)


def sbatch(namespace: str, *argv: str) -> str:
    return in_ctld(namespace, "sbatch", "--parsable", "-N1", *argv).strip()


def job_field(namespace: str, job: str, key: str) -> str:
    found = re.search(rf"\b{key}=(\S*)", in_ctld(namespace, "scontrol", "-o", "show", "job", job))
    return found.group(1) if found else ""


def test_fatal_condition_drains_the_node_in_slurm_and_requeues_its_job(
    kube: Kube, cluster: str
) -> None:
    job = sbatch(cluster, "-w", NODE[1], "--requeue", "--wrap", "sleep 600")
    wait_job(cluster, job, {"RUNNING"}, timeout=SLOW)
    set_condition(kube, NODE[1], FATAL, "True")
    node = wait_slurm_node(cluster, NODE[1], lambda n: "DRAIN" in flags(n))
    assert node["Reason"].startswith(f"slurmkube:health: fatal condition {FATAL} True")
    # Requeued: the same job, pending again, and pinned to a drained node it stays so.
    deadline = time.monotonic() + SLOW
    while job_field(cluster, job, "Restarts") in ("", "0") and time.monotonic() < deadline:
        time.sleep(1)
    assert job_field(cluster, job, "Restarts") != "0"
    # The requeue passes through COMPLETING while the step is killed (slower on a
    # real node's cgroups under load).
    while job_state(cluster, job)[0] == "COMPLETING" and time.monotonic() < deadline:
        time.sleep(1)
    assert job_state(cluster, job)[0] in {"PENDING", "REQUEUED", "REQUEUE_HOLD"}
    wait_for(kube, "v1", "Node", NODE[1], tainted, timeout=SLOW)
    wait_for(
        kube,
        API,
        "SlurmCluster",
        "local",
        lambda o: any(
            n["name"] == NODE[1] and n["verdict"] == "sick"
            for n in ((o.get("status") or {}).get("health") or {}).get("nodes") or []
        ),
        namespace=cluster,
        timeout=SLOW,
    )
    in_ctld(cluster, "scancel", job)


def test_drain_rule_lets_the_running_job_finish_and_starts_no_new_one(
    kube: Kube, cluster: str
) -> None:
    # The rule drains within a second or two of the condition: 15 s still runs past it.
    job = sbatch(cluster, "-w", NODE[2], "--wrap", "sleep 15")
    wait_job(cluster, job, {"RUNNING"}, timeout=SLOW)
    set_condition(kube, NODE[2], DRAIN, "True")
    node = wait_slurm_node(cluster, NODE[2], lambda n: "DRAIN" in flags(n))
    assert node["Reason"].startswith(f"slurmkube:health: drain condition {DRAIN} True")
    wait_job(cluster, job, {"COMPLETED"}, timeout=SLOW)
    assert job_field(cluster, job, "Restarts") == "0"
    late = sbatch(cluster, "-w", NODE[2], "--wrap", "true")
    time.sleep(5)
    assert job_state(cluster, late)[0] == "PENDING"
    in_ctld(cluster, "scancel", late)


def test_cleared_condition_runs_the_check_in_its_reservation_then_resumes(
    kube: Kube, cluster: str
) -> None:
    in_ctld(cluster, "scontrol", "update", f"NodeName={NODE[0]}", "State=DRAIN", "Reason=admin RMA")
    set_condition(kube, NODE[3], FATAL, "True")
    wait_slurm_node(cluster, NODE[3], lambda n: "DRAIN" in flags(n))
    wait_for(kube, "v1", "Node", NODE[3], tainted, timeout=SLOW)
    set_condition(kube, NODE[3], FATAL, "False")
    # The check job ran on node 3 and passed: it fails outside its reservation
    # (SLURM_JOB_RESERVATION), which Slurm clears from the job once deleted.
    name = f"JobName=slurmkube-check-{NODE[3]} "
    completed = ""
    deadline = time.monotonic() + SLOW
    while not completed and time.monotonic() < deadline:
        jobs = in_ctld(cluster, "scontrol", "-o", "show", "job").splitlines()
        completed = next((j for j in jobs if name in j and "JobState=COMPLETED" in j), "")
        time.sleep(1)
    assert completed, f"no completed check job for {NODE[3]}"
    assert f" NodeList={NODE[3]} " in completed
    node = wait_slurm_node(cluster, NODE[3], lambda n: not {"DRAIN", "RESERVED"} & flags(n))
    assert "IDLE" in flags(node)
    assert not node.get("Reason")
    wait_for(kube, "v1", "Node", NODE[3], lambda n: not tainted(n), timeout=SLOW)
    # The admin's drain is theirs: never resumed, its reason as written.
    admin = slurm_node(cluster, NODE[0])
    assert "DRAIN" in flags(admin)
    assert admin["Reason"].startswith("admin RMA")
    in_ctld(cluster, "scontrol", "update", f"NodeName={NODE[0]}", "State=RESUME")


def test_a_node_failing_twice_stays_out_until_an_admin_resumes_it(kube: Kube, cluster: str) -> None:
    """failuresBeforeHold (2) within the window: sick, checked and back; sick again ->
    held with its own reason, which health never resumes."""
    set_condition(kube, NODE[0], DRAIN, "True")
    wait_slurm_node(cluster, NODE[0], lambda n: "DRAIN" in flags(n))
    set_condition(kube, NODE[0], DRAIN, "False")
    wait_slurm_node(cluster, NODE[0], lambda n: not {"DRAIN", "RESERVED"} & flags(n))
    set_condition(kube, NODE[0], DRAIN, "True")
    held = wait_slurm_node(
        cluster, NODE[0], lambda n: n.get("Reason", "").startswith("slurmkube:health: held")
    )
    assert "DRAIN" in flags(held)
    set_condition(kube, NODE[0], DRAIN, "False")
    time.sleep(20)  # a check would have run and passed well within this
    still = slurm_node(cluster, NODE[0])
    assert "DRAIN" in flags(still)
    assert still["Reason"].startswith("slurmkube:health: held")
    in_ctld(cluster, "scontrol", "update", f"NodeName={NODE[0]}", "State=RESUME")
