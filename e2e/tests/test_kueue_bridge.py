"""The Kueue bridge on real parts: Kueue admits a Job onto nodes the operator took from
Slurm (real slurmctld and slurmd pods on `LENDERS`) through a Slurm reservation, and
gives them back when the Job ends; busy nodes are waited for, never killed, or with
busyNodes Requeue lower-priority jobs are requeued (PENDING again, never failed); a
killed operator converges with nothing leaked.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from slurmkube.controllers.failpoints import ENV as FAILPOINT_ENV
from slurmkube.controllers.failpoints import EXIT_CODE as FAILPOINT_EXIT_CODE
from slurmkube.controllers.failpoints import PER_NODE, STEPS, Step, failpoint_value
from slurmkube_e2e.kube import Kube, Manifest
from slurmkube_e2e.lending import (
    KUEUE,
    LEASE,
    Bridge,
    check_entry,
    cluster_scoped,
    events_of,
    gpu_job,
    leased_nodes,
    lending_cluster,
    owned_by,
    reservations,
    slurm_states,
    started,
    wait_complete,
    wait_pods_started,
    wait_workload,
    workload_of,
)
from slurmkube_e2e.operator import OperatorProcess
from slurmkube_e2e.operator_cluster import API, in_ctld, job_state, slurm_node, wait_job
from slurmkube_e2e.waiting import has_condition, stays, wait_for, wait_for_list, wait_gone

pytestmark = pytest.mark.e2e

# One NVLink block: local-0..3, or the first four of eight real nodes; in name
# order, as leases and pods are compared.
LENDERS = sorted(slurm_node(i) for i in range(4))


@pytest.fixture(scope="module")
def bridge(kube: Kube, operator: OperatorProcess) -> Iterator[Bridge]:
    def running_again() -> None:  # a test that killed the operator may have failed
        if operator.proc is None or operator.proc.poll() is not None:
            operator.start()

    with lending_cluster(kube, "e2e-bridge", before_cleanup=running_again) as found:
        yield found


# --- helpers -----------------------------------------------------------------------------


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


def check_says(w: Manifest, check: str, text: str) -> bool:
    if not (w.get("status") or {}).get("admissionChecks"):
        return False
    return text in check_entry(w, check).get("message", "")


@contextmanager
def busy_nodes_policy(kube: Kube, bridge: Bridge, **policy: Any) -> Iterator[None]:
    """The module's check with another busyNodes policy, WaitForIdle again afterwards."""
    kube.patch(API, "SlurmReservationCheck", bridge.check, {"spec": {"busyNodes": policy}})
    try:
        yield
    finally:
        kube.patch(
            API,
            "SlurmReservationCheck",
            bridge.check,
            {
                "spec": {
                    "busyNodes": {
                        "policy": "WaitForIdle",
                        "graceSeconds": None,
                        "requeueBelowPriority": None,
                    }
                }
            },
        )


def sbatch_with_priority(namespace: str, nodes: list[str], priority: int, seconds: int) -> str:
    """A requeueable batch job on exactly `nodes`, running, with a fixed Slurm priority
    (an operator's `scontrol update Priority=`, which multifactor then leaves alone)."""
    job = in_ctld(
        namespace,
        "sbatch",
        "--parsable",
        "--requeue",
        f"-N{len(nodes)}",
        "-w",
        ",".join(nodes),
        "--wrap",
        f"sleep {seconds}",
    ).strip()
    wait_job(namespace, job, {"RUNNING"})
    in_ctld(namespace, "scontrol", "update", f"JobId={job}", f"Priority={priority}")
    return job


def restarts(namespace: str, job: str) -> int:
    out = in_ctld(namespace, "scontrol", "-o", "show", "job", job)
    found = re.search(r" Restarts=(\d+)", out)
    assert found, out
    return int(found.group(1))


def admitted_once_the_slurm_job_ends(
    kube: Kube, namespace: str, job: str, slurm_job: str
) -> Manifest:
    """The Slurm job keeps running and the Job's workload waits; once the Slurm job
    completes on its own (never killed), the workload is admitted."""
    stays(
        lambda: (
            job_state(namespace, slurm_job)[0] == "RUNNING"
            and not has_condition(workload_of(kube, namespace, job), "Admitted")
        ),
        seconds=5,
        what=f"Slurm job {slurm_job} running and the workload of {job} waiting",
        describe_state=lambda: str(job_state(namespace, slurm_job)),
    )
    wait_job(namespace, slurm_job, {"COMPLETED"}, timeout=60)
    return wait_workload(kube, namespace, job, lambda w: has_condition(w, "Admitted"), timeout=90)


