"""slurmdbd.conf for the accounting daemon and its external MariaDB (pure).

The database password is the one secret that reaches a Slurm file, so the
whole file goes into a Secret, never a ConfigMap, and every value passes the
grammar like any other: a password with a space or `#` could otherwise end
the value early and start a directive of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmkube.api import grammar
from slurmkube.api import well_known as wk
from slurmkube.api.grammar import SlurmToken
from slurmkube.api.models import SlurmCluster
from slurmkube.render.templating import render_template

SLURMDBD_PORT = wk.SLURMDBD_PORT


@dataclass(frozen=True, slots=True)
class DatabaseCredentials:
    """`username` and `password` of the Secret `spec.accounting.database.secretName`."""

    username: str
    password: str

    def __repr__(self) -> str:  # never a password in a log line or a traceback
        return f"DatabaseCredentials(username={self.username!r}, password=<redacted>)"


@dataclass(frozen=True, slots=True)
class SlurmdbdConfig:
    config_dir: SlurmToken
    run_dir: SlurmToken
    slurm_user: SlurmToken
    port: int
    storage_host: SlurmToken
    storage_port: int
    storage_loc: SlurmToken
    storage_user: SlurmToken
    storage_pass: SlurmToken


def plan_slurmdbd(
    cluster: SlurmCluster,
    credentials: DatabaseCredentials,
    *,
    config_dir: str,
    run_dir: str,
    slurm_user: str,
) -> SlurmdbdConfig:
    """Raises InvalidValue naming the field (or the Secret key) that is wrong."""
    database = cluster.spec.accounting.database
    where = f"SlurmCluster {cluster.metadata.name} spec.accounting.database"
    if database is None:
        raise grammar.InvalidValue(where, "null", "a database when accounting is enabled")
    secret = f"Secret {database.secret_name}"
    return SlurmdbdConfig(
        config_dir=grammar.file_path(config_dir, "context.config_dir"),
        run_dir=grammar.file_path(run_dir, "context.run_dir"),
        slurm_user=grammar.feature(slurm_user, "context.slurm_user"),
        port=SLURMDBD_PORT,
        storage_host=grammar.address(database.host, f"{where}.host"),
        storage_port=database.port,
        storage_loc=grammar.database_name(database.name, f"{where}.name"),
        storage_user=grammar.database_user(credentials.username, f"{secret} key username"),
        storage_pass=grammar.database_password(credentials.password, f"{secret} key password"),
    )


def render_slurmdbd_conf(config: SlurmdbdConfig) -> str:
    return render_template("slurmdbd.conf.j2", d=config)
