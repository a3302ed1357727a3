"""slurmrestd needs neither key: build/slurmrestd.py mounts none (without accounting).

With `SLURM_JWT=daemon` auth/jwt is slurmrestd's primary plugin: it passes each
client's token through to slurmctld, which verifies it with jwt.key. So a
slurmrestd whose config directory holds no slurm.key and no jwt.key (its
slurm.conf still names `jwt_key=`) answers authenticated reads.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmkube.slurm.rest import RestClient
from slurmkube_local.local_slurm import LocalSlurm, free_ports

pytestmark = pytest.mark.integration


@pytest.fixture
def keyless_slurmrestd(slurm_cluster: LocalSlurm, tmp_path: Path) -> Iterator[str]:
    etc = tmp_path / "etc"
    etc.mkdir()
    for path in slurm_cluster.conf_dir.iterdir():
        if path.is_file() and path.suffix != ".key":
            shutil.copy(path, etc / path.name)
    conf = (etc / "slurm.conf").read_text()
    missing = etc / "jwt.key"
    (etc / "slurm.conf").write_text(
        conf.replace(str(slurm_cluster.conf_dir / "jwt.key"), str(missing))
    )
    env = {k: v for k, v in slurm_cluster.env.items() if not k.startswith("SLURM_SACK")}
    env |= {
        "SLURM_CONF": str(etc / "slurm.conf"),
        "SLURM_JWT": "daemon",
        "SLURMRESTD_SECURITY": "disable_user_check",
    }
    (port,) = free_ports(1)
    argv = [str(slurm_cluster.prefix / "sbin" / "slurmrestd"), "-a", "rest_auth/jwt"]
    argv += ["-s", "openapi/slurmctld", f"127.0.0.1:{port}"]
    with open(tmp_path / "slurmrestd.log", "wb") as log:
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        assert not list(etc.glob("*.key"))
        _wait_listening(port, process)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_slurmrestd_without_keys_forwards_tokens_to_slurmctld(
    slurm_cluster: LocalSlurm, keyless_slurmrestd: str
) -> None:
    key = (slurm_cluster.conf_dir / "jwt.key").read_bytes()
    client = RestClient(keyless_slurmrestd, jwt_key=key, user="root")
    assert any(ping.responding for ping in client.ping())
    assert {n.name for n in client.list_nodes()} >= set(slurm_cluster.nodes)


def _wait_listening(port: int, process: subprocess.Popen[bytes], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "slurmrestd exited without its keys"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"slurmrestd not listening on {port} after {timeout:.0f}s")
