"""Fixtures of the image smoke tests: the images `make images` built, podman on
slurmkube's own image store, and containers removed by name at the end."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from images import build as image_build


@dataclass
class Podman:
    """podman on the image store of images/build.py; remembers what it started."""

    env: dict[str, str]
    started: list[str] = field(default_factory=list)

    def __call__(self, *args: str, check: bool = True, timeout: float = 120) -> str:
        proc = subprocess.run(
            ["podman", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"podman {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}"
            )
        return proc.stdout

    def succeeds(self, *args: str) -> bool:
        return (
            subprocess.run(
                ["podman", *args], env=self.env, capture_output=True, timeout=60, check=False
            ).returncode
            == 0
        )

    def start(self, name: str, image: str, *args: str, options: tuple[str, ...] = ()) -> str:
        self("rm", "--force", "--ignore", name)
        self.started.append(name)
        self("run", "--detach", "--name", name, "--pull=never", *options, image, *args)
        return name

    def logs(self) -> str:
        """Every started container's output (the daemons log to stderr), for failures."""
        out = []
        for name in self.started:
            proc = subprocess.run(
                ["podman", "logs", "--tail", "40", name],
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                check=False,
            )
            out.append(f"--- {name}\n{proc.stdout}")
        return "\n".join(out)


@pytest.fixture(scope="session")
def images() -> dict[str, str]:
    """Image name -> content-keyed reference. Builds what changed (cached: seconds)."""
    return {built.name: built.ref for built in image_build.cmd_build(None)}


@pytest.fixture
def podman() -> Iterator[Podman]:
    runner = Podman(image_build.podman_env(image_build.cache_dir()))
    try:
        yield runner
    finally:
        for name in runner.started:
            runner("rm", "--force", "--ignore", "--time", "0", name, check=False)
