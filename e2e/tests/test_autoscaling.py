"""Autoscaling from Slurm's demand, with the real daemons on eight nodes.

A NodeSet of eight nodes (two NVLink blocks of four: the local runtime's, or
eight real kubelets with `make e2e-real8`; `slurm_node` names them) starts at
zero slurmd pods. Slurm's power saving picks the nodes for each job; the
operator creates their pods, and removes them once Slurm powers idle nodes
down. A node Slurm may not have (cordoned; lent to Kueue goes the same way) is
never resumed, a burst stays within maxNodes and resumes only the nodes its
jobs fill (sized from the CPUs Slurm counts per node: 16 on the runtime, the
host's on a real node), and a resume whose pod cannot start (a pod holds all
of the node's GPUs, so the scheduler never binds the slurmd pod) ends with the
node DOWN, a Warning event and the job requeued. Short power-saving times keep
the module near three minutes.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes.dynamic.exceptions import DynamicApiError

from slurmkube.slurm.hostlist import expand
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.namespaces import delete_namespace
from slurmkube_e2e.operator_cluster import (
    API,
    POD_IMAGE,
    TOLERATE,
    autoscaled_docs,
    in_ctld,
    job_state,
    ready_cluster,
    sample_nodes,
    wait_job,
)
from slurmkube_e2e.waiting import wait_for, wait_for_list

pytestmark = pytest.mark.e2e

NODE = sample_nodes()
if len(NODE) != 8:
    pytest.skip(
        f"needs two NVLink blocks of four nodes, found {len(NODE)}: make e2e-real8",
        allow_module_level=True,
    )
SECOND_BLOCK = set(NODE[4:])
# A node Slurm may not have: cordoned here. A node lent to Kueue takes the same
# path (observe's `unavailable`), but a lease label without a live Workload is
# collected by the Kueue bridge at once, so the test cannot fake one.
LENT = NODE[1]
BLOCKED = NODE[3]
SLURMD = "app.kubernetes.io/name=slurmd"


def wait_autoscaling(
    kube: Kube, namespace: str, check: Callable[[dict[str, Any]], bool], timeout: float
) -> None:
    """Until the NodeSet's status.autoscaling passes `check`."""
    wait_for(
        kube,
        API,
        "NodeSet",
        "local",
        lambda o: check((o.get("status") or {}).get("autoscaling") or {}),
        namespace=namespace,
        timeout=timeout,
    )


def wait_slurmd_pods_gone(kube: Kube, namespace: str, selector: str, timeout: float) -> None:
    wait_for_list(
        kube, "v1", "Pod", lambda pods: not pods, namespace=namespace,
        label_selector=selector, timeout=timeout,
    )  # fmt: skip


def slurmd_nodes(kube: Kube, namespace: str) -> set[str]:
    pods = kube.list("v1", "Pod", namespace=namespace, label_selector=SLURMD)
    return {p["metadata"]["labels"]["slurmkube.io/node"] for p in pods}


def sinfo(namespace: str) -> dict[str, tuple[str, str]]:
    """node -> (state, reason), e.g. ("idle~", "none")."""
    out = in_ctld(namespace, "sinfo", "-h", "-N", "-o", "%N|%T|%E")
    rows = [line.split("|") for line in out.splitlines() if line.strip()]
    return {name: (state, reason) for name, state, reason in rows}


def cpus_per_node(namespace: str) -> int:
    """The fewest CPUs Slurm counts on one node (sinfo's %c): a runtime node's 16, a
    real node's allocatable CPUs."""
    out = in_ctld(namespace, "sinfo", "-h", "-N", "-o", "%c")
    return min(int(line) for line in out.split())


def powered(namespace: str) -> set[str]:
    """Nodes Slurm has powered up or powering up (sinfo's `~` marks powered down)."""
    return {n for n, (state, _) in sinfo(namespace).items() if not state.endswith("~")}


def states(namespace: str, jobs: list[str]) -> dict[str, tuple[str, str]]:
    """job -> (state, nodes), finished jobs included (they stay listed for MinJobAge)."""
    out = in_ctld(namespace, "squeue", "-h", "-t", "all", "-j", ",".join(jobs), "-o", "%i|%T|%N")
    rows = [line.split("|") for line in out.splitlines() if line.strip()]
    return {job: (state, nodes) for job, state, nodes in rows}


def restarts(namespace: str) -> dict[str, int]:
    """job -> how often Slurm requeued it (`scontrol show job` keeps jobs for MinJobAge)."""
    out = in_ctld(namespace, "scontrol", "-o", "show", "job")
    return {
        m.group(1): int(m.group(2)) for m in re.finditer(r"JobId=(\d+) .*? Restarts=(\d+)", out)
    }


def cordon(kube: Kube, name: str, on: bool) -> None:
    kube.patch("v1", "Node", name, {"spec": {"unschedulable": on}})


