"""A real slurmdbd on loopback, over a private MariaDB, for accounting tests.

MariaDB gets its own data directory and a loopback port; slurmdbd (from the
host Slurm build) stores into it and listens on another loopback port;
`sacctmgr` reaches it through a minimal slurm.conf. No slurmctld: the
`gres/gpu` TRES slurmctld would register (AccountingStorageTRES) is added to
the database directly, before slurmdbd starts and loads the TRES table.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from slurmkube_local.local_slurm import free_ports, slurm_prefix

CLUSTER = "policytest"
HOST = "127.0.0.1"
MARIADBD = Path("/usr/sbin/mariadbd")


@dataclass
class LocalSlurmdbd:
    root: Path
    prefix: Path
    db_port: int
    dbd_port: int
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def jwt_key(self) -> bytes:
        return (self.root / "etc" / "jwt.key").read_bytes()

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.root / "etc" / "slurm.conf")
        # auth/slurm: a client that can read the key signs its own credential.
        env["SLURM_SACK_KEY"] = str(self.root / "etc" / "slurm.key")
        return env

    def sacctmgr(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        """`argv` starts with `sacctmgr`; run with this slurmdbd's config."""
        proc = subprocess.run(
            [str(self.prefix / "bin" / argv[0]), *argv[1:]],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"{argv} exited {proc.returncode}: {proc.stdout}{proc.stderr}")
        return proc

    def sql(self, statement: str) -> None:
        subprocess.run(
            ["mariadb", "-h127.0.0.1", f"-P{self.db_port}", "-uroot", "-e", statement],
            check=True,
            capture_output=True,
            timeout=30,
        )

    def spawn(self, name: str, argv: list[str]) -> None:
        log = (self.root / "log" / f"{name}.out").open("wb")
        self.processes.append(
            subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        )

    def wait_for(self, probe: list[str], what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (
                subprocess.run(probe, env=self.env, capture_output=True, check=False).returncode
                == 0
            ):
                return
            time.sleep(0.5)
        raise TimeoutError(f"{what} not up after {timeout}s; logs in {self.root / 'log'}")

    def stop(self) -> None:
        for proc in reversed(self.processes):
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _write_configs(root: Path, db_port: int, dbd_port: int) -> None:
    etc = root / "etc"
    key = etc / "slurm.key"
    key.write_bytes(secrets.token_bytes(1024))
    (etc / "jwt.key").write_bytes(secrets.token_bytes(32))
    common = f"AuthType=auth/slurm\nAuthInfo={key}\n"
    # auth/jwt as slurmkube's slurmdbd.conf has it: the operator's sacctmgr signs with jwt.key.
    jwt = f"AuthAltTypes=auth/jwt\nAuthAltParameters=jwt_key={etc / 'jwt.key'}\n"
    (etc / "slurmdbd.conf").write_text(
        f"{common}{jwt}DbdAddr=127.0.0.1\nDbdHost=localhost\nDbdPort={dbd_port}\nSlurmUser=root\n"
        f"StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\nStoragePort={db_port}\n"
        f"StorageUser=root\nStorageLoc=slurm_acct_db\nLogFile={root / 'log' / 'slurmdbd.log'}\n"
        f"PidFile={root / 'run' / 'slurmdbd.pid'}\n"
    )
    (etc / "slurm.conf").write_text(
        f"ClusterName={CLUSTER}\nSlurmctldHost=localhost(127.0.0.1)\n{common}"
        "AccountingStorageType=accounting_storage/slurmdbd\n"
        f"AccountingStorageHost=127.0.0.1\nAccountingStoragePort={dbd_port}\n"
        "AccountingStorageTRES=gres/gpu\nGresTypes=gpu\n"
        "NodeName=n1 CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=n1\n"
    )
    for path in (key, etc / "slurmdbd.conf", etc / "jwt.key"):
        os.chmod(path, 0o600)


@contextmanager
def start_local_slurmdbd() -> Iterator[LocalSlurmdbd]:
    prefix = slurm_prefix()
    root = Path(tempfile.mkdtemp(prefix="slurmkube-dbd-"))
    for sub in ("etc", "log", "run", "data"):
        (root / sub).mkdir()
    db_port, dbd_port = free_ports(2)
    dbd = LocalSlurmdbd(root, prefix, db_port, dbd_port)
    _write_configs(root, db_port, dbd_port)
    try:
        subprocess.run(
            [
                "mariadb-install-db",
                f"--datadir={root / 'data'}",
                "--user=root",
                "--skip-test-db",
                "--auth-root-authentication-method=normal",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        dbd.spawn(
            "mariadb",
            [
                str(MARIADBD),
                "--no-defaults",
                f"--datadir={root / 'data'}",
                f"--socket={root / 'run' / 'mysql.sock'}",
                "--bind-address=127.0.0.1",
                f"--port={db_port}",
                "--user=root",
                f"--pid-file={root / 'run' / 'mariadb.pid'}",
            ],
        )
        probe = ["mariadb", "-h127.0.0.1", f"-P{db_port}", "-uroot", "-e", "select 1"]
        dbd.wait_for(probe, "mariadb")
        # slurmdbd creates its tables at first start; the TRES row goes in after.
        dbd.spawn("slurmdbd", [str(prefix / "sbin" / "slurmdbd"), "-D"])
        dbd.wait_for([str(prefix / "bin" / "sacctmgr"), "-n", "show", "qos"], "slurmdbd")
        first = dbd.processes.pop()
        first.terminate()
        first.wait(timeout=30)
        dbd.sql(
            "insert ignore into slurm_acct_db.tres_table (creation_time, type, name) "
            "values (unix_timestamp(), 'gres', 'gpu')"
        )
        dbd.spawn("slurmdbd", [str(prefix / "sbin" / "slurmdbd"), "-D"])
        dbd.wait_for([str(prefix / "bin" / "sacctmgr"), "-n", "show", "qos"], "slurmdbd")
        dbd.sacctmgr(["sacctmgr", "-i", "add", "cluster", CLUSTER])
        yield dbd
    finally:
        dbd.stop()
        if not os.environ.get("SLURMKUBE_KEEP_SLURM"):
            shutil.rmtree(root, ignore_errors=True)


__all__ = ["LocalSlurmdbd", "start_local_slurmdbd"]
