"""Start, find and stop the cluster's long-running processes by PID file.

The control plane must outlive `make cluster-up` and must be stopped by PID,
never by name (other builds share the machine). Each process gets its own
session (so a Ctrl-C in the terminal that started it does not reach it), a log
file, and a PID file. A PID file is trusted only while /proc/<pid>/cmdline still
names the executable we started, so a recycled PID is never signalled.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Process:
    """A named process of the cluster: how to start it and where its traces are."""

    name: str
    argv: tuple[str, ...]
    pid_dir: Path
    log_dir: Path
    env: tuple[tuple[str, str], ...] = ()

    @property
    def pid_file(self) -> Path:
        return self.pid_dir / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.log_dir / f"{self.name}.log"


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    fields = stat.rpartition(")")[2].split()
    return not fields or fields[0] in ("Z", "X")


def alive(pid: int) -> bool:
    """pid exists and has not exited (a child we never reaped shows as a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not _is_zombie(pid)


def running_pid(proc: Process) -> int | None:
    """The PID from the PID file if that process is alive and still runs our executable."""
    try:
        pid = int(proc.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    cmd = _cmdline(pid)
    if not cmd or _is_zombie(pid):
        return None
    if os.path.realpath(cmd[0]) != os.path.realpath(proc.argv[0]) or cmd[1:2] != list(
        proc.argv[1:2]
    ):
        return None
    return pid


def start(proc: Process) -> int:
    """Start proc detached, unless it already runs; returns its PID."""
    pid = running_pid(proc)
    if pid is not None:
        return pid
    proc.pid_dir.mkdir(parents=True, exist_ok=True)
    proc.log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **dict(proc.env)}
    with proc.log_file.open("ab") as log:
        log.write(
            f"--- start {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(proc.argv)}\n".encode()
        )
        log.flush()
        child = subprocess.Popen(
            proc.argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    proc.pid_file.write_text(f"{child.pid}\n")
    return child.pid


def stop(proc: Process, timeout: float = 20.0) -> int | None:
    """SIGTERM proc by PID, SIGKILL after timeout; removes the PID file. Returns the PID stopped."""
    pid = running_pid(proc)
    if pid is not None:
        _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while running_pid(proc) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        if running_pid(proc) is not None:
            _signal(pid, signal.SIGKILL)
            while running_pid(proc) is not None:
                time.sleep(0.05)
    proc.pid_file.unlink(missing_ok=True)
    return pid


def terminate(child: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGTERM a child this process started, SIGKILL after timeout."""
    child.terminate()
    try:
        child.wait(timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait(10)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def tail(path: Path, lines: int = 30) -> str:
    """The last lines of a log, for error messages that say why a process failed."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def listening_ports(ports: Sequence[int], host: str | None = None) -> list[int]:
    """Which of ports have a TCP socket in LISTEN state on this machine (from
    /proc/net); with `host`, only sockets bound to that address or to every address
    (the real nodes' API server relay listens on the bridge with the same port)."""
    wanted = set(ports)
    found: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            address, port_hex = fields[1].rsplit(":", 1)
            port = int(port_hex, 16)
            if fields[3] != "0A" or port not in wanted:
                continue
            if host is None or _bound_to(address, host):
                found.add(port)
    return sorted(found)


def _bound_to(address: str, host: str) -> bool:
    """/proc/net/tcp's hex address (32-bit words in host byte order) is `host` or
    the wildcard."""
    raw = bytes.fromhex(address)
    ip = ipaddress.ip_address(
        b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
        if sys.byteorder == "little"
        else raw
    )
    if ip.is_unspecified:
        return True
    wanted = ipaddress.ip_address(host)
    mapped = getattr(ip, "ipv4_mapped", None)
    return wanted in (ip, mapped)
