"""Writes of the AllocationSource controller: slurmdbd, Kueue objects, status, Events.

Slurm: the planned `sacctmgr -i` commands (`plan.policy.slurm_diff`), in
order, through `SacctmgrClient`; the first that fails stops the rest (a later
one may need it) and the next sync plans again from what slurmdbd shows.
Kueue: server-side apply of every desired object with the source's label,
then delete the source's labelled objects no longer desired (a removed team's
ClusterQueue and LocalQueues); then the tier label of the jobs of pending
Workloads (`plan.policy.tiers`). Idempotent: a second run changes nothing.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import DynamicApiError, NotFoundError, ResourceNotFoundError

from slurmkube.api import well_known as wk
from slurmkube.kube.client import Kube, Manifest
from slurmkube.plan.conditions import metav1_conditions, timestamp
from slurmkube.plan.policy.kueue import KINDS, KUEUE_API, SOURCE_LABEL, owned_by, stale
from slurmkube.plan.policy.observed import observed_entities
from slurmkube.plan.policy.slurm import SlurmEntity
from slurmkube.plan.policy.slurm_diff import SlurmChange, diff_slurm, sacctmgr_argv
from slurmkube.plan.policy.sync import PolicyEvent, SyncOutcome, sync_conditions
from slurmkube.plan.policy.tiers import PRIORITY_CLASS_LABEL, TIER_ANNOTATION, TierLabel
from slurmkube.slurm.accounting import SacctmgrClient
from slurmkube.slurm.errors import SlurmError

log = logging.getLogger(__name__)


def sync_slurm(
    client: SacctmgrClient,
    desired: Sequence[SlurmEntity],
    last_applied: Sequence[SlurmEntity] | None,
) -> tuple[tuple[SlurmChange, ...], str]:
    """Observe slurmdbd, diff, run the changes; (the changes planned, an error or "")."""
    try:
        observed = observed_entities(
            client.show_qos(), client.show_accounts(), client.show_associations()
        )
        defaults = client.show_default_accounts()
    except SlurmError as err:
        return (), f"reading slurmdbd: {err}"
    changes = diff_slurm(desired, observed, last_applied, defaults)
    for change in changes:
        try:
            client.run(sacctmgr_argv(change))
        except SlurmError as err:
            return changes, f"{change.describe()}: {err}"
        log.info("policy slurm change=%s", change.describe())
    return changes, ""


def sync_kueue(kube: Kube, objects: list[Manifest], label: str) -> str:
    """Apply the source's Kueue objects and delete its stale ones; an error or ""."""
    desired = owned_by(objects, label)
    try:
        for obj in desired:
            kube.apply(obj)
        existing: list[Manifest] = []
        for kind in KINDS:
            existing += kube.list(KUEUE_API, kind, None, f"{SOURCE_LABEL}={label}")
        for kind, name, namespace in stale(desired, existing):
            kube.delete(KUEUE_API, kind, name, namespace)
            log.info("policy kueue deleted kind=%s name=%s namespace=%s", kind, name, namespace)
    except ResourceNotFoundError as err:
        return f"Kueue's CRDs are not installed ({err})"
    except (DynamicApiError, ApiException) as err:
        return _api_error(err)
    return ""


def _api_error(err: DynamicApiError | ApiException) -> str:
    if isinstance(err, DynamicApiError):
        return f"{err.status} {err.summary()}"  # type: ignore[no-untyped-call]
    return f"{err.status} {err.reason}"


def priority_class_values(kube: Kube) -> dict[str, int]:
    """Every WorkloadPriorityClass's value (empty when Kueue is not installed)."""
    try:
        classes = kube.list(KUEUE_API, "WorkloadPriorityClass", None)
    except ResourceNotFoundError:
        return {}
    return {str(c["metadata"]["name"]): int(c.get("value") or 0) for c in classes}


def label_tiers(kube: Kube, labels: Sequence[TierLabel]) -> str:
    """Give each job its tier; the first refusal or "" (the others are still tried).

    The Workload's annotation first: were the label written and the annotation
    not, the class would look the user's own and never be raised again."""
    refused = ""
    for label in labels:
        try:
            kube.annotate(
                KUEUE_API,
                "Workload",
                label.workload,
                label.namespace,
                {TIER_ANNOTATION: label.priority_class},
            )
            kube.merge_patch(
                label.api_version,
                label.kind,
                label.name,
                label.namespace,
                {"metadata": {"labels": {PRIORITY_CLASS_LABEL: label.priority_class}}},
            )
        except NotFoundError:
            continue  # finished and gone since the cache saw it
        except (DynamicApiError, ApiException) as err:
            where = f"tier {label.priority_class} on {label.kind} {label.namespace}/{label.name}"
            refused = refused or f"{where}: {_api_error(err)}"
            continue
        log.info(
            "policy tier kind=%s name=%s/%s class=%s",
            label.kind,
            label.namespace,
            label.name,
            label.priority_class,
        )
    return refused


def write_status(
    kube: Kube,
    obj: Manifest,
    outcome: SyncOutcome,
    teams: Sequence[Mapping[str, Any]] | None,
    etag: str | None,
) -> None:
    """Conditions always; teams, ETag and the sync time only after a sync that read
    the source (a failed read keeps what the status said of the last good one)."""
    meta = obj["metadata"]
    before = obj.get("status") or {}
    now = timestamp(dt.datetime.now(dt.UTC))
    status: dict[str, Any] = {
        "conditions": metav1_conditions(
            before.get("conditions") or [], sync_conditions(outcome), meta.get("generation"), now
        )
    }
    if teams is not None:
        status.update(teams=len(teams), allocations=list(teams), lastSyncTime=now, etag=etag)
    kube.patch_status(wk.API_VERSION, "AllocationSource", meta["name"], meta["namespace"], status)


def emit(kube: Kube, obj: Manifest, events: Sequence[PolicyEvent]) -> None:
    for event in events:
        kube.event(obj, event.reason, event.message, warning=event.warning)
