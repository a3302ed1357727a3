"""scontrol for a process outside the Slurm pods, authenticated by a JWT alone.

Why: 24.11's slurmrestd cannot write reservations, so the operator runs
scontrol. Slurm 24.11 clients never sign with slurm.key themselves: only
daemons named sackd/slurmd/slurmctld/slurmdbd do (`run_in_daemon` in
src/plugins/auth/slurm/auth_slurm.c); a client asks sackd through a socket at
a fixed path (/run/slurm/sack.socket, src/common/sack_api.c), one key per
mount namespace. But a client that finds SLURM_JWT in its environment uses
auth/jwt instead (src/interfaces/auth.c, `auth_g_init`), and slurmctld accepts
it because slurmkube's slurm.conf has `AuthAltTypes=auth/jwt` for slurmrestd.
So the operator needs what it already holds for slurmrestd (jwt.key), a
five-line client config naming slurmctld's address, and the scontrol binary:
no slurm.key, no sackd, no exec into a pod, no privilege. Verified against
24.11.5 here (create, show and delete a reservation from outside the
cluster's namespaces; a token from another key is refused).
"""

from __future__ import annotations

from pathlib import Path

from slurmkube.api import grammar
from slurmkube.slurm.cli import CliClient
from slurmkube.slurm.tokens import JwtMinter

__all__ = ["client_config", "jwt_cli_client", "write_client_config"]


# Those slurm.conf(5) TopologyPlugin takes; scontrol needs the cluster's one to
# unpack `show topology` ("topology plugin 103 not active" otherwise).
_TOPOLOGY_PLUGINS = frozenset(
    {"topology/default", "topology/block", "topology/tree", "topology/flat"}
)


def client_config(
    cluster_name: str,
    controller_host: str,
    controller_addr: str,
    port: int,
    topology_plugin: str = "topology/default",
) -> str:
    """The slurm.conf a client needs to reach slurmctld (slurm.conf(5))."""
    name = grammar.cluster_name(cluster_name, "cluster name")
    host = grammar.hostname(controller_host, "slurmctld host")
    addr = grammar.hostname(controller_addr, "slurmctld address")
    if not 0 < port < 65536:
        raise grammar.InvalidValue("slurmctld port", str(port), "1-65535")
    if topology_plugin not in _TOPOLOGY_PLUGINS:
        raise grammar.InvalidValue(
            "topology plugin", topology_plugin, ", ".join(sorted(_TOPOLOGY_PLUGINS))
        )
    return (
        "# Written by slurmkube for its own scontrol calls; authentication is SLURM_JWT.\n"
        f"ClusterName={name}\n"
        f"SlurmctldHost={host}({addr})\n"
        f"SlurmctldPort={port}\n"
        f"TopologyPlugin={topology_plugin}\n"
        # Overridden by SLURM_JWT (auth/jwt); named so a call without a token fails
        # the way any client of the cluster would.
        "AuthType=auth/slurm\n"
        "AuthAltTypes=auth/jwt\n"
    )


def write_client_config(config_dir: Path, config: str) -> Path:
    """`config_dir`/slurm.conf holding `config`, replaced atomically when it changed."""
    config_dir.mkdir(parents=True, exist_ok=True)
    path = config_dir / "slurm.conf"
    if not path.exists() or path.read_text() != config:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(config)
        tmp.replace(path)
    return path


def jwt_cli_client(
    *,
    config: str,
    config_dir: Path,
    jwt_key: bytes,
    user: str,
    bin_dir: Path | None = None,
    timeout: float = 30.0,
) -> CliClient:
    """A CliClient whose every call carries a fresh JWT for `user` (SlurmUser for writes)."""
    path = write_client_config(config_dir, config)
    minter = JwtMinter(jwt_key, user, lifespan=600)
    return CliClient(
        bin_dir=bin_dir,
        env={"SLURM_CONF": str(path), "PATH": "/usr/bin:/bin"},
        timeout=timeout,
        jwt=minter,
    )
