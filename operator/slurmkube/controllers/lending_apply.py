"""What the Kueue bridge writes: Slurm reservations and job requeues, lease
labels on Nodes, our entry of each Workload's admission checks and the
AdmissionCheck's Active condition (server-side apply under our own field
manager, so Kueue's fields stay Kueue's)."""

from __future__ import annotations

import datetime as dt
import functools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from slurmkube import metrics
from slurmkube.api import well_known as wk
from slurmkube.api.models import SlurmCluster
from slurmkube.build.names import deployment_context
from slurmkube.controllers import handovers
from slurmkube.controllers.failpoints import Step, reached
from slurmkube.kube.client import Kube, Manifest
from slurmkube.lending import (
    CheckState,
    CheckUpdate,
    Lend,
    LendingPlan,
    reservation_name,
)
from slurmkube.plan.conditions import timestamp, transition_time
from slurmkube.slurm.errors import SlurmError, SlurmNotFound
from slurmkube.slurm.models import ReservationFlag, ReservationRequest
from slurmkube.slurm.rest import RestClient

log = logging.getLogger(__name__)
KUEUE = "kueue.x-k8s.io/v1beta2"
FIELD_MANAGER = "slurmkube-admission-check"


@dataclass(frozen=True)
class LendingCluster:
    obj: Manifest
    spec: SlurmCluster
    rest: RestClient | None


def apply_lending(
    kube: Kube,
    cluster: LendingCluster,
    plan: LendingPlan,
    raw_by_uid: Mapping[str, Manifest],
    reserved_at: Mapping[str, float],
) -> bool:
    """Apply the plan; True if a lease label was set or removed."""
    name = cluster.obj["metadata"]["name"]
    relabelled = False
    for release in plan.releases:
        for node in release.unlabel:
            unlabel = functools.partial(kube.set_node_label, node, wk.LABEL_LEASE, None)
            handovers.lease_ended(kube, cluster.obj, node, unlabel)
            reached(Step.LEASE_UNLABELLED)
            relabelled = True
        if release.delete_reservation and cluster.rest is not None:
            try:
                cluster.rest.delete_reservation(release.delete_reservation)
                reached(Step.RESERVATION_DELETED)
            except SlurmNotFound:
                pass
            except SlurmError as err:
                log.warning(
                    "reservation delete failed name=%s error=%s", release.delete_reservation, err
                )
                continue
        undone = bool(release.unlabel or release.delete_reservation)
        if release.orphan and undone:
            metrics.LEAKS_COLLECTED.labels(cluster.obj["metadata"]["namespace"], name).inc()
            kube.event(
                cluster.obj,
                "LeaseCollected",
                f"no Workload {release.uid}: removed lease from {list(release.unlabel)}, "
                f"reservation {release.delete_reservation or '-'}",
                warning=True,
            )
        elif undone and release.uid in raw_by_uid:
            kube.event(
                raw_by_uid[release.uid],
                "NodesReturned",
                f"returned {list(release.unlabel)} to Slurm "
                f"(reservation {release.delete_reservation or '-'} deleted)",
            )
        if undone:
            log.info("lease released uid=%s nodes=%s", release.uid, ",".join(release.unlabel))
        if release.check is not None:
            _write_check(kube, raw_by_uid.get(release.uid), release.check)
    user = deployment_context(cluster.spec).slurm_user
    for lend in plan.lends:
        raw = raw_by_uid.get(lend.uid)
        check = lend.check
        if lend.create is not None:
            if cluster.rest is None:
                continue
            try:
                cluster.rest.create_reservation(
                    ReservationRequest(
                        name=lend.create.name,
                        nodes=lend.create.nodes,
                        users=(user,),
                        flags=frozenset(ReservationFlag(f) for f in lend.create.flags),
                    )
                )
            except SlurmError as err:
                log.warning("reservation create failed name=%s error=%s", lend.create.name, err)
                if check is not None:
                    _write_check(
                        kube,
                        raw,
                        CheckUpdate(
                            check.namespace,
                            check.workload,
                            check.check,
                            CheckState.RETRY,
                            f"Slurm refused reservation {lend.create.name}: {err}",
                            requeue_after_seconds=30,
                        ),
                    )
                continue
            if raw is not None:
                kube.event(raw, "NodesReserved", f"reservation {lend.create.name}: {lend.placed}")
            log.info(
                "reservation created name=%s nodes=%s",
                lend.create.name,
                ",".join(lend.create.nodes),
            )
            reached(Step.RESERVATION_CREATED)
        failed = _requeue_jobs(kube, cluster, lend, raw)
        if failed and check is not None:
            check = replace(check, message=f"{check.message}; {failed}")
        for node in lend.label:
            label = functools.partial(kube.set_node_label, node, wk.LABEL_LEASE, lend.uid)
            handovers.lent(kube, cluster.obj, node, lend.uid, label)
            reached(Step.LEASE_LABELLED)
            relabelled = True
        if check is not None:
            was_ready = _check_state(raw, check.check) == CheckState.READY.value
            written = _write_check(kube, raw, check)
            if lend.waiting:
                reached(Step.WAITING_FOR_IDLE)
            if written and lend.sick and raw is not None:
                kube.event(raw, "LentNodeSick", lend.sick, warning=True)
            if written and check.state is CheckState.READY and raw is not None and not was_ready:
                kube.event(raw, "NodesLent", check.message)
                seconds = _since_quota_reserved(raw)
                if seconds is not None:
                    metrics.LEND_SECONDS.labels(check.check).observe(seconds)
                since = reserved_at.get(reservation_name(lend.uid))
                if since:
                    metrics.DRAIN_WAIT_SECONDS.labels(check.check).observe(
                        max(0.0, time.time() - since)
                    )
                log.info("check ready workload=%s/%s", check.namespace, check.workload)
                reached(Step.CHECK_READY)
    return relabelled


