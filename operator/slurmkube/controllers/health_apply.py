"""Apply node health's actions (plan.health), in the order the planner gave them.

Slurm through the cluster's RestClient (drain, undrain, the check job, the
reservation and requeues; those two go through its scontrol writer where the
slurmrestd's data_parser cannot do them, as on 24.11), the
`slurmkube.io/unhealthy:NoSchedule` taint on the Node by a read-modify-write
that keeps every other taint. A failed step stops the node's later steps (the
next pass plans them again from what it then sees); other nodes go on.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Final

from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import DynamicApiError

from slurmkube import metrics
from slurmkube.api import well_known as wk
from slurmkube.api.grammar import InvalidValue
from slurmkube.kube.client import Kube
from slurmkube.plan.health_model import ActionKind, HealthAction, HealthPlan
from slurmkube.plan.health_state import with_health_taint
from slurmkube.slurm.arguments import reservation_name
from slurmkube.slurm.errors import SlurmError, SlurmNotFound, SlurmRejected
from slurmkube.slurm.models import (
    JobSubmission,
    Node,
    NodeStateChange,
    ReservationFlag,
    ReservationRequest,
)
from slurmkube.slurm.rest import RestClient

log = logging.getLogger(__name__)

# The active check: Slurm placed it on the node alone, inside the node's
# reservation (it fails anywhere else: slurmd sets SLURM_JOB_RESERVATION for a
# job in one, sbatch(1) OUTPUT ENVIRONMENT VARIABLES), with every GPU Slurm
# counts there; slurmd had to start it and bind them. Then the Slurm image's GPU
# check (the one slurmd runs as HealthCheckProgram, images/slurm/bin) must find
# all `{gpus}` GPUs healthy, without draining: the planner reads the job's exit.
# A slurmd image without the program gets the placement check alone, plus
# `nvidia-smi -L` where the driver is installed. `{reservation}` passed
# arguments.reservation_name: [A-Za-z0-9_.-] only, safe in single quotes;
# `{gpus}` is an int.
CHECK_SCRIPT: Final = """#!/bin/sh
# slurmkube node health: active check
set -eu
[ "${{SLURM_JOB_RESERVATION:-}}" = '{reservation}' ]
hostname
if command -v slurmkube-gpu-check >/dev/null 2>&1; then
  slurmkube-gpu-check --no-drain --gpus {gpus}
