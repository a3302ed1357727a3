"""An external MariaDB for the accounting e2e tests.

`SlurmCluster.spec.accounting.database` points at a MariaDB the cluster does not
run. Here that is mariadbd on the host (Debian's mariadb-server-core, no
service), bound to the local runtime's bridge address: the operator's slurmdbd
pod reaches it over the pod network, and nothing beyond this machine can. Data
lives in a temporary folder and goes with the process, stopped by PID.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from slurmkube_runtime.layout import BRIDGE_IP, SLOT

from slurmkube_e2e.processes import terminate

# Away from 3306, one per slot like the control plane's ports.
PORT = 23306 + 100 * SLOT
DATABASE = "slurm_acct_db"
USER = "slurm"


class MariaDBError(RuntimeError):
    """mariadbd did not come up; the message carries its error log."""


@dataclass(frozen=True)
class MariaDB:
    host: str
    port: int
    user: str
    password: str
    socket: Path

    def sql(self, statement: str) -> str:
        """Run SQL as the database's root over its UNIX socket."""
        done = subprocess.run(
            [
                "mariadb",
                "--no-defaults",
                f"--socket={self.socket}",
                "-uroot",
                "-N",
                "-e",
                statement,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            raise MariaDBError(f"{statement[:60]}: {done.stderr.strip()}")
        return done.stdout


@contextmanager
def running_mariadb(root: Path) -> Iterator[MariaDB]:
    for tool in ("mariadbd", "mariadb-install-db", "mariadb"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            raise MariaDBError(f"{tool} not found: `make slurm` installs mariadb-server-core")
    data, socket, log = root / "data", root / "mariadbd.sock", root / "error.log"
    subprocess.run(
        [
            "mariadb-install-db",
            "--no-defaults",
            f"--datadir={data}",
            "--user=root",
            "--skip-test-db",
            "--auth-root-authentication-method=socket",
        ],
        capture_output=True,
        check=True,
        timeout=300,
    )
    proc = subprocess.Popen(
        [
            "/usr/sbin/mariadbd",
            "--no-defaults",
            f"--datadir={data}",
            f"--socket={socket}",
            f"--bind-address={BRIDGE_IP}",
            f"--port={PORT}",
            "--user=root",
            f"--pid-file={root / 'mariadbd.pid'}",
            f"--log-error={log}",
            "--skip-name-resolve",
            # slurmdbd.html recommends a larger pool for production; a test needs little.
            "--innodb-buffer-pool-size=128M",
            "--innodb-lock-wait-timeout=900",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    password = secrets.token_urlsafe(18)
    db = MariaDB(str(BRIDGE_IP), PORT, USER, password, socket)
    try:
        deadline = time.monotonic() + 60
        while not socket.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise MariaDBError(f"mariadbd did not start (exit {proc.poll()}):\n{tail}")
            time.sleep(0.2)
        db.sql(
            f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{password}'; "
            f"GRANT ALL ON {DATABASE}.* TO '{USER}'@'%';"
        )
        yield db
    finally:
        terminate(proc)
