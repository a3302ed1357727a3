"""Pod sandboxes: namespaces, the bridge, veths, the rootfs, container processes.

A sandbox is the process tree `setpriv --pdeathsig KILL unshare ... init.py`:
`unshare` makes the namespaces and forks init (PID 1 there, see init.py),
`--kill-child` and the parent-death signal tie both to the agent, so a killed
agent takes every pod with it. Containers, probes, hooks and `exec` enter the
sandbox with `nsenter --target <init> ... --root --wd`, i.e. they see init's
chrooted view. The rootfs and the volumes are plain folders of the agent's
state dir (`pods/<uid>/`) that only the sandbox's private mount namespace
mounts things onto, so the host never sees a pod's mount, and removing the
folder after init is gone is always safe.

Two kinds of root filesystem (imagespec.image_source says which a pod gets):

- HostRoot, the host build: the host's /usr (with /bin, /lib, ...) and the
  Slurm build at its own prefix, read-only; /etc is a small copy with a
  generated hosts file, /run, /tmp and /var are the pod's own, so Slurm's
  fixed sockets (/run/slurmctld/sack.socket) never collide between pods.
  /root is 0755 in the rootfs, so a non-root daemon (slurmrestd) can read the
  build.
- images.ImageRoot, a built image: an overlay whose lower layer is the
  image's extracted files (read-only, shared by every pod of the image) and
  whose upper layer is the pod's own (`pods/<uid>/upper`), mounted on
  `pods/<uid>/merged`: the writable layer a container runtime gives a
  container. /etc is a copy of the image's, bound over the overlay's, so the
  agent can replace hosts, hostname and resolv.conf as it does for the host build.

Either way the pod's /etc is `pods/<uid>/rootfs/etc` on the host (`Sandbox.rootfs`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from slurmkube_runtime.images import ImageRoot
from slurmkube_runtime.layout import BRIDGE, BRIDGE_IP, SUBNET, VETH_PREFIX, veth_name

INIT_SCRIPT = Path(__file__).with_name("init.py")
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
_IMAGE_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr")
_ETC_FILES = (
    "passwd",
    "group",
    "protocols",
    "services",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "os-release",
    "debian_version",
    "shells",
    "login.defs",
)
# Character devices every container expects (major, minor from devices.txt).
_BASE_DEVICES = (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8))
_MORE_DEVICES = (("urandom", 1, 9), ("tty", 5, 0))


class SandboxError(RuntimeError):
    """A sandbox could not be made; the message carries the failing step's output."""


@dataclass(frozen=True)
class HostRoot:
    """The host build as the image: the host's /usr and the Slurm build at this prefix."""

    slurm_prefix: Path


RootSource = HostRoot | ImageRoot


@dataclass(frozen=True)
class VolumeBind:
    source: str
    target: str
    read_only: bool


@dataclass(frozen=True)
class SandboxSpec:
    """What the agent decided for one pod, before anything is created."""

    uid: str
    namespace: str
    name: str
    hostname: str
    ip: str
    gpus: int
    volume_binds: tuple[VolumeBind, ...] = ()


@dataclass
class Sandbox:
    """A running sandbox, as recorded in `pods/<uid>/sandbox.json`."""

    uid: str
    namespace: str
    name: str
    ip: str
    dir: str
    launcher_pid: int
    init_pid: int
    veth: str
    containers: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def state_file(self) -> Path:
        return Path(self.dir) / "sandbox.json"

    def save(self) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1))
        tmp.replace(self.state_file)

    @classmethod
    def load(cls, path: Path) -> Sandbox:
        return cls(**json.loads(path.read_text()))

    @property
    def rootfs(self) -> Path:
        return Path(self.dir) / "rootfs"

    def enter(
        self,
        argv: Sequence[str],
        run_as: tuple[int | None, int | None] = (None, None),
        workdir: str | None = None,
    ) -> list[str]:
        """argv as run inside the pod (all its namespaces, its root, and its cwd or `workdir`)."""
        uid, gid = run_as
        cmd = ["nsenter", "-t", str(self.init_pid), "-n", "-m", "-u", "-i", "-p", "-r", "-w"]
        if gid is not None:
            cmd += ["-G", str(gid)]
        if uid is not None:
            cmd += ["-S", str(uid)]
        if workdir:
            # Not nsenter's --wd=DIR: it opens DIR before it enters the pod's root.
            argv = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', workdir, *argv]
        return [*cmd, "--", *argv]

    def alive(self) -> bool:
        return _cmdline_has(self.init_pid, str(INIT_SCRIPT))


