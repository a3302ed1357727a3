"""The container images (images/): static checks of the Dockerfiles, and the
slurm image's shell programs run for real (bash, curl, a local HTTP server).

Nothing is built here; `make images` builds them (images/build.py) and
`make test-images` runs them (tests/images).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
SLURM_BIN = IMAGES / "slurm" / "bin"
ENTRYPOINT = IMAGES / "slurm" / "entrypoint.sh"


@dataclass(frozen=True)
class Dockerfile:
    """The few instructions these checks need, with ARG defaults substituted in FROM."""

    bases: tuple[str, ...]
    final_user: str | None
    entrypoint: list[str]
    copies: tuple[str, ...]
    run: str


def parse_dockerfile(path: Path) -> Dockerfile:
    text = re.sub(r"\\\n", " ", path.read_text())
    args: dict[str, str] = {}
    bases: list[str] = []
    user: str | None = None
    entrypoint: list[str] = []
    copies: list[str] = []
    runs: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "ARG" and "=" in rest:
            key, _, value = rest.partition("=")
            args.setdefault(key.strip(), value.strip())
        elif instruction == "FROM":
            image = rest.split()[0]
            bases.append(re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image))
            user = None  # USER does not carry over into a new stage
        elif instruction == "USER":
            user = rest.strip()
        elif instruction == "ENTRYPOINT":
            entrypoint = json.loads(rest)
        elif instruction == "COPY" and "--from" not in rest:
            words = [w for w in shlex.split(rest) if not w.startswith("--")]
            copies.extend(words[:-1])
        elif instruction == "RUN":
            runs.append(rest)
    return Dockerfile(tuple(bases), user, entrypoint, tuple(copies), "\n".join(runs))


DOCKERFILES = {p.parent.name: parse_dockerfile(p) for p in IMAGES.glob("*/Dockerfile")}


def test_both_images_exist() -> None:
    assert set(DOCKERFILES) == {"operator", "slurm"}


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_base_images_are_pinned_by_tag(name: str) -> None:
    for base in DOCKERFILES[name].bases:
        _, _, tag = base.partition(":")
        assert tag, f"{name}: base image {base} has no tag"
        assert tag != "latest", f"{name}: base image {base} floats on latest"
        assert "$" not in base, f"{name}: base image {base} names an ARG without a default"


def test_bases_are_the_local_debian_13_root_filesystem() -> None:
    # images/build.py makes it with debootstrap and passes it as BASE_IMAGE:
    # no image from a registry.
    assert DOCKERFILES["slurm"].bases == ("localhost/slurmkube/debian:trixie",)
    assert set(DOCKERFILES["operator"].bases) == {"localhost/slurmkube/debian:trixie"}


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_images_start_under_tini_so_sigterm_reaches_the_process(name: str) -> None:
    assert DOCKERFILES[name].entrypoint[:2] == ["/usr/bin/tini", "--"]
    assert "tini" in DOCKERFILES[name].run


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_images_run_as_a_numeric_non_root_user(name: str) -> None:
    user = DOCKERFILES[name].final_user
    assert user is not None, f"{name}: no USER in the final stage"
    uid = user.split(":")[0]
    # Numeric, so the kubelet can enforce runAsNonRoot without reading /etc/passwd.
    assert uid.isdigit(), f"{name}: USER {user} is not numeric"
    assert int(uid) != 0


def test_operator_entrypoint_is_the_operator_subcommand() -> None:
    assert DOCKERFILES["operator"].entrypoint[2:] == ["slurmkube", "operator"]


def test_slurm_image_installs_every_daemon_from_debian() -> None:
    run = DOCKERFILES["slurm"].run
    for package in ("slurmctld", "slurmd", "slurmrestd", "sackd", "slurmdbd", "slurm-client"):
        assert f'"{package}${{v}}"' in run, f"slurm image does not install {package}"
    assert "SLURM_SERIES" in run  # the build fails on another Slurm series


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_copied_files_exist_and_are_not_ignored(name: str) -> None:
    ignore = (IMAGES / name / "Dockerfile.dockerignore").read_text().splitlines()
    allowed = [line[1:].rstrip("/") for line in ignore if line.startswith("!")]
    for source in DOCKERFILES[name].copies:
        assert (ROOT / source).exists(), f"{name}: COPY {source} does not exist"
        assert any(source.rstrip("/").startswith(a) for a in allowed), (
            f"{name}: COPY {source} is excluded by Dockerfile.dockerignore"
        )


@pytest.mark.parametrize("script", [ENTRYPOINT, *sorted(SLURM_BIN.iterdir())])
def test_shell_programs_parse_and_are_not_group_writable(script: Path) -> None:
    subprocess.run(["bash", "-n", str(script)], check=True)
    # slurmctld refuses power programs with group or world write permission.
    assert script.stat().st_mode & 0o022 == 0
    assert os.access(script, os.X_OK)


# --- entrypoint.sh ----------------------------------------------------------


def fake_daemons(tmp_path: Path) -> dict[str, str]:
    """A PATH whose slurmd prints its arguments instead of starting, as root.

    `id` answers 0 for everyone but slurm (401), so the root-only slurmd role
    runs the same under any test user; the uid checks are the entrypoint's, not
    the test's. slurmd's run directory is one under tmp_path, never the host's.
    """
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_id = 'case "$*" in "-u slurm") echo 401 ;; *) echo 0 ;; esac'
    for name, body in {"slurmd": 'printf "%s\\n" "$@"', "id": fake_id}.items():
        fake = bin_dir / name
        fake.write_text(f"#!/bin/sh\n{body}\n")
        fake.chmod(0o755)
    return {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SLURMKUBE_SLURMD_RUN_DIR": str(tmp_path / "run-slurm"),
    }


def run_entrypoint(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ENTRYPOINT), *args], env=env, capture_output=True, text=True, check=False
    )


def test_entrypoint_rejects_an_unknown_role(tmp_path: Path) -> None:
    result = run_entrypoint(fake_daemons(tmp_path), "slurmdb")
    assert result.returncode == 64
    assert "unknown role 'slurmdb'" in result.stderr


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (
            ["-N", "gpu-001"],
            {"SLURMKUBE_CONF_SERVER": "ctl:6817"},
            ["-D", "--conf-server", "ctl:6817", "-N", "gpu-001"],
        ),
        (
            ["-N", "n1", "--conf-server", "a:1"],
            {"SLURMKUBE_CONF_SERVER": "b:2"},
            ["-D", "-N", "n1", "--conf-server", "a:1"],
        ),
        (["-N", "n1"], {}, ["-D", "-N", "n1"]),
    ],
)
def test_entrypoint_runs_slurmd_in_the_foreground_with_one_conf_server(
    tmp_path: Path, args: list[str], env: dict[str, str], expected: list[str]
) -> None:
    result = run_entrypoint({**fake_daemons(tmp_path), **env}, "slurmd", *args)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == expected


@pytest.mark.parametrize(
    ("owner", "taken_over"),
    [(401, True), (0, False), (1234, False)],
    ids=["image-dir-of-slurm", "root-volume", "other-owner"],
)
def test_entrypoint_gives_slurmd_the_image_run_dir_only(
    tmp_path: Path, owner: int, taken_over: bool
) -> None:
    env = fake_daemons(tmp_path)
    run_dir = Path(env["SLURMKUBE_SLURMD_RUN_DIR"])
    (run_dir / "conf").mkdir(parents=True)
    os.chown(run_dir, owner, owner)
    result = run_entrypoint(env, "slurmd", "-N", "n1")
    assert result.returncode == 0, result.stderr
    assert (run_dir.stat().st_uid == 0) is (taken_over or owner == 0)
    assert (run_dir / "conf").exists() is not taken_over


# --- slurmkube-power --------------------------------------------------------


@dataclass
class PowerEndpoint:
    """A stand-in for the operator's /v1/power endpoint that records requests."""

    status: int = 204
    requests: list[tuple[str, str, bytes]] = field(default_factory=list)


