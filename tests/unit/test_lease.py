"""The Lease adapter: timeouts on every call, any error a failed attempt,
resourceVersion on every update, stepping down by time, release on stop."""

from __future__ import annotations

import copy
import datetime as dt
import socket
import time
from typing import Any

import pytest
import urllib3
from kubernetes import client as k8s

from slurmkube.controllers.settings import Settings
from slurmkube.kube.leader_election import Timing
from slurmkube.kube.lease import LeaderLease

TIMING = Timing(lease_duration=10.0, renew_deadline=7.0, retry_period=2.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeLeases:
    """One Lease as the API server keeps it; `fail` raises on the next calls."""

    def __init__(self) -> None:
        self.lease: k8s.V1Lease | None = None
        self.version = 0
        self.fail: list[Exception] = []
        self.timeouts: list[float] = []

    def _call(self, kwargs: dict[str, Any]) -> None:
        self.timeouts.append(kwargs["_request_timeout"])
        if self.fail:
            raise self.fail.pop(0)

    def read_namespaced_lease(self, name: str, namespace: str, **kw: Any) -> k8s.V1Lease:
        self._call(kw)
        if self.lease is None:
            raise k8s.ApiException(status=404)
        return copy.deepcopy(self.lease)

    def _store(self, body: k8s.V1Lease) -> k8s.V1Lease:
        self.version += 1
        body.metadata.resource_version = str(self.version)
        self.lease = copy.deepcopy(body)
        return body

    def create_namespaced_lease(self, namespace: str, body: k8s.V1Lease, **kw: Any) -> Any:
        self._call(kw)
        if self.lease is not None:
            raise k8s.ApiException(status=409)
        return self._store(body)

    def replace_namespaced_lease(
        self, name: str, namespace: str, body: k8s.V1Lease, **kw: Any
    ) -> k8s.V1Lease:
        self._call(kw)
        if body.metadata.resource_version != str(self.version):
            raise k8s.ApiException(status=409)
        return self._store(body)

    def hold(self, holder: str) -> None:
        now = dt.datetime.now(dt.UTC)
        spec = k8s.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=10, renew_time=now)
        self._store(k8s.V1Lease(metadata=k8s.V1ObjectMeta(name="slurmkube-operator"), spec=spec))


def lease(api: FakeLeases, clock: Clock, identity: str = "a") -> LeaderLease:
    held = LeaderLease(k8s.ApiClient(), "ops", identity, timing=TIMING, clock=clock)
    held.coordination = api  # type: ignore[assignment]
    return held


def test_a_missing_lease_is_created_and_held_with_a_timeout_on_every_call() -> None:
    api, clock = FakeLeases(), Clock()
    held = lease(api, clock)
    held.attempt()
    assert held.is_leader
    assert api.lease is not None and api.lease.spec.holder_identity == "a"
    assert api.timeouts == [TIMING.request_timeout] * 2


@pytest.mark.parametrize(
    "error",
    [
        k8s.ApiException(status=500),
        urllib3.exceptions.MaxRetryError(None, "/", "connection refused"),  # type: ignore[arg-type]
        urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out"),  # type: ignore[arg-type]
        ValueError("garbled answer"),
    ],
    ids=["api-500", "connection-refused", "read-timeout", "anything"],
)
def test_the_leader_steps_down_at_the_renew_deadline_whatever_the_error(error: Exception) -> None:
    api, clock = FakeLeases(), Clock()
    held = lease(api, clock)
    held.attempt()
    api.fail = [error] * 10
    for _ in range(3):
        clock.now += TIMING.retry_period
        with pytest.raises(type(error)):
            held.attempt()
    assert held.is_leader  # 6 s since the last renew began
    clock.now += 1.0
    assert not held.is_leader
    api.fail = []
    held.attempt()  # its own lease: taken back at once
    assert held.is_leader


