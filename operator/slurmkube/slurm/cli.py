"""The scontrol backend: what 24.11's slurmrestd cannot do, and a fallback where
no slurmrestd runs.

Every call is one `scontrol` process with an argv list (never a shell) whose
values passed `slurmkube.slurm.arguments`; reads use `--json`, which prints
the same data_parser documents as slurmrestd, so parsing is shared
(`slurmkube.slurm.parse`). scontrol runs with TZ=UTC so the StartTime values
written here and the times it prints mean the same instant everywhere.
sacctmgr is not used: nothing here needs slurmdbd.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from slurmkube.api import grammar
from slurmkube.api.slurm_version import SlurmVersion, release_series
from slurmkube.slurm import arguments
from slurmkube.slurm.errors import (
    SlurmAuthError,
    SlurmError,
    SlurmNotFound,
    SlurmRejected,
    SlurmUnreachable,
    missing_or_rejected,
)
from slurmkube.slurm.models import (
    ControllerPing,
    Job,
    Node,
    NodeStateChange,
    Reservation,
    ReservationRequest,
    ReservationUpdate,
)
from slurmkube.slurm.parse import (
    jobs_from,
    messages_from,
    nodes_from,
    pings_from,
    reservations_from,
)
from slurmkube.slurm.protocol import ACTIVE_JOB_STATES
from slurmkube.slurm.topology_text import TopologyRecord, parse_topology, parse_topology_yaml

__all__ = ["CliClient", "classify_failure", "run_slurm_command"]

log = logging.getLogger(__name__)

# scontrol's messages (slurm_strerror texts, src/common/slurm_errno.c) by meaning.
_UNREACHABLE: Final = re.compile(
    r"Unable to contact slurm controller|Connection refused|Socket timed out|"
    r"Zero Bytes were transmitted|Communication connection failure|Connection timed out",
    re.IGNORECASE,
)
_AUTH: Final = re.compile(
    r"authentication|Invalid authentication credential|Access/permission denied|"
    r"Authentication credential expired",
    re.IGNORECASE,
)
_CONFIG_AS_OF: Final = re.compile(r"Configuration data as of (\S+)")
_NOT_FOUND: Final = re.compile(
    r"\bnot found\b|Invalid node name specified|Invalid job id specified", re.IGNORECASE
)


def classify_failure(output: str, operation: str) -> SlurmError:
    """scontrol's stderr (Slurm's own words) -> the matching SlurmError."""
    message = output.strip() or "scontrol failed without a message"
    if _UNREACHABLE.search(message):
        return SlurmUnreachable(message, operation=operation)
    if _AUTH.search(message):
        return SlurmAuthError(message, operation=operation)
    if _NOT_FOUND.search(message):
        return SlurmNotFound(message, operation=operation)
    return SlurmRejected(message, operation=operation)


def run_slurm_command(
    command: Sequence[str], env: Mapping[str, str], timeout: float, operation: str
) -> str:
    """One Slurm client process (argv list, no shell); its stdout, or the SlurmError
    its stderr means. `command[0]` is the program (scontrol, sacctmgr)."""
    program = Path(command[0]).name
    try:
        proc = subprocess.run(
            list(command),
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as err:
        raise SlurmError(f"{program} not found ({command[0]})", operation=operation) from err
    except subprocess.TimeoutExpired as err:
        raise SlurmUnreachable(
            f"{program} did not finish in {timeout:g}s", operation=operation
        ) from err
    if proc.returncode != 0:
        log.debug("%s failed op=%s rc=%s", program, operation, proc.returncode)
        raise classify_failure(proc.stderr or proc.stdout, operation)
    return proc.stdout


class CliClient:
    """`SlurmClient` over scontrol.

    `bin_dir` holds scontrol (default: found on `env`'s PATH); `env` is the
    environment for scontrol (default: this process's), where SLURM_CONF
    points at the cluster. Authentication is whatever scontrol uses there
    (auth/slurm through a sack socket, or munge); with `jwt`, each call carries
    a fresh token in SLURM_JWT instead (see `slurmkube.slurm.jwt_cli`). `wrapper` turns the argv
    into the one to run, for scontrol that must run elsewhere: inside
    `kubectl exec` into the controller pod, or a test cluster's namespace.
    """

    def __init__(
        self,
        *,
        bin_dir: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        wrapper: Callable[[list[str]], list[str]] | None = None,
        jwt: Callable[[], str] | None = None,
    ) -> None:
        self._wrapper = wrapper
        self._jwt = jwt
        self._scontrol = str(Path(bin_dir) / "scontrol") if bin_dir else "scontrol"
        self._env = {**(env if env is not None else os.environ), "TZ": "UTC"}
        self._timeout = timeout
        self._release: SlurmVersion | None = None

    # --- process plumbing ---
    def _run(self, argv: Sequence[str], operation: str) -> str:
        command = [self._scontrol, *argv]
        if self._wrapper is not None:
            command = self._wrapper(command)
        env = self._env if self._jwt is None else {**self._env, "SLURM_JWT": self._jwt()}
        return run_slurm_command(command, env, self._timeout, operation)

    def _json(self, argv: Sequence[str], operation: str) -> Mapping[str, Any]:
        out = self._run(["--json", *argv], operation)
        try:
            doc = json.loads(out)
        except json.JSONDecodeError as err:
            raise SlurmError(
                f"scontrol printed no JSON: {out[:200]!r}", operation=operation
            ) from err
        if not isinstance(doc, Mapping):
            raise SlurmError("scontrol printed JSON that is not an object", operation=operation)
        errors = [e for e in messages_from(doc) if e.error_number]
        if errors:
            raise classify_failure("; ".join(str(e) for e in errors), operation)
        return doc

    # --- controller ---
    def ping(self) -> tuple[ControllerPing, ...]:
        pings = pings_from(self._json(["ping"], "ping"))
        if not any(p.responding for p in pings):
            raise SlurmUnreachable("no slurmctld is responding", operation="ping")
        return pings

    def reconfigure(self) -> None:
        self._run(["reconfigure"], "reconfigure")

    def show_topology(self) -> dict[str, TopologyRecord]:
        """The blocks/switches slurmctld has in force (no REST endpoint in 24.11)."""
        return parse_topology(self._run(["show", "topology"], "show topology"))

    def show_topologies(self) -> dict[str, dict[str, TopologyRecord]]:
        """Slurm 25.05+: every named topology in force, per topology (`show topoconf`)."""
        out = self._run(["show", "topoconf"], "show topoconf")
        try:
            return parse_topology_yaml(out)
        except ValueError as err:
            raise SlurmError(f"unreadable topologies: {err}", operation="show topoconf") from err

    def release(self) -> SlurmVersion | None:
        """The release series of this scontrol (`scontrol --version`: `slurm 24.11.5`),
        asked once; None when it names none."""
        if self._release is None:
            words = self._run(["--version"], "version").split()
            self._release = release_series(words[-1]) if words else None
        return self._release

    def config_loaded_at(self) -> datetime:
        """When slurmctld last read its files: `Configuration data as of` (a reconfigure
        re-reads them), printed by this scontrol in UTC (TZ in `_env`)."""
        out = self._run(["show", "config"], "show config")
        found = _CONFIG_AS_OF.search(out)
        if found is None:
            raise SlurmError("scontrol show config printed no 'Configuration data as of'")
        return datetime.fromisoformat(found.group(1)).replace(tzinfo=UTC)

    # --- nodes ---
    def list_nodes(self) -> tuple[Node, ...]:
        return nodes_from(self._json(["show", "node"], "list nodes"))

    def get_node(self, name: str) -> Node:
        node = grammar.hostname(name, "node")
        found = nodes_from(self._json(["show", "node", node], f"get node {node}"))
        for item in found:
            if item.name == node:
                return item
        raise SlurmNotFound(f"node {node} not found", operation=f"get node {node}")

    def update_node_state(
        self, name: str, state: NodeStateChange, reason: str | None = None
    ) -> None:
        argv = arguments.node_state_argv(name, state, reason)
        self._run(argv, f"set node {name} {state}")

    def set_node_features(
        self, name: str, available: Sequence[str], active: Sequence[str] | None = None
    ) -> None:
        argv = arguments.update_features_argv(name, available, active)
        self._run(argv, f"set features of node {name}")

    def move_nodes(self, nodes: Sequence[str], units: Sequence[tuple[str, str]]) -> None:
        self._run(arguments.node_topology_argv(nodes, units), f"move {len(nodes)} nodes")

    # --- jobs ---
    def list_jobs(self, states: Collection[str] = ACTIVE_JOB_STATES) -> tuple[Job, ...]:
        jobs = jobs_from(self._json(["show", "job"], "list jobs"))
        wanted = frozenset(states)
        return tuple(j for j in jobs if j.state & wanted)

    def requeue_job(self, job_id: int) -> None:
        self._run(arguments.requeue_job_argv(job_id), f"requeue job {job_id}")

    # --- reservations ---
    def list_reservations(self) -> tuple[Reservation, ...]:
        return reservations_from(self._json(["show", "reservation"], "list reservations"))

    def get_reservation(self, name: str) -> Reservation:
        checked = arguments.reservation_name(name)
        operation = f"get reservation {checked}"
        for res in reservations_from(self._json(["show", "reservation", checked], operation)):
            if res.name == checked:
                return res
        raise SlurmNotFound(f"reservation {checked} not found", operation=operation)

    def create_reservation(self, request: ReservationRequest) -> Reservation:
        argv = arguments.create_reservation_argv(request)
        self._run(argv, f"create reservation {request.name}")
        return self.get_reservation(request.name)

    def update_reservation(self, update: ReservationUpdate) -> Reservation:
        argv = arguments.update_reservation_argv(update)
        self._on_reservation(argv, update.name, "update")
        return self.get_reservation(update.name)

    def delete_reservation(self, name: str) -> None:
        self._on_reservation(arguments.delete_reservation_argv(name), name, "delete")

    def _on_reservation(self, argv: Sequence[str], name: str, verb: str) -> None:
        operation = f"{verb} reservation {name}"
        missing_or_rejected(
            lambda: self._run(argv, operation),
            lambda: self.get_reservation(name),
            f"reservation {name}",
            operation,
        )
