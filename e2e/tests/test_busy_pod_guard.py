"""The busy slurmd pod guard (build/admission.py, the chart's ValidatingAdmissionPolicy)
on the real API server: deleting a slurmd pod whose node runs a Slurm job is refused
with a message that says what to do, and the job runs on; the pod annotated
slurmkube.io/force-delete=true, or idle again, may go. The policy is bound to this
test's namespace only, with the e2e operators' group exempt as the chart exempts
the operator's ServiceAccount."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from slurmkube.api import well_known as wk
from slurmkube_e2e.busy_guard import busy_guard
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.namespaces import delete_namespace
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


@pytest.fixture
def guarded(kube: Kube, operator: None, namespace: str) -> Iterator[str]:
    try:
        with busy_guard(kube, namespace):
            yield namespace
    finally:
        delete_namespace(kube, namespace)


def _delete(kube: Kube, namespace: str, *, dry_run: bool) -> str:
    """'' if the API server takes the DELETE, else its refusal."""
    try:
        CoreV1Api(kube.api_client).delete_namespaced_pod(
            POD, namespace, dry_run="All" if dry_run else None
        )
    except ApiException as err:
        return str(err.body)
    return ""


def _busy(value: str):  # type: ignore[no-untyped-def]
    return lambda pod: (pod["metadata"].get("labels") or {}).get(wk.LABEL_BUSY) == value


def test_a_busy_slurmd_pod_is_not_deleted_and_its_job_runs_on(kube: Kube, guarded: str) -> None:
    for doc in docs(guarded):
        kube.apply(doc)
    ready_cluster(kube, guarded)
    job = in_ctld(guarded, "sbatch", "--parsable", "-w", NODE, "--wrap", "sleep 300").strip()
    wait_job(guarded, job, {"RUNNING"})
    started = time.monotonic()
    wait_for(kube, "v1", "Pod", POD, _busy("true"), namespace=guarded, timeout=120)
    print(f"busy label {time.monotonic() - started:.1f}s after RUNNING was seen")
    # The policy compiles in the background: a dry run tells when it answers.
    deadline = time.monotonic() + 60
    while not (refused := _delete(kube, guarded, dry_run=True)):
        assert time.monotonic() < deadline, "the guard never refused a dry-run delete"
        time.sleep(1)
    refused = _delete(kube, guarded, dry_run=False)
    assert f"slurmd pod {POD} runs a Slurm job" in refused, refused
    assert "drain its node in Slurm" in refused
    assert kube.get("v1", "Pod", POD, namespace=guarded) is not None
    assert job_state(guarded, job)[0] == "RUNNING"
    # Annotated by a person who knows the job dies: allowed (a dry run here).
    annotations = {"metadata": {"annotations": {wk.ANNOTATION_FORCE_DELETE: "true"}}}
    kube.patch("v1", "Pod", POD, annotations, guarded)
    assert _delete(kube, guarded, dry_run=True) == ""
    kube.patch(
        "v1", "Pod", POD, {"metadata": {"annotations": {wk.ANNOTATION_FORCE_DELETE: None}}}, guarded
    )
    # The job over, the label follows Slurm and the pod may go.
    in_ctld(guarded, "scancel", job)
    wait_for(kube, "v1", "Pod", POD, _busy("false"), namespace=guarded, timeout=120)
    assert _delete(kube, guarded, dry_run=True) == ""