@pytest.fixture
def endpoint() -> Iterator[tuple[PowerEndpoint, str]]:
    state = PowerEndpoint()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            state.requests.append((self.path, self.headers.get("Authorization", ""), body))
            self.send_response(state.status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def run_power(program: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    # What slurmctld passes: no PATH, no inherited environment (slurmscriptd.c).
    return subprocess.run(
        [str(SLURM_BIN / program), *args],
        env={"SLURM_CONF": "/etc/slurm/slurm.conf", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("tok.en-123\n")
    return path


@pytest.mark.parametrize("action", ["resume", "suspend"])
def test_power_program_posts_the_hostlist_with_the_token(
    endpoint: tuple[PowerEndpoint, str], token_file: Path, action: str
) -> None:
    state, address = endpoint
    env = {"SLURMKUBE_OPERATOR_URL": address, "SLURMKUBE_POWER_TOKEN_FILE": str(token_file)}
    result = run_power(f"slurmkube-{action}", env, "gpu-[001-004],cpu-1", "nvl72")
    assert result.returncode == 0, result.stderr
    assert state.requests == [
        (f"/v1/power/{action}", "Bearer tok.en-123", b'{"nodes":"gpu-[001-004],cpu-1"}')
    ]


def test_power_program_reads_settings_the_entrypoint_wrote(
    endpoint: tuple[PowerEndpoint, str], token_file: Path, tmp_path: Path
) -> None:
    state, address = endpoint
    settings = tmp_path / "power.env"
    settings.write_text(
        f"SLURMKUBE_OPERATOR_URL=http://{address}/\nSLURMKUBE_POWER_TOKEN_FILE={token_file}\n"
    )
    result = run_power("slurmkube-resume", {"SLURMKUBE_POWER_ENV": str(settings)}, "n1")
    assert result.returncode == 0, result.stderr
    assert [path for path, _, _ in state.requests] == ["/v1/power/resume"]


def test_power_program_fails_when_the_operator_refuses(
    endpoint: tuple[PowerEndpoint, str], token_file: Path
) -> None:
    state, address = endpoint
    state.status = 403
    env = {"SLURMKUBE_OPERATOR_URL": address, "SLURMKUBE_POWER_TOKEN_FILE": str(token_file)}
    result = run_power("slurmkube-suspend", env, "n1")
    assert result.returncode != 0
    assert "POST" in result.stderr and "n1" in result.stderr
    assert "tok.en-123" not in result.stderr


@pytest.mark.parametrize(
    ("args", "env", "code", "message"),
    [
        (["n1;rm"], {"SLURMKUBE_OPERATOR_URL": "x:1"}, 64, "not a Slurm hostlist"),
        (['n"1'], {"SLURMKUBE_OPERATOR_URL": "x:1"}, 64, "not a Slurm hostlist"),
        (["n1"], {"SLURMKUBE_POWER_ENV": "/nonexistent"}, 78, "SLURMKUBE_OPERATOR_URL is not set"),
        (
            ["n1"],
            {"SLURMKUBE_OPERATOR_URL": "x:1", "SLURMKUBE_POWER_TOKEN_FILE": "/nonexistent"},
            78,
            "cannot read the token file",
        ),
    ],
)
def test_power_program_rejects_bad_input_before_any_request(
    args: list[str], env: dict[str, str], code: int, message: str
) -> None:
    result = run_power("slurmkube-resume", {"SLURMKUBE_POWER_ENV": "/nonexistent", **env}, *args)
    assert result.returncode == code
    assert message in result.stderr
