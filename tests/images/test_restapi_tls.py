"""slurmrestd behind TLS as its pod runs it (build/slurmrestd.py), from each Slurm
image: slurmrestd on a UNIX socket in a directory the two containers share,
the image's `stunnel` role on a loopback port with the configuration the
operator renders and a certificate it issues, and the operator's RestClient
verifying it for the Service's name. slurmrestd must serve nothing else: the
entrypoint's default listen address is not added beside the socket.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurmkube.build.names import ClusterNames
from slurmkube.build.slurmrestd import (
    PROXY_CONF,
    PROXY_DIR,
    SOCKET,
    SOCKET_DIR,
    TLS_CERT,
    TLS_DIR,
    TLS_KEY,
    stunnel_conf,
)
from slurmkube.controllers.certificates import issue_server_certificate
from slurmkube.slurm.rest import RestClient
from slurmkube_local.local_slurm import free_ports, listening, write_files

from .conftest import Podman
from .slurm_stack import RESTD_UID, host_mounts, start_slurm_stack, wait_until

SLURM_IMAGES = {"slurm-26.05": "26.05", "slurm-24.11": "24.11"}
NAMES = ClusterNames("tls", "team-a")


@pytest.mark.parametrize("name", sorted(SLURM_IMAGES))
def test_slurmrestd_answers_only_through_stunnel_with_the_issued_certificate(
    name: str, images: dict[str, str], podman: Podman, tmp_path: Path
) -> None:
    series = SLURM_IMAGES[name]
    prefix = f"slurmkube-tls-{os.getpid()}-{series}"
    stack = start_slurm_stack(podman, images[name], tmp_path, prefix, ["tls-n1"], series=series)
    issued = issue_server_certificate(NAMES.restapi_dns_names)
    (port,) = free_ports(1)
    proxy = write_files(
        tmp_path / "proxy", {PROXY_CONF: stunnel_conf(f"127.0.0.1:{port}").encode()}, RESTD_UID
    )
    tls = write_files(
        tmp_path / "tls", {TLS_CERT: issued.cert_pem, TLS_KEY: issued.key_pem}, RESTD_UID
    )
    run = tmp_path / "run-slurmrestd"
    run.mkdir()
    os.chown(run, RESTD_UID, RESTD_UID)
    rest_etc = tmp_path / "rest"  # start_slurm_stack's: the rendered files, no key
    user = f"--user={RESTD_UID}:{RESTD_UID}"
    restd = podman.start(
        f"{prefix}-slurmrestd-unix",
        images[name],
        "slurmrestd",
        *("-a", "rest_auth/jwt", "-s", "openapi/slurmctld", f"unix:{SOCKET}"),
        options=host_mounts(
            "tls-rest",
            rest_etc,
            user,
            "--env=SLURM_CONF=/etc/slurm/slurm.conf",
            "--env=SLURM_JWT=daemon",
            *("-v", f"{run}:{SOCKET_DIR}"),
        ),
    )
    wait_until((run / Path(SOCKET).name).is_socket, "slurmrestd's socket", podman)
    podman.start(
        f"{prefix}-tls",
        images[name],
        "stunnel",
        f"{PROXY_DIR}/{PROXY_CONF}",
        options=(
            "--network=host",
            user,
            *("-v", f"{proxy}:{PROXY_DIR}:ro"),
            *("-v", f"{tls}:{TLS_DIR}:ro"),
            *("-v", f"{run}:{SOCKET_DIR}"),
        ),
    )
    wait_until(lambda: listening(port), "stunnel on its port", podman)

    server = NAMES.restapi_dns_names[-1]
    url = f"https://127.0.0.1:{port}"
    with RestClient(url, jwt_key=stack.jwt_key, ca_pem=issued.ca_pem, server_name=server) as c:
        assert any(ping.responding for ping in c.ping()), podman.logs()

    # Nothing but the socket: slurmrestd's environment names no listen address.
    environ = podman(
        "exec",
        restd,
        "bash",
        "-c",
        'for p in /proc/[0-9]*; do [ "$(cat $p/comm)" = slurmrestd ] '
        "&& tr '\\0' '\\n' < $p/environ; done",
    )
    assert "SLURMRESTD_LISTEN=" not in environ, environ
