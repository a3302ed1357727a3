"""PID 1 of a pod sandbox: build the pod's filesystem view, then reap orphans.

Started by the agent as `unshare --net --mount --uts --ipc --pid --fork` so it
is the first process of fresh namespaces (the pause container of a kubelet
pod). It reads the agent's plan (JSON), sets the hostname, mounts the image
(read-only binds of the host's /usr and the Slurm build, or an overlay on a
built image's extracted files with the pod's /etc bound over it), /proc, a private
/dev with the pod's GPU device files and the pod's volumes under the rootfs,
chroots there, prints `ready`, and then only reaps the orphans a daemon leaves
(slurmd's slurmstepd is reparented here). When it dies the kernel kills every
process of the pod and drops its mounts and network namespace: nothing of the
pod can outlive it. It runs with `python3 -S -E` and imports only the standard
library, before the chroot, so it costs little and needs nothing in the rootfs.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import stat
import sys
from pathlib import Path
from typing import Any

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18

_libc = ctypes.CDLL(None, use_errno=True)


def mount(
    source: str, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    rc = _libc.mount(
        source.encode(),
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target} ({fstype or 'bind'}): {os.strerror(err)}")


def bind(source: str, target: str, read_only: bool, recursive: bool = False) -> None:
    src = Path(source)
    dst = Path(target)
    if src.is_dir():
        dst.mkdir(parents=True, exist_ok=True)
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not dst.exists():
            dst.touch()
    mount(source, target, None, MS_BIND | (MS_REC if recursive else 0))
    if read_only:
        mount("none", target, None, MS_BIND | MS_REMOUNT | MS_RDONLY)


def make_dev(root: str, devices: list[dict[str, Any]]) -> None:
    dev = f"{root}/dev"
    Path(dev).mkdir(exist_ok=True)
    mount("tmpfs", dev, "tmpfs", MS_NOSUID, "mode=755,size=1m")
    for d in devices:
        os.mknod(f"{dev}/{d['name']}", 0o666 | stat.S_IFCHR, os.makedev(d["major"], d["minor"]))
        os.chmod(f"{dev}/{d['name']}", 0o666)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, f"{dev}/{name}")
    Path(f"{dev}/shm").mkdir()
    mount("shm", f"{dev}/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m")


def setup(plan: dict[str, Any]) -> None:
    root = plan["rootfs"]
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    socket.sethostname(plan["hostname"])
    overlay = plan.get("overlay")
    if overlay:
        # A built image: its files read-only below, the pod's writable layer above.
        options = (
            f"lowerdir={overlay['lower']},upperdir={overlay['upper']},workdir={overlay['work']}"
        )
        mount("overlay", root, "overlay", 0, options)
    for b in plan["image_binds"]:
        bind(b["source"], root + b["target"], read_only=b["read_only"])
    # Recursive: slurmd initialises its cgroup plugin even with proctrack/linuxproc.
    bind("/sys", f"{root}/sys", read_only=True, recursive=True)
    Path(f"{root}/proc").mkdir(exist_ok=True)
    mount("proc", f"{root}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    make_dev(root, plan["devices"])
    for b in plan["volume_binds"]:
        bind(b["source"], root + b["target"], read_only=b["read_only"])
    os.chroot(root)
    os.chdir("/")


def reap_forever() -> None:
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        try:
            os.wait()
        except ChildProcessError:
            signal.pause()
        except InterruptedError:
            continue


def main() -> None:
    plan = json.loads(Path(sys.argv[1]).read_text())
    try:
        setup(plan)
    except OSError as err:
        print(f"sandbox setup failed: {err}", flush=True)
        sys.exit(1)
    print("ready", flush=True)
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    reap_forever()


if __name__ == "__main__":
    main()
