"""Kueue, running as a local process behind real admission webhooks, queues batch work
against GPU quota: it admits (unsuspends) what fits and holds back what does not."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from slurmkube_e2e import fleet
from slurmkube_e2e.builders import QUEUE_LABEL, make_job, make_pod
from slurmkube_e2e.kube import Kube, Manifest
from slurmkube_e2e.waiting import describe, has_condition, stays, wait_for, wait_for_list

pytestmark = pytest.mark.e2e

KUEUE = "kueue.x-k8s.io/v1beta2"


@dataclass(frozen=True)
class Queue:
    """A LocalQueue in the test namespace backed by its own ClusterQueue and flavor."""

    local_queue: str
    cluster_queue: str
    flavor: str
    product: str
    gpus: int


@pytest.fixture
def gpu_queue(kube: Kube, namespace: str, gpu_nodes: list[Manifest]) -> Iterator[Queue]:
    """4 GPUs of quota on the fleet's GPU product, usable from the test namespace only."""
    product = gpu_nodes[0]["metadata"]["labels"][fleet.PRODUCT_LABEL]
    queue = Queue("gpus", f"{namespace}-cq", f"{namespace}-gpu", product, gpus=4)
    kube.apply(
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": queue.flavor},
            "spec": {"nodeLabels": {fleet.PRODUCT_LABEL: product}},
        }
    )
    kube.apply(
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": queue.cluster_queue},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", fleet.GPU_RESOURCE],
                        "flavors": [
                            {
                                "name": queue.flavor,
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "64"},
                                    {"name": "memory", "nominalQuota": "256Gi"},
                                    {"name": fleet.GPU_RESOURCE, "nominalQuota": queue.gpus},
                                ],
                            }
                        ],
                    }
                ],
            },
        }
    )
    kube.apply(
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": queue.local_queue, "namespace": namespace},
            "spec": {"clusterQueue": queue.cluster_queue},
        }
    )
    wait_for(
        kube,
        KUEUE,
        "ClusterQueue",
        queue.cluster_queue,
        lambda cq: has_condition(cq, "Active"),
        what="Active",
    )
    yield queue
    # Workloads of the namespace go with it; the cluster-scoped queue objects do not.
    kube.delete(KUEUE, "LocalQueue", queue.local_queue, namespace=namespace)
    kube.delete(KUEUE, "ClusterQueue", queue.cluster_queue)
    kube.delete(KUEUE, "ResourceFlavor", queue.flavor)


def _workload_of(kube: Kube, namespace: str, owner_uid: str) -> Manifest | None:
    for wl in kube.list(KUEUE, "Workload", namespace=namespace):
        if any(o.get("uid") == owner_uid for o in wl["metadata"].get("ownerReferences") or []):
            return wl
    return None


def _wait_workload(
    kube: Kube, namespace: str, owner: Manifest, what: str, check: object
) -> Manifest:
    uid = owner["metadata"]["uid"]
    items = wait_for_list(
        kube,
        KUEUE,
        "Workload",
        lambda wls: any(
            check(wl)  # type: ignore[operator]
            for wl in wls
            if any(o.get("uid") == uid for o in wl["metadata"].get("ownerReferences") or [])
        ),
        namespace=namespace,
        what=what,
    )
    found = _workload_of(kube, namespace, uid)
    assert found is not None, items
    return found


def _wait_unsuspended(kube: Kube, namespace: str, job: str, what: str) -> Manifest:
    return wait_for(
        kube,
        "batch/v1",
        "Job",
        job,
        lambda j: j["spec"].get("suspend") is False,
        namespace=namespace,
        what=what,
    )


def test_kueue_admits_a_suspended_job_and_holds_the_next_one_over_quota(
    kube: Kube, namespace: str, gpu_queue: Queue
) -> None:
    first = kube.apply(make_job("first", gpu_queue.local_queue, gpus=4), namespace=namespace)
    job = _wait_unsuspended(kube, namespace, "first", "admitted (unsuspended) by Kueue")
    workload = _wait_workload(
        kube, namespace, first, "admitted", lambda wl: has_condition(wl, "Admitted")
    )
    admission = workload["status"]["admission"]
    assert admission["clusterQueue"] == gpu_queue.cluster_queue
    # Kueue injects the flavor's node labels, so the pod lands on that GPU product.
    selector = job["spec"]["template"]["spec"].get("nodeSelector") or {}
    assert selector.get(fleet.PRODUCT_LABEL) == gpu_queue.product
    wait_for_list(
        kube,
        "v1",
        "Pod",
        lambda ps: len(ps) == 1 and ps[0]["status"].get("phase") == "Running",
        namespace=namespace,
        label_selector="app=first",
        what="1 pod Running",
    )

    second = kube.apply(make_job("second", gpu_queue.local_queue, gpus=4), namespace=namespace)
    _wait_workload(
        kube,
        namespace,
        second,
        "pending on quota",
        lambda wl: has_condition(wl, "QuotaReserved", "False"),
    )

    def still_suspended() -> bool:
        job = kube.get("batch/v1", "Job", "second", namespace)
        return job is not None and job["spec"].get("suspend") is True

    stays(
        still_suspended,
        seconds=3,
        what="Job second to stay suspended while over quota",
        describe_state=lambda: describe(
            kube, kube.get("batch/v1", "Job", "second", namespace), "Job second"
        ),
    )

    # Quota comes back when the first Job goes away; then the second is admitted.
    kube.delete("batch/v1", "Job", "first", namespace=namespace)
    _wait_unsuspended(kube, namespace, "second", "admitted once quota is free")


def test_kueue_webhook_suspends_a_queued_job_created_running(
    kube: Kube, namespace: str, gpu_queue: Queue
) -> None:
    job = make_job("eager", gpu_queue.local_queue, gpus=1, suspend=False)
    job["metadata"]["namespace"] = namespace
    created = kube.create(job, dry_run="All")
    assert created["spec"]["suspend"] is True, "Kueue's mutating webhook did not run"


def test_kueue_gates_and_admits_a_plain_pod(kube: Kube, namespace: str, gpu_queue: Queue) -> None:
    kube.apply(
        make_pod("solo", gpus=1, labels={QUEUE_LABEL: gpu_queue.local_queue}), namespace=namespace
    )
    pod = wait_for(
        kube,
        "v1",
        "Pod",
        "solo",
        lambda p: p["status"].get("phase") == "Running",
        namespace=namespace,
        what="admitted and Running",
    )
    assert pod["spec"].get("nodeSelector", {}).get(fleet.PRODUCT_LABEL) == gpu_queue.product
