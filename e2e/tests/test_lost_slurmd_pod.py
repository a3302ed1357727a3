"""A busy slurmd pod lost other than through a guarded delete (here a plain
delete, no admission guard bound in this namespace: what a failed node or an
admin's force leaves). The job's processes died with the pod; the operator sets
the node DOWN (`slurmkube: slurmd pod lost ...`) before it makes the pod again,
so slurmctld ends the job at once (NODE_FAIL, the job asked not to be
requeued) instead of keeping a ghost RUNNING until its time limit; the new
slurmd's registration returns the node to service (ReturnToService=2)."""

from __future__ import annotations

import re
import time

import pytest

from slurmkube_e2e.kube import Kube
from slurmkube_e2e.operator_cluster import (
    docs,
    in_ctld,
    job_state,
    ready_cluster,
    slurm_node,
    wait_job,
)
from slurmkube_e2e.waiting import wait_for

pytestmark = pytest.mark.e2e
NODE = slurm_node(0)
POD = f"local-{NODE}"


def _in_service(node: str) -> bool:
    """IDLE, neither DOWN nor drained (CLOUD is a flag of every node of a NodeSet;
    Slurm keeps the reason of a node ReturnToService brought back)."""
    state = re.search(r" State=(\S+)", node)
    flags = set(state.group(1).split("+")) if state else set()
    return "IDLE" in flags and not flags & {"DOWN", "DRAIN", "NOT_RESPONDING"}


def _node(namespace: str) -> str:
    return in_ctld(namespace, "scontrol", "-o", "show", "node", NODE)


def test_a_busy_slurmd_pod_lost_ends_its_job_at_once_and_the_node_comes_back(
    kube: Kube, operator: None, namespace: str
) -> None:
    for doc in docs(namespace):
        kube.apply(doc)
    ready_cluster(kube, namespace)
    job = in_ctld(
        namespace, "sbatch", "--parsable", "--no-requeue", "-w", NODE, "--wrap", "sleep 600"
    ).strip()
    wait_job(namespace, job, {"RUNNING"})
    old = kube.get("v1", "Pod", POD, namespace=namespace)
    assert old is not None
    kube.delete("v1", "Pod", POD, namespace=namespace)
    deleted = time.monotonic()
    state = "RUNNING"
    while state == "RUNNING":
        assert time.monotonic() - deleted < 60, f"job {job} still RUNNING 60 s after its pod went"
        time.sleep(0.5)
        state = job_state(namespace, job)[0]
    ended = time.monotonic() - deleted
    print(f"job left RUNNING {ended:.1f}s after its slurmd pod was deleted: {state}")
    wait_job(namespace, job, {"NODE_FAIL"}, timeout=60)
    # The pod made again; its slurmd's registration brings the node back, reason cleared.
    wait_for(
        kube,
        "v1",
        "Pod",
        POD,
        lambda p: p is not None and p["metadata"]["uid"] != old["metadata"]["uid"],
        namespace=namespace,
        timeout=120,
    )
    deadline = time.monotonic() + 120
    while not _in_service(node := _node(namespace)):
        assert time.monotonic() < deadline, f"{NODE} not back in service: {node}"
        time.sleep(1)
    print(f"{NODE} back in service {time.monotonic() - deleted:.1f}s after its pod went")
    events = kube.list("v1", "Event", namespace=namespace)
    assert any(e["reason"] == "SlurmdLost" and NODE in e["message"] for e in events)
