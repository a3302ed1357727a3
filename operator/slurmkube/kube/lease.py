"""Leader election on a coordination.k8s.io Lease, so two operator replicas are safe.

The calls only; every decision is `kube/leader_election.py`'s. `is_leader`
is computed from the local monotonic clock at each look, so a thread stuck in
a call, a thread that died, or an API server that is down all end leadership
at the renew deadline: nothing has to happen for the leader to step down.
Every call has a timeout; any exception is a failed attempt, logged, and the
loop keeps trying every retry period.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import random
import threading
import time
from collections.abc import Callable

from kubernetes import client as k8s

from slurmkube.kube.leader_election import (
    Create,
    Elector,
    LeaseRecord,
    Timing,
    Update,
    Wait,
    on_read,
    on_written,
    release,
)

log = logging.getLogger(__name__)


class LeaderLease:
    def __init__(
        self,
        api: k8s.ApiClient,
        namespace: str,
        identity: str,
        *,
        name: str = "slurmkube-operator",
        timing: Timing | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        # Its own connection pool (renewals never queue behind reconciles) and no
        # urllib3 retries: one try per call, bounded by the request timeout; the
        # retry period is the retry.
        config = copy.deepcopy(api.configuration)
        config.retries = False
        self.coordination = k8s.CoordinationV1Api(k8s.ApiClient(config))
        self.namespace = namespace
        self.name = name
        self._clock = clock
        self._wall = wall
        # Replaced whole by the lease thread; readers see one consistent value.
        self._elector = Elector(identity, timing or Timing())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reported = False

    @property
    def timing(self) -> Timing:
        return self._elector.timing

    @property
    def identity(self) -> str:
        return self._elector.identity

    @property
    def is_leader(self) -> bool:
        # Stopped means stepped down, whatever a last in-flight write returns.
        return not self._stop.is_set() and self._elector.leading(self._clock())

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="leader-lease", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing and hand the lease over (a candidate takes it at its next try)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2 * self._elector.timing.request_timeout + 1)
            if self._thread.is_alive():  # a write may still land: let the lease expire
                log.warning(
                    "lease not released, its thread is in a call identity=%s", self.identity
                )
                return
        self._elector, write = release(self._elector, self._wall())
        self._report()
        if write is None:
            return
        try:
            self._update(write, self._clock())
            log.info("lease released identity=%s", self.identity)
        except Exception as err:  # the holder expires by itself; only slower
            log.warning("lease release failed identity=%s error=%r", self.identity, err)

    def _run(self) -> None:
        timing = self._elector.timing
        try:
            while not self._stop.is_set():
                try:
                    self.attempt()
                except Exception as err:
                    # Any error: leadership lapses at the renew deadline by itself.
                    log.warning("lease attempt failed identity=%s error=%r", self.identity, err)
                self._report()
                # client-go jitters a candidate's retries (not the leader's) so
                # that candidates do not all hit the API server at once.
                jitter = 0.0 if self.is_leader else random.uniform(0, 0.2)
                self._stop.wait(timing.retry_period * (1 + jitter))
        finally:
            if not self._stop.is_set():
                log.error("lease thread ended identity=%s; leadership lapses", self.identity)

    def attempt(self) -> None:
        """One read, and the write it decides."""
        started = self._clock()
        found = self._read()
        self._elector, decision = on_read(self._elector, found, self._clock(), self._wall())
        if isinstance(decision, Wait):
            return
        if isinstance(decision, Create):
            self._create(decision.record, started)
        else:
            self._update(decision, started)

    def _report(self) -> None:
        leading = self.is_leader
        if leading != self._reported:
            self._reported = leading
            log.info("leadership changed leader=%s identity=%s", leading, self.identity)

    def _read(self) -> tuple[LeaseRecord, str] | None:
        try:
            lease = self.coordination.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self._timeout
            )
        except k8s.ApiException as err:
            if err.status == 404:
                return None
            raise
        return _record_of(lease.spec or k8s.V1LeaseSpec()), _version(lease)

    def _create(self, record: LeaseRecord, started: float) -> None:
        body = k8s.V1Lease(
            metadata=k8s.V1ObjectMeta(name=self.name, namespace=self.namespace),
            spec=_spec_of(record),
        )
        made = self.coordination.create_namespaced_lease(
            self.namespace, body, _request_timeout=self._timeout
        )
        self._written(record, made, started)

    def _update(self, update: Update, started: float) -> None:
        # The resourceVersion read: a write racing ours makes this a 409.
        body = k8s.V1Lease(
            metadata=k8s.V1ObjectMeta(
                name=self.name, namespace=self.namespace, resource_version=update.version
            ),
            spec=_spec_of(update.record),
        )
        made = self.coordination.replace_namespaced_lease(
            self.name, self.namespace, body, _request_timeout=self._timeout
        )
        self._written(update.record, made, started)

    def _written(self, record: LeaseRecord, lease: k8s.V1Lease, started: float) -> None:
        self._elector = on_written(self._elector, record, _version(lease), started, self._clock())

    @property
    def _timeout(self) -> float:
        return self._elector.timing.request_timeout


def _version(lease: k8s.V1Lease) -> str:
    if lease.metadata is None or not lease.metadata.resource_version:
        raise ValueError("the API server answered a Lease call without a resourceVersion")
    return str(lease.metadata.resource_version)


def _record_of(spec: k8s.V1LeaseSpec) -> LeaseRecord:
    return LeaseRecord(
        holder=spec.holder_identity or "",
        duration_seconds=int(spec.lease_duration_seconds or 0),
        acquire_time=_seconds(spec.acquire_time),
        renew_time=_seconds(spec.renew_time),
        transitions=int(spec.lease_transitions or 0),
    )


def _spec_of(record: LeaseRecord) -> k8s.V1LeaseSpec:
    return k8s.V1LeaseSpec(
        holder_identity=record.holder,
        lease_duration_seconds=record.duration_seconds,
        acquire_time=dt.datetime.fromtimestamp(record.acquire_time, dt.UTC),
        renew_time=dt.datetime.fromtimestamp(record.renew_time, dt.UTC),
        lease_transitions=record.transitions,
    )


def _seconds(moment: dt.datetime | None) -> float:
    return moment.timestamp() if moment is not None else 0.0