def gpu_hog(namespace: str, node: str) -> dict[str, Any]:
    """A pod holding all of a node's GPUs: a slurmd pod there can never be scheduled."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gpu-hog", "namespace": namespace},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": TOLERATE,
            "containers": [
                {
                    "name": "hog",
                    "image": POD_IMAGE,
                    "command": ["sleep", "600"],
                    "resources": {"limits": {"nvidia.com/gpu": "4"}},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


@pytest.fixture(scope="module")
def slurm(kube: Kube, operator: None) -> Iterator[str]:
    namespace = f"e2e-autoscaling-{secrets.token_hex(2)}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_for(kube, "v1", "ServiceAccount", "default", lambda _: True, namespace=namespace)
    cordon(kube, LENT, True)
    try:
        for doc in autoscaled_docs(namespace):
            kube.apply(doc)
        ready_cluster(kube, namespace)
        yield namespace
    finally:
        cordon(kube, LENT, False)
        delete_namespace(kube, namespace)


def test_cluster_starts_at_zero_with_every_node_powered_down(kube: Kube, slurm: str) -> None:
    assert slurmd_nodes(kube, slurm) == set()
    states = sinfo(slurm)
    assert len(states) == len(NODE)
    # The lent node is held drained so Slurm never picks it; the rest wait as idle~.
    assert states.pop(LENT)[1].startswith("slurmkube: not available to Slurm")
    assert {s for s, _ in states.values()} == {"idle~"}


def test_segment_job_resumes_exactly_one_whole_block_and_completes(kube: Kube, slurm: str) -> None:
    job = in_ctld(
        slurm, "sbatch", "--parsable", "-N4", "--segment=4", "--wrap", "srun hostname"
    ).strip()
    # LENT is in the first block, so that block cannot hold the job: Slurm resumes the other.
    nodes = wait_job(slurm, job, {"COMPLETED"}, timeout=120)
    assert set(expand(nodes)) == SECOND_BLOCK, nodes
    assert slurmd_nodes(kube, slurm) <= SECOND_BLOCK
    assert LENT not in powered(slurm)
    # After SuspendTime idle, Slurm powers them down and the operator removes the pods.
    wait_slurmd_pods_gone(kube, slurm, SLURMD, timeout=120)
    wait_autoscaling(kube, slurm, lambda a: a.get("up") == 0 and a["suspending"] == 0, 60)
    assert all(sinfo(slurm)[n][0] == "idle~" for n in SECOND_BLOCK)
    # Scale-down failed nothing and requeued nothing.
    assert job_state(slurm, job)[0] == "COMPLETED"
    assert restarts(slurm)[job] == 0


# Out of `make test` for CI's time: `make e2e-extended` and `make e2e-real8` run it.
@pytest.mark.extended
def test_burst_resumes_no_more_than_max_nodes_and_no_more_than_needed(
    kube: Kube, slurm: str
) -> None:
    kube.apply(autoscaled_docs(slurm, maxNodes=3, keepWholeBlocks=False)[1])
    # Three nodes offered; the other four free ones (and LENT) are held drained meanwhile.
    wait_autoscaling(kube, slurm, lambda a: a.get("held") == len(NODE) - 3, 60)
    # More one-CPU jobs than one node holds, fewer than two do: 20 on 16-CPU nodes.
    cpus = cpus_per_node(slurm)
    jobs = [
        in_ctld(slurm, "sbatch", "--parsable", "-n1", "--wrap", "sleep 5").strip()
        for _ in range(cpus + max(1, cpus // 4))
    ]
    most: set[str] = set()
    deadline = time.monotonic() + 180
    while any(state not in ("COMPLETED", "FAILED") for state, _ in states(slurm, jobs).values()):
        assert time.monotonic() < deadline, states(slurm, jobs)
        up = powered(slurm)
        assert LENT not in up
        most = up if len(up) > len(most) else most
        time.sleep(1)
    done = states(slurm, jobs)
    ran = {nodes for _, nodes in done.values()}
    assert {state for state, _ in done.values()} == {"COMPLETED"}
    # The jobs fit two nodes: Slurm packs them and resumes only those.
    assert len(most) <= 2, most
    assert ran <= most | {""}, (ran, most)
    counts = restarts(slurm)
    assert all(counts[j] == 0 for j in jobs)


# Out of `make test` for CI's time: `make e2e-extended` and `make e2e-real8` run it.
@pytest.mark.extended
def test_failed_resume_marks_the_node_down_warns_and_requeues_the_job(
    kube: Kube, slurm: str
) -> None:
    kube.apply(autoscaled_docs(slurm)[1])
    kube.apply(gpu_hog(slurm, BLOCKED))
    wait_for(
        kube,
        "v1",
        "Pod",
        "gpu-hog",
        lambda p: p["status"].get("phase") == "Running",
        namespace=slurm,
        timeout=60,
    )
    job = in_ctld(slurm, "sbatch", "--parsable", "-N1", "-w", BLOCKED, "--wrap", "true").strip()
    # ResumeTimeout (30 s) plus slurmctld's pass that notices it; slow on a shared machine.
    wait_autoscaling(kube, slurm, lambda a: BLOCKED in a.get("failedNodes", []), 180)
    state, reason = sinfo(slurm)[BLOCKED]
    assert state.startswith("down") and reason == "ResumeTimeout reached"
    events = kube.list("v1", "Event", namespace=slurm)
    warned = [e for e in events if e.get("reason") == "ResumeFailed" and e["type"] == "Warning"]
    assert warned and BLOCKED in warned[0]["message"]
    # Slurm requeued the job: pending again, not failed, not lost.
    assert job_state(slurm, job)[0] == "PENDING"
    assert restarts(slurm)[job] >= 1
    wait_slurmd_pods_gone(kube, slurm, f"{SLURMD},slurmkube.io/node={BLOCKED}", timeout=60)
    in_ctld(slurm, "scancel", job)


def test_scale_subresource_is_refused_while_slurm_drives_the_node_set(
    kube: Kube, slurm: str
) -> None:
    """One mode wins, explicitly: HPA/KEDA get the API server's refusal, not a silent no-op."""
    scale = kube.resource(API, "NodeSet").subresources["scale"]
    with pytest.raises(DynamicApiError, match="exclude each other"):
        scale.patch(
            body={"spec": {"replicas": 2}},
            name="local",
            namespace=slurm,
            content_type="application/merge-patch+json",
        )
