"""Deleting a SlurmCluster under a running job: with the default deletionPolicy
Drain its nodes are drained, nothing new starts, the SlurmCluster stays (condition
Deleting, reason WaitingForJobs) until the job ends, then it goes."""

from __future__ import annotations

import time
from typing import Any

import pytest

from slurmkube_e2e.kube import Kube
from slurmkube_e2e.operator import OperatorProcess
from slurmkube_e2e.operator_cluster import API, docs, in_ctld, ready_cluster
from slurmkube_e2e.waiting import wait_for, wait_gone

pytestmark = pytest.mark.e2e

# Outlives the deletion's checks (the Deleting condition, a late job pending):
# seconds after the job starts, here and on a loaded machine.
JOB_SECONDS = 25


def deleting(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Deleting"), None)


def test_a_running_job_holds_the_deletion_until_it_ends(
    kube: Kube, operator: OperatorProcess, namespace: str
) -> None:
    for doc in docs(namespace, replicas=2):
        kube.apply(doc)
    ready_cluster(kube, namespace, timeout=240)
    job = in_ctld(
        namespace, "sbatch", "--parsable", "-N1", "--wrap", f"sleep {JOB_SECONDS}"
    ).strip()
    deadline = time.monotonic() + 60
    while in_ctld(namespace, "squeue", "-h", "-j", job, "-o", "%T").strip() != "RUNNING":
        assert time.monotonic() < deadline, f"job {job} did not start"
        time.sleep(1)

    kube.delete(API, "SlurmCluster", "local", namespace=namespace)
    held = wait_for(
        kube,
        API,
        "SlurmCluster",
        "local",
        lambda o: (deleting(o) or {}).get("reason") == "WaitingForJobs",
        namespace=namespace,
        timeout=30,
        what="waiting for its job",
    )
    assert "1 nodes still run jobs" in deleting(held)["message"]  # type: ignore[index]
    # Every node drained: a job submitted now stays pending.
    states = in_ctld(namespace, "sinfo", "-h", "-N", "-o", "%N %T").strip().splitlines()
    assert states and all("drain" in line for line in states), states
    late = in_ctld(namespace, "sbatch", "--parsable", "-N1", "--wrap", "true").strip()
    assert in_ctld(namespace, "squeue", "-h", "-j", late, "-o", "%T").strip() == "PENDING"

    # The job ends on its own; then the cluster goes.
    wait_gone(kube, API, "SlurmCluster", "local", namespace=namespace, timeout=JOB_SECONDS + 90)
    kube.delete(API, "NodeSet", "local", namespace=namespace)
