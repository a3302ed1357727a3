"""slurmctld's state on its PersistentVolumeClaim (the test bed's hostPath
provisioner): the slurmctld pod deleted while a job runs and another waits, the
new pod reads the state back, the running job completes under its own id and the
waiting one runs after it."""

from __future__ import annotations

import time

import pytest

from slurmkube_e2e.kube import Kube
from slurmkube_e2e.operator_cluster import docs, in_ctld, job_state, ready_cluster, wait_job
from slurmkube_e2e.waiting import wait_for

# `make e2e-extended`: test_real_node_cluster.py runs the same judgement in
# `make test` on real kubelets, with a hostPath PersistentVolume.
pytestmark = [pytest.mark.e2e, pytest.mark.extended]
CTLD = "local-slurmctld-0"


def test_a_job_outlives_its_slurmctld_pod(kube: Kube, operator: None, namespace: str) -> None:
    for doc in docs(namespace, persistence=True):
        kube.apply(doc)
    ready_cluster(kube, namespace, timeout=240)
    claim = kube.get("v1", "PersistentVolumeClaim", f"state-{CTLD}", namespace=namespace)
    assert claim is not None and claim["status"]["phase"] == "Bound", claim
    running = in_ctld(namespace, "sbatch", "--parsable", "-N4", "--wrap", "sleep 45").strip()
    wait_job(namespace, running, {"RUNNING"})
    queued = in_ctld(namespace, "sbatch", "--parsable", "-N4", "--wrap", "hostname").strip()
    old = kube.get("v1", "Pod", CTLD, namespace=namespace)
    assert old is not None
    deleted = time.monotonic()
    kube.delete("v1", "Pod", CTLD, namespace)
    wait_for(
        kube, "v1", "Pod", CTLD,
        lambda p: p["metadata"]["uid"] != old["metadata"]["uid"],
        namespace=namespace, timeout=120,
    )  # fmt: skip
    deadline = time.monotonic() + 180
    while True:
        try:
            in_ctld(namespace, "scontrol", "ping")
            break
        except AssertionError:
            assert time.monotonic() < deadline, "the new slurmctld never answered"
            time.sleep(0.5)
    print(f"slurmctld pod deleted -> the new slurmctld answers: {time.monotonic() - deleted:.1f}s")
    assert job_state(namespace, running)[0] in {"RUNNING", "COMPLETING", "COMPLETED"}
    wait_job(namespace, running, {"COMPLETED"}, timeout=180)
    wait_job(namespace, queued, {"COMPLETED"}, timeout=180)
