"""Only the leader acts: the operator's Lease started with the configured
durations and shown as `slurmkube_leader`, and the guard for kopf handlers.

kopf runs `standalone` (its peering is by priority, not a lease with these
rules: two operators of equal priority both keep running), so every replica
receives every handler call. The work queues ask `memory.leading()` before
each reconcile; delete handlers call `leader_only` first: a standby raises
kopf.TemporaryError, so it neither acts nor lets kopf remove the finalizer,
and the leader's handler does both.
"""

from __future__ import annotations

import kopf
from kubernetes import client as k8s

from slurmkube import metrics
from slurmkube.controllers.settings import Settings
from slurmkube.kube.lease import LeaderLease


def start_lease(api: k8s.ApiClient, settings: Settings) -> LeaderLease:
    lease = LeaderLease(api, settings.namespace, settings.identity, timing=settings.lease_timing)
    lease.start()
    metrics.LEADER.set_function(lambda: float(lease.is_leader))
    return lease


def leader_only(lease: LeaderLease | None, kind: str, namespace: str | None, name: str) -> None:
    """Return only on the leader; elsewhere kopf retries the handler a retry period later."""
    if lease is None or not lease.is_leader:
        delay = lease.timing.retry_period if lease is not None else 1.0
        raise kopf.TemporaryError(f"{kind} {namespace}/{name}: not the leader", delay=delay)