def completed_and_returned(
    kube: Kube, namespace: str, job: str, uid: str, nodes: list[str]
) -> None:
    wait_complete(kube, namespace, job)
    wait_returned(kube, namespace, uid, nodes)


def check_message(kube: Kube, namespace: str, job: str, check: str) -> str:
    """Our check's message on the Job's Workload ("" until there is one)."""
    w = workload_of(kube, namespace, job)
    entries = ((w or {}).get("status") or {}).get("admissionChecks") or []
    return str(next((e.get("message", "") for e in entries if e["name"] == check), ""))


# --- tests -------------------------------------------------------------------------------


def test_job_is_admitted_after_a_reservation_on_two_nodes_of_one_block_and_returned(
    kube: Kube, bridge: Bridge
) -> None:
    ns = bridge.namespace
    kube.create(gpu_job("two", pods=2, seconds=20), namespace=ns)
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

    pods = wait_pods_started(kube, ns, "two", 2)
    assert sorted(p["spec"]["nodeName"] for p in pods) == reserved
    assert job_state(ns, blocked)[0] == "PENDING"

    wait_complete(kube, ns, "two")
    assert job_state(ns, blocked)[0] in ("PENDING", "RUNNING", "COMPLETED")
    wait_returned(kube, ns, uid, reserved)
    in_ctld(ns, "scancel", blocked)


def test_gpu_pods_are_packed_onto_as_few_lent_nodes_as_hold_them(
    kube: Kube, bridge: Bridge
) -> None:
    """4 pods x 2 GPUs on 4-GPU nodes borrow 2 nodes, not 4, and run two to a node."""
    ns = bridge.namespace
    kube.create(gpu_job("packed", pods=4, seconds=10, gpus=2), namespace=ns)
    uid = submitted_and_reserved(kube, ns, "packed")
    admitted = wait_workload(kube, ns, "packed", lambda w: has_condition(w, "Admitted"), timeout=90)
    lent = leased_nodes(kube, uid)
    assert len(lent) == 2 and set(lent) <= set(LENDERS)
    assert lent == sorted(reservations(ns)[f"slurmkube-{uid}"])
    assert check_entry(admitted, bridge.check)["state"] == "Ready"
    pods = wait_pods_started(kube, ns, "packed", 4)
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(lent * 2)
    wait_complete(kube, ns, "packed")
    wait_returned(kube, ns, uid, lent)


def test_busy_nodes_are_waited_for_and_the_slurm_job_is_never_killed(
    kube: Kube, bridge: Bridge
) -> None:
    ns = bridge.namespace
    busy = ",".join(LENDERS[:3])
    # Runs past the workload's reservation, made within seconds of its creation.
    slurm_job = in_ctld(ns, "sbatch", "--parsable", "-N3", "-w", busy, "--wrap", "sleep 18").strip()
    wait_job(ns, slurm_job, {"RUNNING"})
    kube.create(gpu_job("waits", pods=2, seconds=5), namespace=ns)
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
    admitted_once_the_slurm_job_ends(kube, ns, "waits", slurm_job)
    assert job_state(ns, slurm_job)[0] == "COMPLETED"
    completed_and_returned(kube, ns, "waits", uid, reserved)


