"""The slurmctld pod's config reloader, run as bash with a stand-in scontrol."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slurmkube.api import well_known as wk
from slurmkube.build import reloader


class Pod:
    """A config volume, the reloader's emptyDir, and an scontrol that logs its calls."""

    def __init__(self, root: Path) -> None:
        self.config, self.state, bin_dir = root / "etc", root / "state", root / "bin"
        for d in (self.config, self.state, bin_dir):
            d.mkdir()
        self.calls = root / "scontrol.calls"
        self.fail = root / "scontrol.fail"
        scontrol = bin_dir / "scontrol"
        scontrol.write_text(
            f'#!/bin/bash\n[[ -e {self.fail} ]] && exit 1\necho "$*" >>{self.calls}\n'
        )
        scontrol.chmod(0o755)
        self.script = reloader.SCRIPT.replace(wk.CONFIG_DIR, str(self.config)).replace(
            reloader.STATE_DIR, str(self.state)
        )
        self.path = f"{bin_dir}:/usr/bin:/bin"
        self.proc: subprocess.Popen[str] | None = None

    def land(self, config_hash: str) -> None:
        """As the kubelet does: the new file appears whole (a rename)."""
        tmp = self.config / ".new"
        tmp.write_text(config_hash + "\n")
        tmp.rename(self.config / "config-hash")

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["bash", "-c", self.script],
            env={"PATH": self.path},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        # Once it has taken the mounted files as applied (as slurmctld read them):
        # the file exists, empty, before the hash is read into it.
        applied = self.state / "applied"
        wait_for(lambda: applied.exists() and applied.stat().st_size > 0)

    def stop(self) -> str:
        assert self.proc is not None
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=5)
        return out

    def reconfigures(self) -> int:
        return len(self.calls.read_text().splitlines()) if self.calls.exists() else 0


@pytest.fixture
def pod(tmp_path: Path) -> Iterator[Pod]:
    p = Pod(tmp_path)
    yield p
    if p.proc is not None and p.proc.poll() is None:
        p.stop()


def wait_for(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "reloader did not act in time"
        time.sleep(0.05)


def test_each_new_hash_costs_one_reconfigure_and_the_files_at_start_none(pod: Pod) -> None:
    pod.land("a")
    pod.start()
    time.sleep(3 * reloader.POLL_SECONDS)
    assert pod.reconfigures() == 0  # slurmctld started on these files
    pod.land("b")
    wait_for(lambda: pod.reconfigures() == 1)
    time.sleep(3 * reloader.POLL_SECONDS)
    assert pod.reconfigures() == 1
    pod.land("c")
    wait_for(lambda: pod.reconfigures() == 2)
    # Its log line follows the reconfigure; stopped before it, the line is lost.
    wait_for(lambda: (pod.state / "applied").read_text().strip() == "c")
    time.sleep(2 * reloader.POLL_SECONDS)
    out = pod.stop()
    assert "reconfigured config-hash=b" in out and "reconfigured config-hash=c" in out
    assert pod.calls.read_text().splitlines() == ["reconfigure", "reconfigure"]


def test_a_restarted_reloader_catches_up_on_a_change_it_missed(pod: Pod) -> None:
    pod.land("a")
    pod.start()
    time.sleep(2 * reloader.POLL_SECONDS)
    pod.stop()
    pod.land("b")  # while the container was down
    pod.start()
    wait_for(lambda: pod.reconfigures() == 1)


def test_a_failed_reconfigure_is_retried_until_it_succeeds(pod: Pod) -> None:
    pod.land("a")
    pod.fail.touch()  # slurmctld restarting
    pod.start()
    pod.land("b")
    time.sleep(3 * reloader.POLL_SECONDS)
    assert pod.reconfigures() == 0
    pod.fail.unlink()
    wait_for(lambda: pod.reconfigures() == 1, timeout=reloader.RETRY_SECONDS + 3)
    assert "failed config-hash=b; retrying" in pod.stop()
