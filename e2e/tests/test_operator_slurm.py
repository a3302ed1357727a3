"""The operator's pods run the real Slurm daemons (the local pod runtime, or real
kubelets with `SLURMKUBE_E2E_NODES=real`): the SlurmCluster becomes Ready with
the right node counts, sinfo in the slurmctld pod shows the NodeSet's nodes idle
with their GPUs, a gang job runs inside one NVLink block, a partition change
reconfigures slurmctld in place, and scale-in waits for the running job before
it removes the slurmd pod.

Nodes are named by their place in Slurm's node order (`scontrol show nodes`,
the operator's order): the NodeSet's `replicas` take the first, scale-in gives
up the last of those.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest

from slurmkube.slurm.hostlist import expand
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.namespaces import delete_namespace
from slurmkube_e2e.operator_cluster import (
    API,
    docs,
    in_ctld,
    in_pod,
    job_state,
    ready_cluster,
    wait_job,
)
from slurmkube_e2e.topology import parse_blocks
from slurmkube_e2e.waiting import has_condition, wait_for, wait_for_list, wait_gone

pytestmark = pytest.mark.e2e
SLURMD = "app.kubernetes.io/name=slurmd"
REPLICAS = 4
# The toleration the rollout test adds; later tests keep it (no second rollout).
ROLLOUT = ({"key": "example.com/rollout", "operator": "Exists", "effect": "NoSchedule"},)


@pytest.fixture(scope="module")
def slurm(kube: Kube, operator: None) -> Iterator[str]:
    """One cluster for the module: the local nodes' GPUs hold one set of slurmd pods."""
    namespace = f"e2e-operator-slurm-{secrets.token_hex(2)}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_for(kube, "v1", "ServiceAccount", "default", lambda _: True, namespace=namespace)
    try:
        for doc in docs(namespace, login=1):
            kube.apply(doc)
        ready_cluster(kube, namespace)
        yield namespace
    finally:
        # Also when setup failed: a leftover cluster would hold the local nodes' GPUs.
        delete_namespace(kube, namespace)


def node_order(namespace: str) -> list[str]:
    """Slurm's nodes in its node table's order (the config's, the operator's)."""
    out = in_ctld(namespace, "scontrol", "-o", "show", "nodes")
    return [line.split()[0].removeprefix("NodeName=") for line in out.splitlines() if line]


def block_size(namespace: str) -> int:
    """Nodes in the smallest NVLink block `scontrol show topology` shows."""
    out = in_ctld(namespace, "scontrol", "show", "topology")
    blocks = parse_blocks(out)
    assert blocks, out
    return min(len(nodes) for nodes in blocks.values())


def test_cluster_is_ready_and_sinfo_shows_the_node_set_idle_with_gpus(
    kube: Kube, slurm: str
) -> None:
    cluster = kube.get(API, "SlurmCluster", "local", namespace=slurm)
    assert cluster is not None
    order = node_order(slurm)
    with_pods, without = order[:REPLICAS], order[REPLICAS:]
    assert cluster["status"]["nodes"]["total"] == REPLICAS
    # Fleet nodes beyond replicas get no slurmd pod: CLOUD, powered down (idle~).
    assert cluster["status"]["nodes"]["cloud"] == len(without)
    assert cluster["status"]["gpus"]["total"] == 4 * REPLICAS
    # Each slurmd pod mirrors its node's Slurm state as a condition.
    wait_for(
        kube,
        "v1",
        "Pod",
        f"local-{order[0]}",
        lambda p: any(
            c["type"] == "slurmkube.io/SlurmNode" and c["reason"] == "Idle"
            for c in (p.get("status") or {}).get("conditions") or []
        ),
        namespace=slurm,
        timeout=30,
    )
    rows = in_ctld(slurm, "sinfo", "-h", "-N", "-o", "%N %T %G").split("\n")
    states = {r.split()[0]: r.split()[1:] for r in rows if r.strip()}
    assert {n for n, s in states.items() if s == ["idle", "gpu:gb200:4"]} == set(with_pods)
    assert all(states[n][0] == "idle~" for n in without)


def test_login_pod_runs_slurm_commands_through_sackd(kube: Kube, slurm: str) -> None:
    (login,) = wait_for_list(
        kube,
        "v1",
        "Pod",
        lambda pods: len(pods) == 1 and has_condition(pods[0], "Ready"),
        namespace=slurm,
        label_selector="app.kubernetes.io/name=sackd",
        timeout=60,
    )
    name = login["metadata"]["name"]
    # The login pod holds slurm.key only: sackd fetched the config and signs for clients.
    states = in_pod(slurm, name, "sinfo", "-h", "-N", "-p", "gpu", "-o", "%T").split()
    assert states.count("idle") == REPLICAS  # the rest are powered down, idle~
    job = in_pod(slurm, name, "sbatch", "--parsable", "-N1", "--wrap", "true").strip()
    wait_job(slurm, job, {"COMPLETED"})


