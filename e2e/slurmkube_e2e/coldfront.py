"""A real ColdFront for the policy e2e test: PyPI `coldfront` on SQLite, loopback only.

`e2e/local/coldfront/install.sh` caches ColdFront's venv; `running_coldfront`
makes a fresh database in a temporary folder, seeds it (`seed.py`: ColdFront's
own defaults, the fleet's resource, a project + Active allocation per team
with the attributes slurmkube reads, a staff user's API token), enables the
REST API plugin (`PLUGIN_API=True` in its env file) and serves it with
Django's server on 127.0.0.1 until the block ends (stopped by PID). Changes
go through ColdFront's Django ORM (`ColdFront.orm`), as an admin's would.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from slurmkube_runtime.layout import SLOT

from slurmkube_e2e.processes import terminate

HERE = Path(__file__).resolve().parents[1] / "local" / "coldfront"
# Away from Django's 8000, one per slot like the control plane's ports.
PORT = 28800 + 100 * SLOT
SETTINGS = "coldfront.config.settings"


class ColdFrontError(RuntimeError):
    """ColdFront did not install, seed or start; the message carries its output."""


@dataclass(frozen=True)
class ColdFront:
    url: str  # the API's base, e.g. http://127.0.0.1:29400/api
    token: str
    python: Path
    env: dict[str, str]

    def orm(self, code: str) -> str:
        """Run Python with ColdFront's Django set up (models importable); its stdout."""
        script = "import django\ndjango.setup()\n" + code
        return _run([str(self.python), "-c", script], self.env, "ColdFront ORM")

    def get(self, path: str) -> Any:
        answer = httpx.get(
            f"{self.url}/{path}", headers={"Authorization": f"Token {self.token}"}, timeout=30
        )
        answer.raise_for_status()
        return answer.json()


def _run(argv: list[str], env: dict[str, str], what: str) -> str:
    """Run a program of ColdFront's venv; its stdout, or an error with its stderr."""
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise ColdFrontError(f"{what} failed:\n{done.stderr.strip()[-3000:]}")
    return done.stdout


def install() -> Path:
    """ColdFront's cached install (install.sh: a no-op once installed); its prefix."""
    done = _run([str(HERE / "install.sh")], dict(os.environ), "install.sh")
    return Path(done.strip().splitlines()[-1])


@contextmanager
def running_coldfront(root: Path, seed: dict[str, Any]) -> Iterator[ColdFront]:
    prefix = install()
    python = prefix / "venv" / "bin" / "python"
    env_file = root / "coldfront.env"
    env_file.write_text(
        f"SECRET_KEY={secrets.token_urlsafe(32)}\n"
        f"DB_URL=sqlite:///{root / 'coldfront.db'}\n"
        "PLUGIN_API=True\nDEBUG=False\nALLOWED_HOSTS=127.0.0.1\n"
    )
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(root),
        "COLDFRONT_ENV": str(env_file),
        "DJANGO_SETTINGS_MODULE": SETTINGS,
    }
    (root / "seed.json").write_text(json.dumps(seed))
    seeded = _run([str(python), str(HERE / "seed.py"), str(root / "seed.json")], env, "seed.py")
    token = json.loads(seeded.strip().splitlines()[-1])["token"]
    log = root / "runserver.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(prefix / "venv" / "bin" / "coldfront"),
                "runserver",
                "--noreload",
                f"127.0.0.1:{PORT}",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    coldfront = ColdFront(f"http://127.0.0.1:{PORT}/api", token, python, env)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                coldfront.get("resources/")
                break
            except httpx.HTTPError as err:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise ColdFrontError(
                        f"ColdFront did not answer ({err}):\n{log.read_text()[-2000:]}"
                    ) from err
                time.sleep(0.5)
        yield coldfront
    finally:
        terminate(proc)
