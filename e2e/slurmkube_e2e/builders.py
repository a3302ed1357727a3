"""Builders for the Kubernetes objects e2e tests create (Kueue-style `make_*(...)` dicts).

Each returns a plain manifest a user could have written, with the few knobs
tests vary; everything else is the smallest valid object.
"""

from __future__ import annotations

import os

from slurmkube_e2e import fleet, kwok
from slurmkube_e2e.kube import Manifest

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# kwok never pulls it; on kind it is the sandbox image every node already has.
IMAGE = os.environ.get("SLURMKUBE_E2E_IMAGE", "registry.k8s.io/pause:3.10")


def container(gpus: int = 0, cpu: str = "100m") -> Manifest:
    resources: Manifest = {"requests": {"cpu": cpu, "memory": "64Mi"}}
    if gpus:
        # Extended resources are requested through limits (requests default to them).
        resources["limits"] = {fleet.GPU_RESOURCE: str(gpus)}
    return {"name": "main", "image": IMAGE, "resources": resources}


def pod_template(app: str, gpus: int = 0, annotations: dict[str, str] | None = None) -> Manifest:
    return {
        "metadata": {"labels": {"app": app}, "annotations": annotations or {}},
        "spec": {"containers": [container(gpus)], "terminationGracePeriodSeconds": 0},
    }


def _replicated(kind: str, name: str, replicas: int, gpus: int, **spec: object) -> Manifest:
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": pod_template(name, gpus),
            **spec,
        },
    }


def make_deployment(name: str, replicas: int, gpus: int = 0) -> Manifest:
    return _replicated("Deployment", name, replicas, gpus)


def make_statefulset(name: str, replicas: int, gpus: int = 0) -> Manifest:
    return _replicated("StatefulSet", name, replicas, gpus, serviceName=name)


def make_pod(name: str, gpus: int = 0, labels: dict[str, str] | None = None) -> Manifest:
    template = pod_template(name, gpus)
    template["metadata"]["labels"].update(labels or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **template["metadata"]},
        "spec": template["spec"],
    }


def make_job(
    name: str, queue: str | None, gpus: int, *, suspend: bool = True, runtime: str = "10m"
) -> Manifest:
    """A one-pod Job; kwok keeps its pod Running for `runtime` before it succeeds."""
    template = pod_template(name, gpus, {kwok.POD_RUNTIME_ANNOTATION: runtime})
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue} if queue else {}},
        "spec": {
            "suspend": suspend,
            "parallelism": 1,
            "completions": 1,
            "template": template,
        },
    }