def test_gang_job_runs_inside_one_block_on_operator_pods(kube: Kube, slurm: str) -> None:
    # Four nodes in segments of one NVLink block each (a block of 4 on the
    # runtime's domains of 4, two of 2 on the real nodes' domains of 2).
    segment = block_size(slurm)
    out = in_ctld(
        slurm,
        "sbatch",
        "--parsable",
        f"-N{REPLICAS}",
        f"--segment={segment}",
        "--gres=gpu:4",
        "--wrap",
        "srun hostname",
    )
    nodes = wait_job(slurm, out.strip(), {"COMPLETED"})
    assert set(expand(nodes)) == set(node_order(slurm)[:REPLICAS])


def test_partition_change_reconfigures_in_place(kube: Kube, slurm: str) -> None:
    before = kube.get(API, "SlurmCluster", "local", namespace=slurm)
    pod = kube.get("v1", "Pod", "local-slurmctld-0", namespace=slurm)
    assert before is not None and pod is not None
    job = in_ctld(slurm, "sbatch", "--parsable", "-N1", "--wrap", "sleep 60").strip()
    wait_job(slurm, job, {"RUNNING"})
    kube.apply(docs(slurm, max_time="2-00:00:00")[0])
    after = wait_for(
        kube,
        API,
        "SlurmCluster",
        "local",
        lambda o: (
            (o.get("status") or {}).get("configHash") not in (None, before["status"]["configHash"])
        ),
        namespace=slurm,
        timeout=120,
    )
    assert has_condition(after, "ConfigApplied")
    # slurmctld re-read its config in place: the new MaxTime, same pod, the job alive.
    assert "MaxTime=2-00:00:00" in in_ctld(slurm, "scontrol", "show", "partition", "gpu")
    now = kube.get("v1", "Pod", "local-slurmctld-0", namespace=slurm)
    assert now is not None and now["metadata"]["uid"] == pod["metadata"]["uid"]
    assert job_state(slurm, job)[0] == "RUNNING"
    in_ctld(slurm, "scancel", job)


def test_changed_pod_template_rolls_pods_one_at_a_time_draining_first(
    kube: Kube, slurm: str
) -> None:
    def slurmd_pods() -> dict[str, dict[str, Any]]:
        pods = kube.list("v1", "Pod", namespace=slurm, label_selector=SLURMD)
        return {p["metadata"]["name"]: p for p in pods}

    before = {name: p["metadata"]["uid"] for name, p in slurmd_pods().items()}
    node = node_order(slurm)[1]
    job = in_ctld(slurm, "sbatch", "--parsable", "-N1", "-w", node, "--wrap", "sleep 40").strip()
    wait_job(slurm, job, {"RUNNING"})
    # A new toleration changes every slurmd pod's template: each is replaced.
    kube.apply(docs(slurm, node_set_tolerations=ROLLOUT)[1])
    # While the job runs, its node's pod stays (drained at most); the others roll.
    while job_state(slurm, job)[0] == "RUNNING":
        busy = slurmd_pods().get(f"local-{node}")
        assert busy is not None and busy["metadata"]["uid"] == before[f"local-{node}"]
        time.sleep(2)
    wait_job(slurm, job, {"COMPLETED"}, timeout=60)
    final = wait_for_list(
        kube,
        "v1",
        "Pod",
        lambda pods: (
            len(pods) == REPLICAS
            and all(p["metadata"]["uid"] not in before.values() for p in pods)
            and all(has_condition(p, "Ready") for p in pods)
        ),
        namespace=slurm,
        label_selector=SLURMD,
        timeout=120,
    )
    assert all(
        any(t.get("key") == "example.com/rollout" for t in p["spec"]["tolerations"]) for p in final
    )
    # Every replaced node is back in service: nothing the rollout drained stays drained.
    wait_for(
        kube,
        API,
        "SlurmCluster",
        "local",
        lambda o: (o.get("status") or {}).get("nodes", {}).get("idle") == REPLICAS,
        namespace=slurm,
        timeout=60,
    )
    assert job_state(slurm, job)[0] == "COMPLETED"


def test_scale_in_waits_for_the_running_job_then_removes_the_pod(kube: Kube, slurm: str) -> None:
    last = node_order(slurm)[REPLICAS - 1]  # the one scale-in gives up
    job = in_ctld(slurm, "sbatch", "--parsable", "-N1", "-w", last, "--wrap", "sleep 15").strip()
    wait_job(slurm, job, {"RUNNING"})
    node_set = docs(slurm, replicas=REPLICAS - 1, node_set_tolerations=ROLLOUT)[1]
    kube.apply(node_set)
    time.sleep(8)
    # Draining, not deleted, while the job runs.
    assert kube.get("v1", "Pod", f"local-{last}", namespace=slurm) is not None
    assert "drain" in in_ctld(slurm, "sinfo", "-h", "-n", last, "-o", "%T")
    wait_job(slurm, job, {"COMPLETED"}, timeout=60)
    wait_gone(kube, "v1", "Pod", f"local-{last}", namespace=slurm, timeout=90)
    assert job_state(slurm, job)[0] == "COMPLETED"
