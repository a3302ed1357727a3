"""Values the adapter sends to Slurm, validated, and the scontrol argv built from them.

scontrol parses each argv element as one `Key=Value` and matches keys by
prefix (`src/scontrol/update_node.c`), so a value must never carry a second
`Key=`, whitespace a shell or scontrol's interactive mode would split on, or
the quotes scontrol strips. Names reuse `slurmkube.api.grammar`; what only
the adapter sends (reasons, reservation names, users, accounts) is defined
here. slurmrestd gets the same validated values so both backends accept and
refuse the same inputs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from slurmkube.api import grammar
from slurmkube.api import well_known as wk
from slurmkube.api.grammar import InvalidValue, SlurmToken
from slurmkube.api.well_known import DRAIN_REASON_PREFIX
from slurmkube.slurm.models import (
    JobSubmission,
    NodeStateChange,
    ReservationFlag,
    ReservationRequest,
    ReservationUpdate,
)

__all__ = [
    "account_name",
    "checked_reason",
    "create_reservation_argv",
    "delete_reservation_argv",
    "drain_reason",
    "duration_minutes",
    "features",
    "is_ours",
    "job_id",
    "node_names",
    "node_state_argv",
    "principals",
    "reason",
    "requeue_job_argv",
    "reservation_name",
    "slurm_duration",
    "slurm_start",
    "update_features_argv",
    "update_reservation_argv",
    "user_name",
]


def reason(value: object, where: str = "reason") -> str:
    """A node Reason= (shown by `sinfo -R`): the grammar planners use too."""
    return grammar.node_reason(value, where)


def drain_reason(value: str) -> str:
    """The reason slurmkube writes when it drains: prefixed, so `is_ours` can
    later tell it from an admin's."""
    return reason(f"{DRAIN_REASON_PREFIX} {value}" if not is_ours(value) else value, "reason")


is_ours = wk.is_ours


# Reservation names become Slurm object names and scontrol values; slurmkube
# derives them from Kubernetes UIDs (hex and '-').
_RESERVATION: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def reservation_name(value: object, where: str = "reservation name") -> str:
    return _check(_RESERVATION, value, where, "1-63 of [A-Za-z0-9_.-], starting alphanumeric")


# POSIX portable user names (useradd(8) default NAME_REGEX, plus '.').
_USER: Final = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")


def user_name(value: object, where: str = "user") -> str:
    return _check(_USER, value, where, "a user name: [a-z_] then up to 31 of [a-z0-9_.-]")


# sacctmgr(1) lowercases account names; no ',' (list separator) or ':'.
_ACCOUNT: Final = re.compile(r"[a-z0-9_][a-z0-9_.-]{0,63}")


def account_name(value: object, where: str = "account") -> str:
    return _check(_ACCOUNT, value, where, "an account: 1-64 of [a-z0-9_.-]")


