"""Kueue v1beta2 Workload objects -> `WorkloadView` (pure parsing, no I/O).

Only what lending needs: the podSets (count, GPUs per pod, whether they must
share one NVLink block), the conditions Kueue sets (QuotaReserved, Finished,
Evicted), `spec.active`, and our entry in `status.admissionChecks`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from slurmkube.api import well_known as wk
from slurmkube.lending.model import CheckState, PodSetView, WorkloadView

# Kueue's required-topology annotation, copied by Kueue into podSets[].topologyRequest.
KUEUE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"


def our_check(raw: Mapping[str, Any], checks: Collection[str]) -> str | None:
    """The first of `checks` (our AdmissionChecks) the workload carries, if any."""
    for entry in (raw.get("status") or {}).get("admissionChecks") or []:
        if entry.get("name") in checks:
            return str(entry["name"])
    return None


def workload_view(raw: Mapping[str, Any], check: str) -> WorkloadView:
    meta = raw["metadata"]
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    conditions = {c.get("type"): c.get("status") == "True" for c in status.get("conditions") or []}
    entry: Mapping[str, Any] = next(
        (e for e in status.get("admissionChecks") or [] if e.get("name") == check), {}
    )
    try:
        state = CheckState(entry.get("state", "Pending"))
    except ValueError:
        state = CheckState.PENDING
    return WorkloadView(
        namespace=wk.namespace_or_default(meta.get("namespace")),
        name=meta["name"],
        uid=meta["uid"],
        check=check,
        check_state=state,
        check_message=str(entry.get("message", "")),
        pod_sets=tuple(_pod_set(ps) for ps in spec.get("podSets") or []),
        quota_reserved=conditions.get("QuotaReserved", False),
        finished=conditions.get("Finished", False),
        evicted=conditions.get("Evicted", False),
        active=spec.get("active", True) is not False,
        deleting=bool(meta.get("deletionTimestamp")),
    )


def _pod_set(raw: Mapping[str, Any]) -> PodSetView:
    template = raw.get("template") or {}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    containers = (template.get("spec") or {}).get("containers") or []
    gpus = sum(wk.container_gpus(c.get("resources") or {}) for c in containers)
    required = (raw.get("topologyRequest") or {}).get("required") or annotations.get(
        KUEUE_REQUIRED_TOPOLOGY
    )
    single = annotations.get(wk.ANNOTATION_BLOCK_POLICY) == "single-block" or required in (
        wk.LABEL_GPU_CLIQUE,
    )
    return PodSetView(
        name=str(raw.get("name", "main")),
        count=int(raw.get("count", 1)),
        gpus_per_pod=gpus,
        single_block=single,
    )