def _cmdline_has(pid: int, needle: str) -> bool:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X") and needle.encode() in raw.split(b"\0")


def _run(argv: Sequence[str], stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run(
        list(argv), input=stdin, capture_output=True, text=True, timeout=30, check=False
    )
    if check and done.returncode != 0:
        raise SandboxError(f"{' '.join(argv)} failed: {done.stderr.strip() or done.stdout}")
    return done.stdout


# --- the bridge ---------------------------------------------------------------------


def ensure_bridge() -> None:
    """skbr0 with BRIDGE_IP: the host end of the pod network (no forwarding, no NAT)."""
    if not Path(f"/sys/class/net/{BRIDGE}").exists():
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    addrs = _run(["ip", "-o", "-4", "addr", "show", "dev", BRIDGE])
    if f"{BRIDGE_IP}/" not in addrs:
        _run(["ip", "addr", "add", f"{BRIDGE_IP}/{SUBNET.prefixlen}", "dev", BRIDGE])
    _run(["ip", "link", "set", BRIDGE, "up"])


def bridge_ports() -> list[str]:
    brif = Path(f"/sys/class/net/{BRIDGE}/brif")
    return sorted(p.name for p in brif.iterdir()) if brif.exists() else []


def remove_bridge() -> bool:
    """Deletes the slot's bridge unless something else of the test bed is still
    attached (the real nodes' uplinks share it); whether it is gone."""
    if not Path(f"/sys/class/net/{BRIDGE}").exists():
        return True
    if any(not port.startswith(VETH_PREFIX) for port in bridge_ports()):
        return False
    _run(["ip", "link", "del", BRIDGE], check=False)
    return True


def leftover_veths() -> list[str]:
    """Host ends of pod veths the agent made (named skv*), e.g. after a crash."""
    return sorted(
        p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith(VETH_PREFIX)
    )


def delete_link(name: str) -> None:
    if Path(f"/sys/class/net/{name}").exists():
        _run(["ip", "link", "del", name], check=False)


# --- the rootfs -----------------------------------------------------------------------


def _copy_etc(etc: Path) -> None:
    for name in _ETC_FILES:
        src = Path("/etc") / name
        dst = etc / name
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        elif src.is_dir():
            shutil.copytree(src, dst, symlinks=True)
        elif src.exists():
            shutil.copy2(src, dst)
    # Names come only from /etc/hosts (there is no cluster DNS); `multi on`
    # makes a headless Service name return every pod, not the first line's.
    (etc / "nsswitch.conf").write_text(
        "passwd: files\ngroup: files\nshadow: files\nhosts: files\nnetworks: files\n"
        "protocols: files\nservices: files\n"
    )
    (etc / "host.conf").write_text("multi on\n")
    _add_image_users(etc)


# The users images/slurm/Dockerfile creates: slurmkube's pods run slurmctld as
# SlurmUser slurm and slurmrestd as its own user, so the stand-in image has them too.
IMAGE_USERS = (("slurm", 401, "/var/lib/slurm"), ("slurmrestd", 402, "/nonexistent"))


def _add_image_users(etc: Path) -> None:
    passwd, group = etc / "passwd", etc / "group"
    users = passwd.read_text() if passwd.exists() else ""
    groups = group.read_text() if group.exists() else ""
    for name, uid, home in IMAGE_USERS:
        if f"\n{name}:" not in f"\n{users}":
            users += f"{name}:x:{uid}:{uid}::{home}:/usr/sbin/nologin\n"
        if f"\n{name}:" not in f"\n{groups}":
            groups += f"{name}:x:{uid}:\n"
    passwd.write_text(users)
    group.write_text(groups)


def write_etc_file(rootfs: Path, name: str, text: str) -> None:
    """Replace /etc/<name> of a pod atomically (the pod sees it at once: it is its root)."""
    path = rootfs / "etc" / name
    tmp = path.with_name(f".{name}.tmp")
    tmp.write_text(text)
    tmp.chmod(0o644)
    tmp.replace(path)


def _devices(spec: SandboxSpec) -> list[dict[str, Any]]:
    devices = [{"name": n, "major": a, "minor": b} for n, a, b in _BASE_DEVICES + _MORE_DEVICES]
    # slurmd ignores GRES without device files; these are /dev/null's numbers.
    devices += [{"name": f"nvidia{i}", "major": 1, "minor": 3} for i in range(spec.gpus)]
    return devices


def prepare_rootfs(pod_dir: Path, spec: SandboxSpec, source: RootSource) -> dict[str, Any]:
    """Make the pod's root folders and init's plan; returns the plan."""
    if isinstance(source, ImageRoot):
        return _prepare_image_root(pod_dir, spec, source)
    slurm_prefix = source.slurm_prefix
    root = pod_dir / "rootfs"
    root.mkdir(parents=True, mode=0o755)
    for sub in ("proc", "sys", "dev", "etc", "run", "var/tmp", "var/log", "var/spool", "var/lib"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for sub in ("tmp", "var/tmp"):
        (root / sub).mkdir(exist_ok=True)
        (root / sub).chmod(0o1777)
    (root / "root").mkdir(mode=0o755)
    image_binds: list[dict[str, Any]] = []
    for name in _IMAGE_DIRS:
        host = Path("/") / name
        if host.is_symlink():
            (root / name).symlink_to(os.readlink(host))
        elif host.is_dir():
            image_binds.append({"source": str(host), "target": f"/{name}", "read_only": True})
    _copy_etc(root / "etc")
    if Path("/etc/alternatives").is_dir():
        image_binds.append(
            {"source": "/etc/alternatives", "target": "/etc/alternatives", "read_only": True}
        )
    # The build's paths are compiled in (plugins, sysconfdir): same path inside.
    (root / str(slurm_prefix).lstrip("/")).mkdir(parents=True, exist_ok=True)
    for parent in (root / str(slurm_prefix).lstrip("/")).parents:
        if parent == root:
            break
        parent.chmod(0o755)
    image_binds.append(
        {"source": str(slurm_prefix), "target": str(slurm_prefix), "read_only": True}
    )
    return _plan(spec, root, None, image_binds)


def _plan(
    spec: SandboxSpec,
    root: Path,
    overlay: dict[str, str] | None,
    image_binds: list[dict[str, Any]],
) -> dict[str, Any]:
    binds = sorted(spec.volume_binds, key=lambda b: b.target.count("/"))
    return {
        "rootfs": str(root),
        "overlay": overlay,
        "hostname": spec.hostname,
        "image_binds": image_binds,
        "devices": _devices(spec),
        "volume_binds": [asdict(b) for b in binds],
    }


def _prepare_image_root(pod_dir: Path, spec: SandboxSpec, image: ImageRoot) -> dict[str, Any]:
    """An overlay on the image's files, and the pod's copy of the image's /etc."""
    etc = pod_dir / "rootfs" / "etc"
    etc.parent.mkdir(parents=True, mode=0o755)
    # cp -a: owners and modes as in the image (gshadow is root:shadow 0640).
    _run(["cp", "-a", "--", str(image.rootfs / "etc"), str(etc)])
    for name in ("upper", "work", "merged"):
        (pod_dir / name).mkdir(mode=0o755)
    overlay = {
        "lower": str(image.rootfs),
        "upper": str(pod_dir / "upper"),
        "work": str(pod_dir / "work"),
    }
    etc_bind = {"source": str(etc), "target": "/etc", "read_only": False}
    return _plan(spec, pod_dir / "merged", overlay, [etc_bind])


# --- sandboxes ------------------------------------------------------------------------


def _child_pid(pid: int, timeout: float = 5.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, IndexError):
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if children:
                return int(children[0])
        time.sleep(0.005)
    raise SandboxError(f"process {pid} started no child within {timeout}s")


def start_sandbox(pod_dir: Path, spec: SandboxSpec, source: RootSource) -> Sandbox:
    """Namespaces, rootfs mounts, hostname and the pod's address; returns the sandbox."""
    plan = prepare_rootfs(pod_dir, spec, source)
    plan_file = pod_dir / "plan.json"
    plan_file.write_text(json.dumps(plan, indent=1))
    with (pod_dir / "sandbox.log").open("ab") as log:
        launcher = subprocess.Popen(
            [
                "setpriv",
                "--pdeathsig",
                "KILL",
                "unshare",
                "--net",
                "--mount",
                "--uts",
                "--ipc",
                "--pid",
                "--fork",
                "--kill-child",
                "--propagation",
                "private",
                SYSTEM_PYTHON,
                "-S",
                "-E",
                str(INIT_SCRIPT),
                str(plan_file),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,
        )
    assert launcher.stdout is not None
    line = launcher.stdout.readline().decode(errors="replace").strip()
    launcher.stdout.close()
    if line != "ready":
        launcher.kill()
        launcher.wait()
        log_text = (pod_dir / "sandbox.log").read_text(errors="replace")[-2000:]
        raise SandboxError(f"sandbox of {spec.namespace}/{spec.name}: {line} {log_text}".strip())
    init_pid = _child_pid(launcher.pid)
    sandbox = Sandbox(
        uid=spec.uid,
        namespace=spec.namespace,
        name=spec.name,
        ip=spec.ip,
        dir=str(pod_dir),
        launcher_pid=launcher.pid,
        init_pid=init_pid,
        veth=veth_name(spec.uid),
    )
    sandbox.save()
    # The Popen object is dropped on purpose: the launcher is found by PID (adoption
    # and cleanup work the same after an agent restart) and reaped by reap_children().
    _connect(sandbox)
    return sandbox


def _connect(sandbox: Sandbox) -> None:
    peer = "skp" + sandbox.veth[len(VETH_PREFIX) :]
    _run(
        ["ip", "-batch", "-"],
        stdin=(
            f"link add {sandbox.veth} type veth peer name {peer} netns {sandbox.init_pid}\n"
            f"link set {sandbox.veth} master {BRIDGE}\n"
            f"link set {sandbox.veth} up\n"
        ),
    )
    # Only the connected route: no default route, so nothing leaves the subnet.
    _run(
        ["nsenter", "-t", str(sandbox.init_pid), "-n", "ip", "-batch", "-"],
        stdin=(
            f"link set {peer} name eth0\n"
            f"addr add {sandbox.ip}/{SUBNET.prefixlen} dev eth0\n"
            "link set eth0 up\n"
            "link set lo up\n"
        ),
    )


def reap_children() -> None:
    """Collect exited launchers (children of the agent that no Popen waits for)."""
    for sandbox_pid in list(_orphan_launchers):
        with contextlib.suppress(ChildProcessError):
            pid, _ = os.waitpid(sandbox_pid, os.WNOHANG)
            if pid:
                _orphan_launchers.discard(sandbox_pid)
                continue
        if not Path(f"/proc/{sandbox_pid}").exists():
            _orphan_launchers.discard(sandbox_pid)


_orphan_launchers: set[int] = set()


def stop_sandbox(sandbox: Sandbox, timeout: float = 5.0) -> None:
    """Kill the pod's PID 1 (the kernel kills the rest), then remove its traces."""
    if sandbox.alive():
        with contextlib.suppress(ProcessLookupError):
            os.kill(sandbox.init_pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while sandbox.alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    _orphan_launchers.add(sandbox.launcher_pid)
    reap_children()
    delete_link(sandbox.veth)
    remove_dir(Path(sandbox.dir))


def remove_dir(pod_dir: Path) -> None:
    """rm -r a pod folder, refusing if anything is mounted below it in our namespace."""
    text = Path("/proc/self/mountinfo").read_text()
    prefix = str(pod_dir.resolve()) + "/"
    if any(line.split()[4].startswith(prefix) for line in text.splitlines()):
        raise SandboxError(f"{pod_dir} has mounts in the agent's namespace; not removing it")
    shutil.rmtree(pod_dir, ignore_errors=True)


# --- containers -----------------------------------------------------------------------


def start_process(
    sandbox: Sandbox,
    argv: Sequence[str],
    env: Mapping[str, str],
    log: IO[bytes],
    *,
    run_as: tuple[int | None, int | None] = (None, None),
    workdir: str | None = None,
) -> subprocess.Popen[bytes]:
    """A container's main process in the sandbox; stdout and stderr to log."""
    return subprocess.Popen(
        sandbox.enter(argv, run_as, workdir),
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def process_in_pod(nsenter_pid: int) -> int | None:
    """The host PID of the process nsenter forked into the pod's PID namespace."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        children = Path(f"/proc/{nsenter_pid}/task/{nsenter_pid}/children").read_text().split()
        return int(children[0]) if children else None
    return None


def signal_process(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Signal the container's own process (nsenter does not forward signals)."""
    if proc.poll() is not None:
        return
    target = process_in_pod(proc.pid) or proc.pid
    with contextlib.suppress(ProcessLookupError):
        os.kill(target, sig)


def run_in_pod(
    sandbox: Sandbox,
    argv: Sequence[str],
    env: Mapping[str, str],
    timeout: float,
    run_as: tuple[int | None, int | None] = (None, None),
) -> tuple[int, str]:
    """An exec probe or hook: (exit code, output); timeout counts as failure (-1)."""
    try:
        done = subprocess.run(
            sandbox.enter(argv, run_as),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {timeout}s"
    return done.returncode, (done.stdout + done.stderr).decode(errors="replace")[-1024:]
