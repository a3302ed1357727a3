"""A real Slurm 24.11 cluster on loopback, from a configuration slurmkube rendered.

slurmctld, one slurmd per node (built with --enable-multiple-slurmd, so many
share this host, each on its own port, named with `-N`), and slurmrestd with
JWT auth. GPUs are character devices made with `mknod c 1 3` (slurmd ignores
GRES without device files). slurmd runs configless (`--conf-server`), as in
the operator's pods. Every process is tracked by PID and stopped by PID.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurmkube.api.documents import ClusterBundle
from slurmkube.api.models import KubeNode
from slurmkube.render import RenderContext, plan_config, render_files
from slurmkube.render.config import SlurmConfig
from slurmkube.topology.fleet import gpu_count

DEFAULT_PREFIX = Path.home() / ".cache" / "slurmkube" / "slurm" / "24.11.5"
REST_USER = "slurmkube-rest"


def slurm_prefix() -> Path:
    return Path(os.environ.get("SLURMKUBE_SLURM_PREFIX", str(DEFAULT_PREFIX)))


class SlurmNotBuilt(RuntimeError):
    pass


class SlurmCommandFailed(subprocess.CalledProcessError):
    """A client command failed; unlike its base class, says what Slurm answered."""

    def __str__(self) -> str:
        return f"{super().__str__()} stderr: {(self.stderr or '').strip()}"


def listening(port: int, host: str = "127.0.0.1") -> bool:
    """Something accepts TCP connections on host:port now."""
    try:
        socket.create_connection((host, port), timeout=1).close()
    except OSError:
        return False
    return True


def free_ports(count: int) -> list[int]:
    """Ports the kernel hands out now; held open together so they are distinct."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _ensure_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            check=True,
        )
        return pwd.getpwnam(name)


