"""Operator HA: two operators on one Lease (client-go's leader election rules,
kube/leader_election.py). Kill the leader: the standby takes over. Restart the
API server while both run: at no sampled moment do both say they lead, and the
SlurmCluster still converges. Takeover times are printed (run with -s) and
recorded as test properties; they are measured, not asserted.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmkube_e2e.cluster import LocalCluster
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.layout import Layout
from slurmkube_e2e.operator import OperatorProcess, host_operator_env
from slurmkube_e2e.operator_cluster import API, docs, in_ctld, ready_cluster
from slurmkube_e2e.waiting import wait_for, wait_gone

pytestmark = pytest.mark.e2e

# The chart's defaults: takeover of a killed leader within ~12 s.
LEASE_ENV = {
    "SLURMKUBE_LEASE_DURATION_SECONDS": "10",
    "SLURMKUBE_LEASE_RENEW_DEADLINE_SECONDS": "7",
    "SLURMKUBE_LEASE_RETRY_PERIOD_SECONDS": "2",
}
STARTED = "Activity 'startup' succeeded"
LEADER_LINE = re.compile(rb"^slurmkube_leader (\S+)$", re.MULTILINE)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Replica:
    """One host-run operator and its /metrics, where it says whether it leads."""

    def __init__(self, name: str, env: dict[str, str], log: Path) -> None:
        self.name = name
        self.port = free_port()
        self.process = OperatorProcess(env, log, ["--metrics-port", str(self.port)])

    def restart(self, timeout: float = 120) -> None:
        """Start it again and wait until its lease thread runs (kopf's startup done)."""
        started = self.process.tail(10**7).count(STARTED)
        self.process.start()
        deadline = time.monotonic() + timeout
        while self.process.tail(10**7).count(STARTED) == started:
            assert time.monotonic() < deadline, f"{self.name} not started:\n{self.process.tail()}"
            time.sleep(0.2)

    def terminate(self) -> None:
        """SIGTERM, not waiting for the exit: a clean stop as a pod's."""
        assert self.process.proc is not None
        self.process.proc.terminate()

    def leads(self) -> bool | None:
        """slurmkube_leader as served now; None when it does not answer."""
        try:
            url = f"http://127.0.0.1:{self.port}/metrics"
            with urllib.request.urlopen(url, timeout=1) as resp:
                found = LEADER_LINE.search(resp.read())
        except OSError:
            return None
        return found is not None and float(found.group(1)) == 1.0


@pytest.fixture
def replicas(
    operator: OperatorProcess, kubeconfig: Path, namespace: str, tmp_path: Path
) -> Iterator[list[Replica]]:
    """Two operators whose Lease is in the test namespace; the session's operator
    is stopped meanwhile (it would act on the same SlurmCluster)."""
    operator.stop()
    pair = []
    for name in ("ha-a", "ha-b"):
        env = {**os.environ, **host_operator_env(kubeconfig, name, namespace), **LEASE_ENV}
        pair.append(Replica(name, env, tmp_path / f"{name}.log"))
    for replica in pair:
        replica.process.start()
    try:
        yield pair
    finally:
        for replica in pair:
            replica.process.stop()
        operator.start()


def the_leader(
    pair: list[Replica], timeout: float = 60, besides: Replica | None = None
) -> tuple[Replica, float]:
    """The one replica that says it leads (not `besides`), and how long until one did."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        leading = [r for r in pair if r.leads()]
        if len(leading) == 1 and leading[0] is not besides:
            return leading[0], time.monotonic() - started
        assert len(leading) < 2, "two operators lead at once"
        time.sleep(0.1)
    tails = "\n".join(r.process.tail(2000) for r in pair)
    raise AssertionError(f"no leader after {timeout}s:\n{tails}")


class Sampler(threading.Thread):
    """Samples both replicas as A, B, A: both leading with A on both sides of
    B's answer is two leaders at one moment (A leads one interval at a time)."""

    def __init__(self, pair: list[Replica]) -> None:
        super().__init__(daemon=True)
        self.pair = pair
        self.samples = 0
        self.overlaps: list[float] = []
        self.done = threading.Event()

    def run(self) -> None:
        a, b = self.pair
        while not self.done.is_set():
            if a.leads() and b.leads() and a.leads():
                self.overlaps.append(time.monotonic())
            self.samples += 1
            time.sleep(0.05)


def test_a_standby_takes_over_and_an_api_server_restart_never_makes_two_leaders(
    kube: Kube,
    kubeconfig: Path,
    namespace: str,
    replicas: list[Replica],
    record_property: pytest.RecordProperty,
) -> None:
    for doc in docs(namespace, replicas=2, max_time="1-00:00:00"):
        kube.apply(doc)
    ready_cluster(kube, namespace, timeout=240)
    first, elected = the_leader(replicas)
    print(f"\nfirst leader {first.name} after {elected:.1f}s")

    # SIGKILL: no release, the standby waits out the lease duration by its clock.
    killed_at = time.monotonic()
    first.process.kill()
    second, _ = the_leader(replicas, besides=first)
    crash_takeover = time.monotonic() - killed_at
    assert second is not first
    print(f"takeover after SIGKILL of {first.name}: {crash_takeover:.1f}s")
    record_property("takeover_after_kill_seconds", round(crash_takeover, 1))
    first.restart()

    # SIGTERM: the leader steps down and releases; the standby takes it at its
    # next try (kopf's own shutdown goes on for a while after that).
    stopped_at = time.monotonic()
    second.terminate()
    third, _ = the_leader(replicas, besides=second)
    clean_takeover = time.monotonic() - stopped_at
    assert third is first
    print(f"takeover after SIGTERM of {second.name}: {clean_takeover:.1f}s")
    record_property("takeover_after_stop_seconds", round(clean_takeover, 1))
    second.process.stop()
    second.restart()

    layout = Layout.from_env()
    if kubeconfig.resolve() != layout.kubeconfig.resolve():
        pytest.skip("restarting the API server needs the local control plane (not kind)")
    sampler = Sampler(replicas)
    sampler.start()
    try:
        # Down longer than the renew deadline: the leader steps down; the lease
        # is still its own when the API server is back, so it takes it again.
        LocalCluster(layout).restart("kube-apiserver", down_seconds=9)
        back_at = time.monotonic()
        leader, _ = the_leader(replicas, timeout=90)
        print(f"leader {leader.name} {time.monotonic() - back_at:.1f}s after the API server")
        time.sleep(5)
    finally:
        sampler.done.set()
        sampler.join(10)
    assert sampler.samples > 50
    assert sampler.overlaps == [], f"two leaders at {len(sampler.overlaps)} samples"

    # The SlurmCluster still converges: a new spec is carried out by the leader.
    for doc in docs(namespace, replicas=3, max_time="2-00:00:00"):
        kube.apply(doc)
    wait_for(
        kube,
        API,
        "SlurmCluster",
        "local",
        lambda o: (o.get("status") or {}).get("nodes", {}).get("idle") == 3,
        namespace=namespace,
        timeout=240,
    )
    assert "MaxTime=2-00:00:00" in in_ctld(namespace, "scontrol", "show", "partition", "gpu")

    # Leave the local nodes free for the next module (namespace deletion drains).
    kube.delete(API, "SlurmCluster", "local", namespace=namespace)
    kube.delete(API, "NodeSet", "local", namespace=namespace)
    for i in range(3):
        wait_gone(kube, "v1", "Pod", f"local-local-{i}", namespace=namespace, timeout=120)
