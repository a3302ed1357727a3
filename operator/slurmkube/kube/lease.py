"""Leader election on a coordination.k8s.io Lease, so two operator replicas are safe.

Only the holder reconciles; the other waits and takes over when the holder
stops renewing (crash, node loss) for `duration` seconds.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading

from kubernetes import client as k8s

log = logging.getLogger(__name__)


class LeaderLease:
    def __init__(
        self,
        api: k8s.ApiClient,
        namespace: str,
        identity: str,
        name: str = "slurmkube-operator",
        duration: int = 15,
    ) -> None:
        self.coordination = k8s.CoordinationV1Api(api)
        self.namespace = namespace
        self.identity = identity
        self.name = name
        self.duration = duration
        self._leader = threading.Event()
        self._stop = threading.Event()

    @property
    def is_leader(self) -> bool:
        return self._leader.is_set()

    def start(self) -> None:
        threading.Thread(target=self._run, name="leader-lease", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                held = self._try_acquire()
            except k8s.ApiException as err:
                log.warning("lease error status=%s", err.status)
                held = False
            if held != self.is_leader:
                log.info("leadership changed leader=%s identity=%s", held, self.identity)
            (self._leader.set if held else self._leader.clear)()
            self._stop.wait(self.duration / 3)

    def _try_acquire(self) -> bool:
        now = dt.datetime.now(dt.UTC)
        try:
            lease = self.coordination.read_namespaced_lease(self.name, self.namespace)
        except k8s.ApiException as err:
            if err.status != 404:
                raise
            body = k8s.V1Lease(
                metadata=k8s.V1ObjectMeta(name=self.name, namespace=self.namespace),
                spec=self._spec(now, transitions=0),
            )
            self.coordination.create_namespaced_lease(self.namespace, body)
            return True
        spec = lease.spec or k8s.V1LeaseSpec()
        renewed = spec.renew_time or spec.acquire_time
        expired = renewed is None or (now - renewed).total_seconds() > (
            spec.lease_duration_seconds or self.duration
        )
        if spec.holder_identity != self.identity and not expired:
            return False
        transitions = (spec.lease_transitions or 0) + (spec.holder_identity != self.identity)
        lease.spec = self._spec(
            now,
            transitions,
            acquired=spec.acquire_time if spec.holder_identity == self.identity else now,
        )
        # Replace carries the resourceVersion we read: a racing candidate gets a 409.
        self.coordination.replace_namespaced_lease(self.name, self.namespace, lease)
        return True

    def _spec(
        self, now: dt.datetime, transitions: int, acquired: dt.datetime | None = None
    ) -> k8s.V1LeaseSpec:
        return k8s.V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=self.duration,
            acquire_time=acquired or now,
            renew_time=now,
            lease_transitions=transitions,
        )