def _requeue_jobs(kube: Kube, cluster: LendingCluster, lend: Lend, raw: Manifest | None) -> str:
    """`scontrol requeue` each job the plan names; what failed, for the check message."""
    if not lend.requeue or cluster.rest is None:
        return ""
    name = cluster.obj["metadata"]["name"]
    check = lend.check.check if lend.check is not None else ""
    failures = []
    for job in lend.requeue:
        try:
            cluster.rest.requeue_job(job.job_id)
        except SlurmNotFound:
            continue  # ended on its own meanwhile: the node is freed all the same
        except SlurmError as err:
            log.warning("job requeue failed job=%s uid=%s error=%s", job.job_id, lend.uid, err)
            failures.append(f"Slurm refused to requeue job {job.job_id}: {err}")
            if raw is not None:
                kube.event(raw, "SlurmJobRequeueFailed", failures[-1], warning=True)
            continue
        metrics.JOBS_REQUEUED.labels(cluster.obj["metadata"]["namespace"], name, check).inc()
        log.info("job requeued job=%s priority=%s uid=%s", job.job_id, job.priority, lend.uid)
        if raw is not None:
            kube.event(raw, "SlurmJobRequeued", job.reason)
    return "; ".join(failures)


def _now() -> str:
    return timestamp(dt.datetime.now(dt.UTC))


def _check_entry(raw: Manifest | None, check: str) -> Manifest:
    entries = ((raw or {}).get("status") or {}).get("admissionChecks") or []
    return next((e for e in entries if e.get("name") == check), {})


def _check_state(raw: Manifest | None, check: str) -> str | None:
    state = _check_entry(raw, check).get("state")
    return str(state) if state is not None else None


def _write_check(kube: Kube, raw: Manifest | None, update: CheckUpdate) -> bool:
    """Our entry of status.admissionChecks, by server-side apply; False if unchanged."""
    if raw is None:
        return False
    current = _check_entry(raw, update.check)
    pod_set_updates = [dict(u) for u in update.pod_set_updates]
    if (
        current.get("state") == update.state.value
        and current.get("message") == update.message[:32768]
        and (current.get("podSetUpdates") or []) == pod_set_updates
    ):
        return False
    entry: dict[str, Any] = {
        "name": update.check,
        "state": update.state.value,
        "message": update.message[:32768],
        # Kueue's entries carry a state, not a status: the same rule on it.
        "lastTransitionTime": transition_time(
            {
                "status": current.get("state"),
                "lastTransitionTime": current.get("lastTransitionTime"),
            },
            update.state.value,
            _now(),
        ),
    }
    if pod_set_updates:
        entry["podSetUpdates"] = pod_set_updates
    if update.requeue_after_seconds is not None:
        entry["requeueAfterSeconds"] = update.requeue_after_seconds
    kube.apply_status(
        {
            "apiVersion": KUEUE,
            "kind": "Workload",
            "metadata": {"name": update.workload, "namespace": update.namespace},
            "status": {"admissionChecks": [entry]},
        },
        FIELD_MANAGER,
    )
    metrics.CHECK_ANSWERS.labels(update.check, update.state.value).inc()
    if update.state in (CheckState.RETRY, CheckState.REJECTED):
        kube.event(raw, f"Check{update.state.value}", update.message, warning=True)
    return True


def _since_quota_reserved(raw: Manifest) -> float | None:
    for c in (raw.get("status") or {}).get("conditions") or []:
        if c.get("type") == "QuotaReserved" and c.get("status") == "True":
            at = dt.datetime.strptime(c["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ")
            return max(0.0, time.time() - at.replace(tzinfo=dt.UTC).timestamp())
    return None


def write_active(kube: Kube, ac: Manifest, ok: bool, reason: str, message: str) -> None:
    """The AdmissionCheck's Active condition (Kueue admits nothing through an inactive one)."""
    name = ac["metadata"]["name"]
    conditions = (ac.get("status") or {}).get("conditions") or []
    current: Manifest = next((c for c in conditions if c.get("type") == "Active"), {})
    status = "True" if ok else "False"
    if current.get("status") == status and current.get("message") == message[:32768]:
        return
    kube.apply_status(
        {
            "apiVersion": KUEUE,
            "kind": "AdmissionCheck",
            "metadata": {"name": name},
            "status": {
                "conditions": [
                    {
                        "type": "Active",
                        "status": status,
                        "reason": reason,
                        "message": message[:32768],
                        "lastTransitionTime": transition_time(current, status, _now()),
                        "observedGeneration": ac["metadata"].get("generation"),
                    }
                ]
            },
        },
        FIELD_MANAGER,
    )
    log.info("admission check active check=%s active=%s reason=%s", name, ok, reason)
