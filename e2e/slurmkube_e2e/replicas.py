"""Operators in HA for e2e tests: host-run replicas on one Lease, each serving
/metrics where it says whether it leads, and a sampler that catches two leaders
at one moment (test_operator_ha, the chaos suite)."""

from __future__ import annotations

import re
import socket
import threading
import time
import urllib.request
from pathlib import Path

from slurmkube_e2e.operator import OperatorProcess

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

    def __init__(self, pair: list[Replica], interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.pair = pair
        self.interval = interval
        self.samples = 0
        self.overlaps: list[float] = []
        self.done = threading.Event()

    def run(self) -> None:
        a, b = self.pair
        while not self.done.is_set():
            if a.leads() and b.leads() and a.leads():
                self.overlaps.append(time.monotonic())
            self.samples += 1
            time.sleep(self.interval)