@dataclass
class LocalSlurm:
    """A running cluster. Use `start_local_slurm` (a context manager) to get one."""

    root: Path
    prefix: Path
    config: SlurmConfig
    context: RenderContext
    rest_port: int
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    # --- paths and environment ---
    @property
    def conf_dir(self) -> Path:
        return self.root / "etc"

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf_dir / "slurm.conf")
        env["PATH"] = f"{self.prefix / 'bin'}:{self.prefix / 'sbin'}:{env.get('PATH', '')}"
        return env

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def nodes(self) -> list[str]:
        return [n for names in self.config.members.values() for n in names]

    def run(
        self, *argv: str, check: bool = True, timeout: float = 60, input_script: str | None = None
    ) -> str:
        """A Slurm client command (`scontrol`, `sbatch`, ...) against this cluster."""
        proc = subprocess.run(
            self.isolated([str(self.prefix / "bin" / argv[0]), *argv[1:]]),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            input=input_script,
            cwd=self.root,
        )
        if check and proc.returncode != 0:
            raise SlurmCommandFailed(proc.returncode, argv, proc.stdout, proc.stderr)
        return proc.stdout

    def token(self, lifespan: int = 3600, user: str = "root") -> str:
        out = self.run("scontrol", "token", f"username={user}", f"lifespan={lifespan}")
        return out.strip().split("=", 1)[1]

    def isolated(self, argv: list[str], run_slurm: Path | None = None) -> list[str]:
        """`argv` in a private mount namespace where /run/slurm and /run/slurmctld
        are this cluster's own directories.

        Slurm 24.11's auth/slurm clients get their credentials from a fixed
        socket, /run/slurm/sack.socket, else /run/slurmctld/sack.socket
        (src/common/sack_api.c), which every slurmd resp. slurmctld on a host
        binds (src/plugins/auth/slurm/sack.c). Two test clusters on one machine
        would sign with each other's key, so each gets its own directories.
        Each slurmd also gets its own /run/slurm (`run_slurm`): many slurmd
        starting at once race to unlink and bind the same socket and one dies
        with EADDRINUSE. Clients see an empty /run/slurm and use slurmctld's.
        """
        script = (
            'mount --bind "$1" /run/slurm && mount --bind "$2" /run/slurmctld '
            '&& shift 2 && exec "$@"'
        )
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            str(run_slurm or self.root / "run" / "slurm"),
            str(self.root / "run" / "slurmctld"),
            *argv,
        ]

    # --- configuration ---
    def write_config(self, config: SlurmConfig) -> None:
        """Write rendered files atomically; the caller decides when to reconfigure."""
        self.config = config
        for name, text in render_files(config).files.items():
            tmp = self.conf_dir / f".{name}.tmp"
            tmp.write_text(text)
            tmp.replace(self.conf_dir / name)

    def render(self, bundle: ClusterBundle, nodes: Sequence[KubeNode]) -> SlurmConfig:
        return plan_config(bundle, nodes, self.context)

    # --- processes ---
    def _spawn(
        self,
        key: str,
        argv: list[str],
        env: dict[str, str] | None = None,
        run_slurm: Path | None = None,
    ) -> None:
        log = open(self.root / "log" / f"{key}.out", "ab")  # noqa: SIM115 - owned by the child
        self.processes[key] = subprocess.Popen(
            self.isolated(argv, run_slurm),
            env=env if env is not None else self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # Job output files (slurm-%j.out) and cores land in the cluster's dir.
            cwd=self.root,
        )
        log.close()

    def start_slurmd(self, node: str) -> None:
        ctl = f"127.0.0.1:{self.context.slurmctld_port}"
        env_key = self.conf_dir / "slurm.key"
        os.environ.setdefault("SLURM_SACK_KEY", str(env_key))
        run_slurm = self.root / "run" / f"slurmd-{node}"
        run_slurm.mkdir(parents=True, exist_ok=True)
        self._spawn(
            f"slurmd-{node}",
            [str(self.prefix / "sbin" / "slurmd"), "-D", "-N", node, "--conf-server", ctl],
            run_slurm=run_slurm,
        )

    def stop(self, key: str, timeout: float = 15) -> None:
        proc = self.processes.pop(key, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def stop_all(self) -> None:
        # Nodes first, the controller last, so slurmd's goodbye reaches it.
        for key in [k for k in self.processes if k.startswith("slurmd-")]:
            self.stop(key)
        for key in list(self.processes):
            self.stop(key)

    def check_alive(self) -> None:
        dead = {k: p.returncode for k, p in self.processes.items() if p.poll() is not None}
        if dead:
            tails = []
            for key in dead:
                log = self.root / "log" / f"{key}.out"
                lines = log.read_text(errors="replace").splitlines()[-8:] if log.exists() else []
                tails.append(f"--- {key}:\n" + "\n".join(lines))
            raise RuntimeError(f"Slurm daemons exited: {dead}\n" + "\n".join(tails))

    # --- waiting ---
    def wait_for(self, predicate: object, what: str, timeout: float = 60) -> None:
        assert callable(predicate)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
                if predicate():
                    return
            time.sleep(0.3)
        raise TimeoutError(f"timed out after {timeout}s waiting for {what}")

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T")
        states: dict[str, str] = {}
        for line in out.splitlines():
            name, state = line.split()
            states[name] = state
        return states

    def wait_nodes_idle(self, nodes: Sequence[str] | None = None, timeout: float = 60) -> None:
        want = set(nodes if nodes is not None else self.nodes)

        def idle() -> bool:
            states = self.node_states()
            return all(states.get(n) == "idle" for n in want)

        self.wait_for(idle, f"nodes {sorted(want)} idle", timeout)


def write_files(directory: Path, files: Mapping[str, str | bytes], gid: int) -> Path:
    """Files as the pods' projected /etc/slurm volume has them: 0440, group fsGroup."""
    directory.mkdir(parents=True)
    for name, content in files.items():
        path = directory / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        os.chown(path, 0, gid)
        path.chmod(0o440)
    directory.chmod(0o755)
    return directory


def _rest_user_args(prefix: Path) -> list[str]:
    """slurmrestd refuses to serve as root. It drops to `-u/-g` itself, but then
    must still read its plugins: when the build sits under a private home
    (root's 0700 ~/.cache), the test runs it as root with the user check
    disabled (SLURMRESTD_SECURITY=disable_user_check, slurmrestd(8))."""
    user = _ensure_user(REST_USER)
    probe = subprocess.run(
        [
            "setpriv",
            f"--reuid={user.pw_uid}",
            f"--regid={user.pw_gid}",
            "--clear-groups",
            "test",
            "-r",
            str(prefix / "lib" / "slurm"),
        ],
        check=False,
    )
    if probe.returncode == 0:
        return ["-u", str(user.pw_uid), "-g", str(user.pw_gid)]
    os.environ["SLURMRESTD_SECURITY"] = "disable_user_check"
    return []


def _rest_env(env: dict[str, str]) -> dict[str, str]:
    """slurmrestd must forward each client's JWT to slurmctld, so auth/jwt has to be
    its primary plugin: SLURM_JWT=daemon selects it (slurmrestd(8)), and
    SLURM_SACK_KEY, which would force auth/slurm ahead of it
    (src/interfaces/auth.c), must not be inherited from the slurmd setup."""
    rest_env = {k: v for k, v in env.items() if k not in ("SLURM_SACK_KEY", "SLURM_SACK_JWKS")}
    rest_env["SLURM_JWT"] = "daemon"
    return rest_env


def _make_gpu_devices(dev: Path, count: int) -> None:
    dev.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        path = dev / f"nvidia{i}"
        if not path.exists():
            # Same major/minor as /dev/null: a real character device, harmless to open.
            os.mknod(path, 0o666 | 0o020000, os.makedev(1, 3))


@contextlib.contextmanager
def start_local_slurm(
    bundle: ClusterBundle,
    nodes: Sequence[KubeNode],
    *,
    start_slurmd: Sequence[str] | None = None,
    rest: bool = True,
    root: Path | None = None,
    edit_slurm_conf: Callable[[str], str] | None = None,
) -> Iterator[LocalSlurm]:
    """Render `bundle` for `nodes`, start the daemons, yield, and stop them by PID.

    `start_slurmd` names the nodes that run slurmd (default: all). Each of those
    gets a port of its own; the others, which never run one, share a port, so a
    fleet larger than the process's open-file limit can be rendered (benches).

    `edit_slurm_conf` changes the rendered slurm.conf before slurmctld starts
    (benchmarks compare slurmkube's settings with Slurm's defaults this way).
    """
    prefix = slurm_prefix()
    if not (prefix / "sbin" / "slurmctld").exists():
        raise SlurmNotBuilt(f"no Slurm build at {prefix}; run `make slurm`")
    workdir = Path(root) if root else Path(tempfile.mkdtemp(prefix="slurmkube-slurm-"))
    workdir.mkdir(parents=True, exist_ok=True)
    os.chmod(workdir, 0o755)  # slurmrestd reads etc/ after dropping to its user
    for sub in ("etc", "state", "spool", "log", "run/slurm", "run/slurmctld", "dev"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    for mount_point in ("/run/slurm", "/run/slurmctld"):
        Path(mount_point).mkdir(parents=True, exist_ok=True)
    node_names = [n.metadata.name for n in nodes]
    running = list(start_slurmd) if start_slurmd is not None else node_names
    ports = free_ports(len(running) + 3)
    ctl_port, rest_port, idle_port = ports[:3]
    node_ports = dict.fromkeys(node_names, idle_port) | dict(zip(running, ports[3:], strict=True))
    host = socket.gethostname().split(".")[0].lower()
    context = RenderContext(
        controller_host=host,
        controller_addr="127.0.0.1",
        slurmctld_port=ctl_port,
        node_ports=node_ports,
        config_dir=str(workdir / "etc"),
        state_save_location=str(workdir / "state"),
        slurmd_spool_dir=str(workdir / "spool" / "%n"),
        log_dir=str(workdir / "log"),
        run_dir=str(workdir / "run"),
        slurm_user="root",
        gpu_device_dir=str(workdir / "dev"),
        cgroups=False,
        config_overrides=True,
    )
    config = plan_config(bundle, nodes, context)
    max_gpus = max((gpu_count(n) for n in nodes), default=0)
    _make_gpu_devices(workdir / "dev", max(max_gpus, 1))
    cluster = LocalSlurm(workdir, prefix, config, context, rest_port)
    (workdir / "etc" / "slurm.key").write_bytes(secrets.token_bytes(1024))
    (workdir / "etc" / "jwt.key").write_bytes(secrets.token_bytes(32))
    os.chmod(workdir / "etc" / "slurm.key", 0o600)
    os.chmod(workdir / "etc" / "jwt.key", 0o600)
    cluster.write_config(config)
    if edit_slurm_conf is not None:
        conf = workdir / "etc" / "slurm.conf"
        conf.write_text(edit_slurm_conf(conf.read_text()))
    os.environ["SLURM_SACK_KEY"] = str(workdir / "etc" / "slurm.key")
    try:
        cluster._spawn("slurmctld", [str(prefix / "sbin" / "slurmctld"), "-D", "-i"])
        cluster.wait_for(lambda: cluster.run("scontrol", "ping").find("UP") >= 0, "slurmctld up")
        for name in start_slurmd if start_slurmd is not None else cluster.nodes:
            cluster.start_slurmd(name)
        if rest:
            cluster._spawn(
                "slurmrestd",
                [
                    str(prefix / "sbin" / "slurmrestd"),
                    *_rest_user_args(prefix),
                    "-a",
                    "rest_auth/jwt",
                    "-s",
                    "openapi/slurmctld",
                    f"127.0.0.1:{rest_port}",
                ],
                env=_rest_env(cluster.env),
            )
        yield cluster
    finally:
        cluster.stop_all()
        if root is None and not os.environ.get("SLURMKUBE_KEEP_SLURM"):
            shutil.rmtree(workdir, ignore_errors=True)


__all__ = ["LocalSlurm", "SlurmNotBuilt", "free_ports", "start_local_slurm", "write_files"]
