"""TLS in front of slurmrestd as its pod runs it (build/slurmrestd.py): slurmrestd
on a UNIX socket, Debian's stunnel on the port with the configuration the
operator renders and a certificate it issues (controllers/certificates.py), and
the operator's RestClient trusting only that certificate's CA for the Service's
name while it dials an address.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurmkube.build.names import ClusterNames
from slurmkube.build.slurmrestd import TLS_CERT, TLS_KEY, stunnel_conf
from slurmkube.controllers.certificates import IssuedCertificate, issue_server_certificate
from slurmkube.slurm.errors import SlurmUnreachable
from slurmkube.slurm.rest import RestClient
from slurmkube_local.local_slurm import LocalSlurm, free_ports, listening

pytestmark = pytest.mark.integration

NAMES = ClusterNames("tls", "team-a")


@dataclass(frozen=True)
class TlsSlurmrestd:
    url: str
    issued: IssuedCertificate
    socket: Path


def _wait(check: object, what: str, process: subprocess.Popen[bytes], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"{what} exited"
        if callable(check) and check():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} not ready after {timeout:.0f}s")


@pytest.fixture
def tls_slurmrestd(slurm_cluster: LocalSlurm, tmp_path: Path) -> Iterator[TlsSlurmrestd]:
    stunnel = shutil.which("stunnel4") or shutil.which("stunnel")
    assert stunnel, "stunnel4 is a host dependency (images/slurm/build-local.sh)"
    sock = tmp_path / "run" / "slurmrestd.socket"
    sock.parent.mkdir()
    env = {k: v for k, v in slurm_cluster.env.items() if not k.startswith("SLURM_SACK")}
    env |= {"SLURM_JWT": "daemon", "SLURMRESTD_SECURITY": "disable_user_check"}
    argv = [str(slurm_cluster.prefix / "sbin" / "slurmrestd"), "-a", "rest_auth/jwt"]
    argv += ["-s", "openapi/slurmctld", f"unix:{sock}"]
    issued = issue_server_certificate(NAMES.restapi_dns_names)
    tls_dir = tmp_path / "tls"
    tls_dir.mkdir()
    (tls_dir / TLS_CERT).write_bytes(issued.cert_pem)
    (tls_dir / TLS_KEY).write_bytes(issued.key_pem)
    (tls_dir / TLS_KEY).chmod(0o600)
    (port,) = free_ports(1)
    conf = tmp_path / "stunnel.conf"
    conf.write_text(stunnel_conf(f"127.0.0.1:{port}", str(sock), str(tls_dir)))
    with open(tmp_path / "slurmrestd.log", "wb") as log:
        restd = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    with open(tmp_path / "stunnel.log", "wb") as log:
        proxy = subprocess.Popen([stunnel, str(conf)], stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait(sock.is_socket, "slurmrestd", restd)
        _wait(lambda: listening(port), "stunnel", proxy)
        yield TlsSlurmrestd(f"https://127.0.0.1:{port}", issued, sock)
    finally:
        for process in (proxy, restd):
            process.terminate()
            process.wait(timeout=10)


def _client(server: TlsSlurmrestd, key: bytes, **tls: object) -> RestClient:
    return RestClient(server.url, jwt_key=key, user="root", attempts=1, **tls)  # type: ignore[arg-type]


def test_the_operator_reads_slurm_through_tls_trusting_only_the_clusters_ca(
    slurm_cluster: LocalSlurm, tls_slurmrestd: TlsSlurmrestd
) -> None:
    key = (slurm_cluster.conf_dir / "jwt.key").read_bytes()
    name = NAMES.restapi_dns_names[-1]
    with _client(tls_slurmrestd, key, ca_pem=tls_slurmrestd.issued.ca_pem, server_name=name) as c:
        assert any(ping.responding for ping in c.ping())
        assert {n.name for n in c.list_nodes()} >= set(slurm_cluster.nodes)


@pytest.mark.parametrize("case", ["another CA", "the system CAs", "another name", "plain HTTP"])
def test_a_client_that_cannot_verify_the_server_gets_no_answer(
    slurm_cluster: LocalSlurm, tls_slurmrestd: TlsSlurmrestd, case: str
) -> None:
    key = (slurm_cluster.conf_dir / "jwt.key").read_bytes()
    name = NAMES.restapi_dns_names[-1]
    other = issue_server_certificate(NAMES.restapi_dns_names).ca_pem
    server = tls_slurmrestd
    clients = {
        "another CA": lambda: _client(server, key, ca_pem=other, server_name=name),
        "the system CAs": lambda: _client(server, key, server_name=name),
        "another name": lambda: _client(
            server, key, ca_pem=server.issued.ca_pem, server_name="slurmrestd.elsewhere.svc"
        ),
        "plain HTTP": lambda: RestClient(
            server.url.replace("https:", "http:"), jwt_key=key, user="root", attempts=1
        ),
    }
    with clients[case]() as client, pytest.raises(SlurmUnreachable):
        client.ping()