def test_the_lease_thread_survives_errors_and_keeps_trying() -> None:
    api = FakeLeases()
    api.fail = [RuntimeError("boom"), urllib3.exceptions.ProtocolError("reset")]
    fast = Timing(lease_duration=1.0, renew_deadline=0.5, retry_period=0.05)
    held = LeaderLease(k8s.ApiClient(), "ops", "a", timing=fast)
    held.coordination = api  # type: ignore[assignment]
    held.start()
    try:
        deadline = time.monotonic() + 5
        while not held.is_leader and time.monotonic() < deadline:
            time.sleep(0.02)
        assert held.is_leader
    finally:
        held.stop()
    assert not held.is_leader


def seen_held_by(holder: str) -> tuple[FakeLeases, Clock, LeaderLease]:
    """Replica "a" after one attempt on a Lease that `holder` holds."""
    api, clock = FakeLeases(), Clock()
    api.hold(holder)
    candidate = lease(api, clock)
    candidate.attempt()
    return api, clock, candidate


def test_a_lease_held_by_another_is_taken_only_after_the_lease_duration_unchanged() -> None:
    api, clock, candidate = seen_held_by("b")
    clock.now += 9.9
    candidate.attempt()
    assert not candidate.is_leader
    clock.now += 0.1
    candidate.attempt()
    assert candidate.is_leader
    assert api.lease is not None and api.lease.spec.lease_transitions == 1


def test_an_update_carries_the_resource_version_read() -> None:
    api, clock, candidate = seen_held_by("b")
    clock.now += 10.0

    # b renews between our read and our write: our write is refused.
    original = api.read_namespaced_lease

    def read_then_renew(name: str, namespace: str, **kw: Any) -> k8s.V1Lease:
        answer = original(name, namespace, **kw)
        api.hold("b")
        return answer

    api.read_namespaced_lease = read_then_renew  # type: ignore[method-assign]
    with pytest.raises(k8s.ApiException):
        candidate.attempt()
    assert not candidate.is_leader
    assert api.lease is not None and api.lease.spec.holder_identity == "b"


def test_stop_steps_down_and_releases_the_lease() -> None:
    api, clock = FakeLeases(), Clock()
    held = lease(api, clock)
    held.attempt()
    held.stop()
    assert not held.is_leader
    assert api.lease is not None and api.lease.spec.holder_identity == ""
    other = lease(api, clock, "b")
    other.attempt()
    assert other.is_leader


def test_the_lease_durations_come_from_the_environment() -> None:
    env = {
        "SLURMKUBE_LEASE_DURATION_SECONDS": "20",
        "SLURMKUBE_LEASE_RENEW_DEADLINE_SECONDS": "12.5",
        "SLURMKUBE_LEASE_RETRY_PERIOD_SECONDS": "3",
    }
    assert Settings.from_environment(env).lease_timing == Timing(20.0, 12.5, 3.0)
    assert Settings.from_environment({}).lease_timing == Timing()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SLURMKUBE_LEASE_RENEW_DEADLINE_SECONDS": "ten"}, "RENEW_DEADLINE_SECONDS: not a number"),
        ({"SLURMKUBE_LEASE_RENEW_DEADLINE_SECONDS": "10"}, "renew_deadline .* below"),
        ({"SLURMKUBE_LEASE_DURATION_SECONDS": "-5"}, "lease_duration: must be a positive"),
    ],
)
def test_bad_lease_durations_are_refused_naming_the_variable(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Settings.from_environment(env)


def test_a_lease_call_is_tried_once_within_its_timeout() -> None:
    # A server that accepts and never answers: one read timeout, not urllib3's
    # three retries of it (which would outlast the renew deadline).
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        config = k8s.Configuration(host=f"http://127.0.0.1:{server.getsockname()[1]}")
        held = LeaderLease(k8s.ApiClient(config), "ops", "a", timing=TIMING)
        started = time.monotonic()
        with pytest.raises(urllib3.exceptions.HTTPError):
            held.attempt()
        assert time.monotonic() - started < 2.5 * TIMING.request_timeout