elif [ -n "${{SLURM_JOB_GPUS:-}}" ] && command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi -L
fi
"""
# The reservation outlives the check's time limit, so the check never runs outside it.
RESERVATION_SLACK_SECONDS: Final = 120


class StaleNode(Exception):
    """The Node changed between read and write (another writer's taint): next pass."""


@dataclass(frozen=True, slots=True)
class HealthTarget:
    kube: Kube
    rest: RestClient
    namespace: str
    cluster: str
    slurm_nodes: Mapping[str, Node]
    check_timeout_seconds: int


@dataclass
class Applied:
    done: list[tuple[ActionKind, str]] = field(default_factory=list)
    submitted: dict[str, int] = field(default_factory=dict)  # node -> check job id
    failed: set[str] = field(default_factory=set)


def check_job(action: HealthAction, node: Node | None, timeout_seconds: int) -> JobSubmission:
    """The check job of `action` (run-check): as many minutes as the check may take,
    the node's GPUs as Slurm counts them, in the node's partitions."""
    gpus = int(node.gpus) if node is not None else 0
    return JobSubmission(
        name=action.reservation,
        node=action.node,
        reservation=action.reservation,
        script=CHECK_SCRIPT.format(reservation=reservation_name(action.reservation), gpus=gpus),
        time_limit_minutes=min(max(-(-timeout_seconds // 60), 1), 1440),
        gpus=gpus,
        partitions=node.partitions if node is not None else (),
    )


def check_reservation(action: HealthAction, user: str, timeout_seconds: int) -> ReservationRequest:
    """Only the check's user may use it; IGNORE_JOBS: a drained node may still be
    finishing jobs when its signals clear."""
    return ReservationRequest(
        name=action.reservation,
        nodes=(action.node,),
        users=(user,),
        duration=timedelta(seconds=timeout_seconds + RESERVATION_SLACK_SECONDS),
        flags=frozenset({ReservationFlag.IGNORE_JOBS}),
    )


def _set_taint(kube: Kube, node: str, tainted: bool) -> None:
    raw = kube.get("v1", "Node", node, None)
    if raw is None:
        return
    current = (raw.get("spec") or {}).get("taints") or []
    wanted = with_health_taint(current, tainted)
    if wanted == current:
        return
    if not kube.set_node_taints(node, wanted, raw["metadata"]["resourceVersion"]):
        raise StaleNode(f"Node {node} changed while its taints were written")


def _requeue(rest: RestClient, node: str) -> None:
    for job in rest.list_jobs(("RUNNING", "SUSPENDED")):
        if node not in job.nodes or job.name.startswith(wk.CHECK_RESERVATION_PREFIX):
            continue
        try:
            rest.requeue_job(job.job_id)
        except SlurmError as err:
            # A job Slurm will not requeue (not batch, --no-requeue) ends on its own.
            log.warning("health requeue refused node=%s job=%d error=%s", node, job.job_id, err)


def _reserve(target: HealthTarget, action: HealthAction) -> None:
    request = check_reservation(action, target.rest.user, target.check_timeout_seconds)
    try:
        target.rest.create_reservation(request)
    except SlurmRejected:
        # Made by a pass that stopped before recording it: already there is done.
        target.rest.get_reservation(action.reservation)


def _resume(rest: RestClient, node: str) -> None:
    """Undrain only a health drain, read again just before (an admin may have
    drained the node since the pass's read; Slurm has no compare-and-set)."""
    current = rest.get_node(node)
    if current.drain and wk.is_health_drain(current.reason):
        rest.update_node_state(node, NodeStateChange.UNDRAIN)


def _release(rest: RestClient, reservation: str) -> None:
    with contextlib.suppress(SlurmNotFound):
        rest.delete_reservation(reservation)


def _apply(target: HealthTarget, action: HealthAction) -> int | None:
    rest, node = target.rest, action.node
    match action.kind:
        case ActionKind.DRAIN:
            rest.update_node_state(node, NodeStateChange.DRAIN, action.reason)
        case ActionKind.REQUEUE:
            _requeue(rest, node)
        case ActionKind.TAINT | ActionKind.UNTAINT:
            _set_taint(target.kube, node, action.kind == ActionKind.TAINT)
        case ActionKind.RESERVE:
            _reserve(target, action)
        case ActionKind.RESUME:
            _resume(rest, node)
        case ActionKind.RUN_CHECK:
            job = check_job(action, target.slurm_nodes.get(node), target.check_timeout_seconds)
            return rest.submit_job(job)
        case ActionKind.RELEASE:
            _release(rest, action.reservation)
    return None


def apply_health(target: HealthTarget, plan: HealthPlan) -> Applied:
    applied = Applied()
    for verdict in plan.verdicts:
        for action in verdict.actions:
            try:
                job = _apply(target, action)
            except (SlurmError, InvalidValue, StaleNode, ApiException, DynamicApiError) as err:
                log.warning(
                    "health action failed cluster=%s/%s node=%s action=%s error=%s",
                    target.namespace,
                    target.cluster,
                    action.node,
                    action.kind.value,
                    err,
                )
                applied.failed.add(action.node)
                break
            applied.done.append((action.kind, action.node))
            if job is not None:
                applied.submitted[action.node] = job
            metrics.HEALTH_ACTIONS.labels(target.namespace, target.cluster, action.kind.value).inc()
            log.info(
                "health action node=%s action=%s %s",
                action.node,
                action.kind.value,
                action.describe(),
            )
    return applied
