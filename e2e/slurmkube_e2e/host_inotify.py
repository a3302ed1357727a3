"""The host's inotify limits, raised before real nodes start so their kubelets can.

Every real node's daemons run as root and take inotify instances and watches
from root's per-user allowance (inotify(7), "/proc interfaces":
`fs.inotify.max_user_instances`, default 128, and `fs.inotify.max_user_watches`).
A kubelet that cannot get one dies at start (`Failed to start cAdvisor:
inotify_init: too many open files`), so `realnodes.up` measures what root
holds now, adds what the new nodes will take, and raises a limit that is too
low, or fails naming the sysctl and the value needed. A limit is never lowered.

`limits_to_raise` is the arithmetic (pure); the rest reads /proc.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SYSCTL_DIR = Path("/proc/sys/fs/inotify")
INSTANCES = "max_user_instances"
WATCHES = "max_user_watches"


@dataclass(frozen=True)
class InotifyUse:
    """inotify instances and watches, held or needed."""

    instances: int
    watches: int

    def __add__(self, other: InotifyUse) -> InotifyUse:
        return InotifyUse(self.instances + other.instances, self.watches + other.watches)

    def __mul__(self, times: int) -> InotifyUse:
        return InotifyUse(self.instances * times, self.watches * times)


# One real node, measured on this test bed: the kubelet holds 6 instances,
# containerd 2, kube-proxy 1. The kubelet's cAdvisor watches every cgroup of
# the host in every hierarchy: about 120 watches with no pods, and about 18 more
# for each pod running on any node; 14 pods on each of 8 nodes make ~2,140.
PER_NODE = InotifyUse(instances=9, watches=2200)
# Room for another checkout's eight real nodes starting alongside (every slot's
# nodes draw on the same root allowance) and for the host's other daemons.
HEADROOM = PER_NODE * 8


@dataclass(frozen=True)
class LimitRaise:
    """One sysctl that is below what the nodes need."""

    sysctl: str
    current: int
    needed: int
    in_use: int

    @property
    def name(self) -> str:
        return f"fs.inotify.{self.sysctl}"


def limits_to_raise(
    limits: InotifyUse,
    in_use: InotifyUse,
    new_nodes: int,
    per_node: InotifyUse = PER_NODE,
    headroom: InotifyUse = HEADROOM,
) -> list[LimitRaise]:
    """The limits below in_use + new_nodes * per_node + headroom, with that value;
    none when no node is new (nodes already running hold their share)."""
    if new_nodes <= 0:
        return []
    needed = in_use + per_node * new_nodes + headroom
    rows = (
        (INSTANCES, limits.instances, needed.instances, in_use.instances),
        (WATCHES, limits.watches, needed.watches, in_use.watches),
    )
    return [LimitRaise(*row) for row in rows if row[2] > row[1]]


def read_limits(sysctl_dir: Path = SYSCTL_DIR) -> InotifyUse:
    return InotifyUse(
        int((sysctl_dir / INSTANCES).read_text()), int((sysctl_dir / WATCHES).read_text())
    )


def root_use(proc: Path = Path("/proc")) -> InotifyUse:
    """What this user's processes hold. A descriptor shared by several processes
    counts once per process, so this is an upper bound."""
    uid = os.getuid()
    total = InotifyUse(0, 0)
    for pid in proc.iterdir():
        try:
            if pid.name.isdigit() and pid.stat().st_uid == uid:
                total += process_use(pid)
        except OSError:
            continue
    return total


def process_use(pid: Path) -> InotifyUse:
    """One process's inotify descriptors (/proc/<pid>/fd) and their `inotify wd:`
    lines (/proc/<pid>/fdinfo, one per watch); nothing once it has exited."""
    instances = watches = 0
    try:
        fds = list((pid / "fd").iterdir())
    except OSError:
        return InotifyUse(0, 0)
    for fd in fds:
        try:
            if os.readlink(fd) != "anon_inode:inotify":
                continue
            info = (pid / "fdinfo" / fd.name).read_text()
        except OSError:
            continue
        instances += 1
        watches += sum(1 for line in info.splitlines() if line.startswith("inotify wd:"))
    return InotifyUse(instances, watches)


class InotifyLimitError(RuntimeError):
    """A limit is too low for the real nodes and could not be raised."""


def ensure_room(new_nodes: int, sysctl_dir: Path = SYSCTL_DIR) -> list[LimitRaise]:
    """Raise every limit the new nodes would exceed; the raises made, for the log."""
    raises = limits_to_raise(read_limits(sysctl_dir), root_use(), new_nodes)
    for r in raises:
        try:
            (sysctl_dir / r.sysctl).write_text(f"{r.needed}\n")
        except OSError as e:
            raise InotifyLimitError(
                f"{r.name} is {r.current}; {new_nodes} new real nodes need {r.needed} "
                f"({r.in_use} in use by uid {os.getuid()}, plus theirs and room for another "
                f"checkout's): could not raise it ({e}); run `sysctl -w {r.name}={r.needed}` "
                "as root"
            ) from e
    return raises