# In `make e2e-extended` for CI's warm budget (its longest e2e tests).
@pytest.mark.extended
def test_requeue_frees_the_nodes_of_a_lower_priority_job_and_leaves_a_higher_one_running(
    kube: Kube, bridge: Bridge
) -> None:
    """Every lendable node is busy: the workload gets the nodes of the job below
    requeueBelowPriority, which is requeued after the grace period (PENDING, Restarts
    counted, never failed) and runs again once the nodes are back; the job above it
    keeps running."""
    ns = bridge.namespace
    low = sbatch_with_priority(ns, LENDERS[:2], priority=100, seconds=600)
    high = sbatch_with_priority(ns, LENDERS[2:], priority=5000, seconds=600)
    with busy_nodes_policy(
        kube, bridge, policy="Requeue", graceSeconds=5, requeueBelowPriority=1000
    ):
        kube.create(gpu_job("requeues", pods=2, seconds=5), namespace=ns)
        admitted = wait_workload(
            kube, ns, "requeues", lambda w: has_condition(w, "Admitted"), timeout=120
        )
    uid = admitted["metadata"]["uid"]
    assert leased_nodes(kube, uid) == LENDERS[:2]
    # Requeued, not killed: PENDING again (after the moment it is COMPLETING), counted.
    wait_job(ns, low, {"PENDING"}, timeout=30)
    assert restarts(ns, low) == 1
    assert job_state(ns, high)[0] == "RUNNING" and restarts(ns, high) == 0
    assert events_of(kube, ns, admitted, "SlurmJobRequeued") == [
        f"requeued job {low} (priority 100 < 1000) on node {', '.join(LENDERS[:2])}"
    ]
    completed_and_returned(kube, ns, "requeues", uid, LENDERS[:2])
    # Requeued, not failed: it starts again on its nodes once they are back (after the
    # BeginTime Slurm sets on a requeue: the credential lifetime, 2 minutes).
    wait_job(ns, low, {"RUNNING"}, timeout=240)
    assert restarts(ns, low) == 1
    in_ctld(ns, "scancel", low, high)
    wait_job(ns, low, {"CANCELLED"}, timeout=60)
    wait_job(ns, high, {"CANCELLED"}, timeout=60)


def test_requeue_waits_for_a_job_at_or_above_the_priority_and_never_requeues_it(
    kube: Kube, bridge: Bridge
) -> None:
    ns = bridge.namespace
    # Runs past the check's "is waited for", written within seconds of the workload.
    protected = sbatch_with_priority(ns, LENDERS, priority=5000, seconds=20)
    with busy_nodes_policy(
        kube, bridge, policy="Requeue", graceSeconds=0, requeueBelowPriority=1000
    ):
        kube.create(gpu_job("protected", pods=2, seconds=5), namespace=ns)
        waiting = wait_workload(
            kube,
            ns,
            "protected",
            lambda w: check_says(w, bridge.check, "is waited for"),
            timeout=60,
        )
        assert (
            f"job {protected} (priority 5000 >= 1000)"
            in check_entry(waiting, bridge.check)["message"]
        )
        admitted = admitted_once_the_slurm_job_ends(kube, ns, "protected", protected)
    assert restarts(ns, protected) == 0
    assert events_of(kube, ns, admitted, "SlurmJobRequeued") == []
    uid = admitted["metadata"]["uid"]
    completed_and_returned(kube, ns, "protected", uid, leased_nodes(kube, uid))


def test_two_workloads_racing_for_one_block_get_disjoint_nodes_and_deactivation_returns_them(
    kube: Kube, bridge: Bridge
) -> None:
    ns = bridge.namespace
    for name in ("race-a", "race-b"):
        kube.create(gpu_job(name, pods=2, seconds=600), namespace=ns)
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


# Every step of a lend and its return, each node-wise step also between two nodes
# (hit 1) and after the last of the two (hit 2): the list comes from the fail point
# module, so a new step is tested here without an edit. The second hits are out of
# `make test` for CI's time (`make e2e-extended` and `make e2e-real8` run them).
CRASH_POINTS = [
    pytest.param(step, hit, id=f"{step}-{hit}", marks=[pytest.mark.extended] if hit > 1 else [])
    for step in STEPS
    for hit in ((1, 2) if step in PER_NODE else (1,))
]


@dataclass
class ArmedOperator:
    """The operator started with a fail point armed. Every wait also watches the
    process: when it exits at the fail point it is restarted unarmed, as a Deployment
    would restart its container, and the wait goes on."""

    operator: OperatorProcess
    exits: list[int]

    def until(self, done: Callable[[], bool], what: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            code = self.operator.exit_code()
            if code is not None:
                self.exits.append(code)
                self.operator.start()
            elif time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout:.0f}s waiting for {what} (operator exits: "
                    f"{self.exits})\n{self.operator.tail()}"
                )
            time.sleep(0.5)


@contextlib.contextmanager
def armed_operator(operator: OperatorProcess, failpoint: str) -> Iterator[ArmedOperator]:
    """The operator restarted with `failpoint` armed; unarmed again afterwards even when
    the test failed before reaching it, so the tests after it run a plain operator."""
    operator.kill()
    operator.start({FAILPOINT_ENV: failpoint})
    armed = ArmedOperator(operator, [])
    try:
        yield armed
    finally:
        if not armed.exits:
            operator.kill()
            operator.start()