def _check(pattern: re.Pattern[str], value: object, where: str, accepted: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InvalidValue(where=where, value=str(value), accepted=accepted)
    return value


def node_names(names: Iterable[str], where: str = "nodes") -> SlurmToken:
    """Validated node names joined with ',' (scontrol accepts a plain list)."""
    tokens = [grammar.hostname(n, f"{where}[{i}]") for i, n in enumerate(names)]
    if not tokens:
        raise InvalidValue(where, "", "at least one node name")
    return grammar.joined(tokens)


def features(values: Sequence[str], where: str = "features") -> SlurmToken:
    return grammar.joined(grammar.feature(v, f"{where}[{i}]") for i, v in enumerate(values))


def _names(values: Sequence[str], check: Callable[[object, str], str], where: str) -> str:
    return ",".join(check(v, f"{where}[{i}]") for i, v in enumerate(values))


def slurm_start(start: datetime | None) -> str:
    """StartTime= in UTC; the CLI backend runs scontrol with TZ=UTC so Slurm
    reads it the same way (scontrol(1): YYYY-MM-DD[THH:MM[:SS]])."""
    if start is None:
        return "now"
    if start.tzinfo is None:
        raise InvalidValue("start", start.isoformat(), "a timezone-aware datetime")
    return start.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def duration_minutes(duration: timedelta | None) -> int | None:
    """A reservation's length in whole minutes, rounded up; None is UNLIMITED."""
    if duration is None:
        return None
    seconds = int(duration.total_seconds())
    if seconds <= 0:
        raise InvalidValue("duration", str(duration), "a positive duration")
    return -(-seconds // 60)


def slurm_duration(duration: timedelta | None) -> str:
    """Duration= in whole minutes, rounded up; None is UNLIMITED."""
    minutes = duration_minutes(duration)
    return "UNLIMITED" if minutes is None else str(minutes)


def _flags(flags: Iterable[ReservationFlag]) -> str:
    return ",".join(sorted(ReservationFlag(f).value for f in flags))


def create_reservation_argv(request: ReservationRequest) -> list[str]:
    argv = [
        "create",
        "reservation",
        f"ReservationName={reservation_name(request.name)}",
        f"Nodes={node_names(request.nodes)}",
        f"StartTime={slurm_start(request.start)}",
        f"Duration={slurm_duration(request.duration)}",
    ]
    argv += _principals(request.users, request.accounts)
    if request.flags:
        argv.append(f"Flags={_flags(request.flags)}")
    if request.partition is not None:
        argv.append(f"PartitionName={grammar.partition_name(request.partition, 'partition')}")
    return argv


def update_reservation_argv(update: ReservationUpdate) -> list[str]:
    argv = ["update", f"ReservationName={reservation_name(update.name)}"]
    if update.nodes is not None:
        argv.append(f"Nodes={node_names(update.nodes)}")
    if update.start is not None:
        argv.append(f"StartTime={slurm_start(update.start)}")
    if update.duration is not None:
        argv.append(f"Duration={slurm_duration(update.duration)}")
    argv += _principals(update.users or (), update.accounts or ())
    if len(argv) == 2:
        raise InvalidValue("reservation update", update.name, "at least one field to change")
    return argv


def principals(users: Sequence[str], accounts: Sequence[str]) -> dict[str, list[str]]:
    """Who may use a reservation, validated: `users`/`accounts` as given, empty ones
    left out (on update: left unchanged)."""
    named = {}
    if users:
        named["users"] = _names(users, user_name, "users").split(",")
    if accounts:
        named["accounts"] = _names(accounts, account_name, "accounts").split(",")
    return named


def _principals(users: Sequence[str], accounts: Sequence[str]) -> list[str]:
    keys = {"users": "Users", "accounts": "Accounts"}
    return [f"{keys[k]}={','.join(v)}" for k, v in principals(users, accounts).items()]


def delete_reservation_argv(name: str) -> list[str]:
    return ["delete", f"ReservationName={reservation_name(name)}"]


def job_id(value: object, where: str = "job id") -> int:
    """A Slurm job id: uint32, 0 is no job (slurm.h NO_VAL is 0xfffffffe)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 0xFFFFFFFE:
        raise InvalidValue(where, str(value), "a job id from 1 to 4294967293")
    return value


def requeue_job_argv(job: int) -> list[str]:
    """scontrol(1) `requeue`: the running job is stopped and PENDING again, same id."""
    return ["requeue", str(job_id(job))]


def node_state_argv(node: str, state: NodeStateChange, why: str | None) -> list[str]:
    argv = ["update", f"NodeName={grammar.hostname(node, 'node')}", f"State={state.value}"]
    checked = checked_reason(state, why)
    if checked is not None:
        argv.append(f"Reason={checked}")
    return argv


def topology_units(units: Sequence[tuple[str, str]]) -> str:
    """`Topology=` of `scontrol update NodeName=`: `<topology>:<block or leaf switch>,...`;
    empty takes the nodes out of every unit and ends their override in Slurm's
    state (the files place them again at the next reconfigure)."""
    return ",".join(
        f"{grammar.topology_name(t, f'units[{i}].topology')}:"
        f"{grammar.topology_name(u, f'units[{i}].unit')}"
        for i, (t, u) in enumerate(units)
    )


def node_topology_argv(nodes: Sequence[str], units: Sequence[tuple[str, str]]) -> list[str]:
    return ["update", f"NodeName={node_names(nodes)}", f"Topology={topology_units(units)}"]


def checked_reason(state: NodeStateChange, why: str | None) -> str | None:
    state = NodeStateChange(state)
    if why is None:
        if state.needs_reason:
            raise InvalidValue("reason", "", f"a reason when setting a node {state.value}")
        return None
    return reason(why)


def update_features_argv(
    node: str, available: Sequence[str], active: Sequence[str] | None
) -> list[str]:
    """Active follows available unless given: scontrol does that only when the
    list grows, and refuses a shrink that leaves active features unavailable."""
    listed = features(available)
    acting = listed if active is None else features(active, "active features")
    return [
        "update",
        f"NodeName={grammar.hostname(node, 'node')}",
        f"AvailableFeatures={listed}",
        f"ActiveFeatures={acting}",
    ]


def submission(job: JobSubmission) -> dict[str, Any]:
    """slurmrestd's job_desc_msg (data_parser v0.0.40+) for `job`, every value checked:
    one node (`required_nodes`, min = max = 1) inside the reservation, output to
    /dev/null (a check's verdict is its exit code), never requeued."""
    if not 0 < job.time_limit_minutes <= 1440:
        raise InvalidValue("time limit", str(job.time_limit_minutes), "1-1440 minutes")
    if job.gpus < 0:
        raise InvalidValue("gpus", str(job.gpus), "0 or more")
    desc: dict[str, Any] = {
        "name": reservation_name(job.name, "job name"),
        "script": job.script,
        "reservation": reservation_name(job.reservation),
        "required_nodes": [grammar.hostname(job.node, "node")],
        "minimum_nodes": 1,
        "maximum_nodes": 1,
        "current_working_directory": "/tmp",
        "environment": ["PATH=/usr/local/bin:/usr/bin:/bin"],
        "standard_output": "/dev/null",
        "standard_error": "/dev/null",
        "time_limit": {"set": True, "infinite": False, "number": job.time_limit_minutes},
        "requeue": False,
    }
    if job.gpus:
        desc["tres_per_node"] = f"gres/gpu:{job.gpus}"
    if job.partitions:
        desc["partition"] = ",".join(
            grammar.partition_name(p, f"partitions[{i}]") for i, p in enumerate(job.partitions)
        )
    return desc