def converged(kube: Kube, namespace: str) -> bool:
    """Nothing of any lend left: no reservation of ours, no lease label, a slurmd pod on
    every lender and Slurm running each of them idle."""
    if any(r.startswith("slurmkube-") for r in reservations(namespace)):
        return False
    if kube.list("v1", "Node", label_selector=LEASE):
        return False
    pods = kube.list(
        "v1", "Pod", namespace=namespace, label_selector="app.kubernetes.io/name=slurmd"
    )
    if sorted(p["spec"].get("nodeName", "") for p in pods) != LENDERS:
        return False
    return set(slurm_states(namespace, LENDERS).values()) == {"idle"}


def pods_on(kube: Kube, namespace: str, job: str, nodes: list[str]) -> bool:
    pods = kube.list("v1", "Pod", namespace=namespace, label_selector=f"job-name={job}")
    return (
        started(pods, len(nodes)) and sorted(p["spec"].get("nodeName", "") for p in pods) == nodes
    )


@pytest.mark.parametrize(("step", "hit"), CRASH_POINTS)
def test_killing_the_operator_between_steps_leaks_nothing(
    kube: Kube, bridge: Bridge, operator: OperatorProcess, step: Step, hit: int
) -> None:
    """The operator exits right after `step` (its `hit`-th time); restarted, it finishes
    the lend, and the return once the Job is deleted, with nothing leaked. A Slurm job on
    three of the four lenders makes every lend pass through every step (WaitForIdle)."""
    ns = bridge.namespace
    job = f"crash-{step}-{hit}"
    with armed_operator(operator, failpoint_value(step, hit)) as armed:
        busy = ",".join(LENDERS[:3])
        slurm_job = in_ctld(
            ns, "sbatch", "--parsable", "-N3", "-w", busy, "--wrap", "sleep 300"
        ).strip()
        wait_job(ns, slurm_job, {"RUNNING"})
        kube.create(gpu_job(job, pods=2, seconds=600), namespace=ns)

        armed.until(
            lambda: "waits for Slurm jobs" in check_message(kube, ns, job, bridge.check),
            "the lend waiting for the Slurm job",
        )
        in_ctld(ns, "scancel", slurm_job)
        armed.until(
            lambda: has_condition(workload_of(kube, ns, job), "Admitted"), "the workload admitted"
        )
        uid = wait_workload(kube, ns, job, lambda w: True, timeout=10)["metadata"]["uid"]
        lent = leased_nodes(kube, uid)
        assert len(lent) == 2 and LENDERS[3] in lent
        assert sorted(reservations(ns)[f"slurmkube-{uid}"]) == lent
        armed.until(lambda: pods_on(kube, ns, job, lent), f"the Job's pods running on {lent}")

        kube.delete("batch/v1", "Job", job, namespace=ns)
        armed.until(
            lambda: bool(armed.exits) and converged(kube, ns),
            "the nodes back in Slurm, nothing leaked",
            timeout=150,
        )
        assert armed.exits == [FAILPOINT_EXIT_CODE], f"fail point {step}:{hit} not reached as such"


def test_a_workload_deleted_while_the_operator_is_down_is_collected(
    kube: Kube, bridge: Bridge, operator: OperatorProcess
) -> None:
    """Killed while the nodes are lent; the Job (and its Workload) deleted while it is down:
    the lease and the reservation are collected as leaks once it is back."""
    ns = bridge.namespace
    kube.create(gpu_job("crash", pods=2, seconds=600), namespace=ns)
    admitted = wait_workload(kube, ns, "crash", lambda w: has_condition(w, "Admitted"), timeout=90)
    uid = admitted["metadata"]["uid"]
    reserved = leased_nodes(kube, uid)
    operator.kill()
    kube.delete("batch/v1", "Job", "crash", namespace=ns)
    wait_for_list(
        kube,
        KUEUE,
        "Workload",
        lambda ws: not any(owned_by(w, "crash") for w in ws),
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
    kube.create(gpu_job("orphan", pods=2, seconds=600), namespace=ns)
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
        lambda ws: not any(owned_by(w, "orphan") for w in ws),
        namespace=ns,
        timeout=60,
    )
    for api, kind, name in cluster_scoped(ns):
        kube.delete(api, kind, name)
    wait_gone(kube, KUEUE, "AdmissionCheck", bridge.check, timeout=60)
    operator.start()
    wait_returned(kube, ns, uid, lent)
