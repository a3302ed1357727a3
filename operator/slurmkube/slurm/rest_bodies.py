"""What each slurmrestd data_parser version can write, and the request bodies
RestClient sends. Pure, no I/O.

Checked against the `/openapi/v3` of 24.11.5 and 26.05.5 (recorded in
tests/fixtures/slurm/): reservations can be created, updated (POST
/slurm/{v}/reservation) and deleted (DELETE /slurm/{v}/reservation/{name}) from
v0.0.43 on, a job requeued (GET /slurm/{v}/job/{id}/requeue) from v0.0.45 on,
and slurmctld's config read (GET /slurm/{v}/conf) from v0.0.45 on.
Every value passes the same checks as the scontrol argv (`arguments`), so both
backends accept and refuse the same inputs; JSON strings cannot carry a second
field the way an argv element could, but the grammar is the same anyway.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from slurmkube.api import grammar
from slurmkube.api.grammar import InvalidValue
from slurmkube.slurm import arguments
from slurmkube.slurm.models import (
    NodeStateChange,
    ReservationFlag,
    ReservationRequest,
    ReservationUpdate,
)
from slurmkube.slurm.parse import version_key

__all__ = [
    "RestAbilities",
    "abilities",
    "node_features_body",
    "node_state_body",
    "reservation_body",
    "reservation_update_body",
]


# The first data_parser version with each REST write (slurmrestd's /openapi/v3).
RESERVATION_WRITES_SINCE: Final = "v0.0.43"
JOB_REQUEUE_SINCE: Final = "v0.0.45"
CONFIG_READS_SINCE: Final = "v0.0.45"


@dataclass(frozen=True, slots=True)
class RestAbilities:
    """Which of the calls that scontrol can do this data_parser version does over REST."""

    version: str
    writes_reservations: bool
    requeues_jobs: bool
    reads_config: bool = False


def abilities(version: str) -> RestAbilities:
    key = version_key(version)
    return RestAbilities(
        version=version,
        writes_reservations=key >= version_key(RESERVATION_WRITES_SINCE),
        requeues_jobs=key >= version_key(JOB_REQUEUE_SINCE),
        reads_config=key >= version_key(CONFIG_READS_SINCE),
    )


# scontrol's flag names that the data_parser spells differently (slurm.h RESERVE_FLAG_*).
_REST_FLAG: Final[Mapping[ReservationFlag, str]] = {
    ReservationFlag.NO_HOLD_JOBS_AFTER: "NO_HOLD_JOBS_AFTER_END",
    ReservationFlag.STATIC_ALLOC: "STATIC",
}
# Flags a data_parser version before this one cannot parse.
_FLAG_SINCE: Final[Mapping[ReservationFlag, str]] = {ReservationFlag.REPLACE_DOWN: "v0.0.44"}


def _rest_flags(flags: Iterable[ReservationFlag], version: str) -> list[str] | None:
    """The data_parser's names of `flags`; None when `version` cannot say one of them."""
    checked = [ReservationFlag(f) for f in flags]
    if any(version_key(version) < version_key(_FLAG_SINCE.get(f, version)) for f in checked):
        return None
    return sorted(_REST_FLAG.get(f, f.value) for f in checked)


def _start(start: datetime | None) -> str | dict[str, Any]:
    """`now` is slurmctld's clock, as with scontrol; a given instant goes as epoch
    seconds, which no timezone of slurmrestd can reinterpret."""
    if start is None:
        return "now"
    if start.tzinfo is None:
        raise InvalidValue("start", start.isoformat(), "a timezone-aware datetime")
    return _number(int(start.astimezone(UTC).timestamp()))


def _number(value: int | None) -> dict[str, Any]:
    """The data_parser's `*_no_val_struct`; None is INFINITE (scontrol's UNLIMITED)."""
    if value is None:
        return {"set": True, "infinite": True, "number": 0}
    return {"set": True, "infinite": False, "number": value}


def _nodes(nodes: Sequence[str]) -> list[str]:
    return str(arguments.node_names(nodes)).split(",")


def reservation_body(request: ReservationRequest, version: str) -> dict[str, Any] | None:
    """`reservation_desc_msg` creating `request`, as `create_reservation_argv` would;
    None when this version cannot express one of its flags (scontrol then can)."""
    body: dict[str, Any] = {
        "name": arguments.reservation_name(request.name),
        "node_list": _nodes(request.nodes),
        "start_time": _start(request.start),
        "duration": _number(arguments.duration_minutes(request.duration)),
        **arguments.principals(request.users, request.accounts),
    }
    flags = _rest_flags(request.flags, version)
    if flags is None:
        return None
    if flags:
        body["flags"] = flags
    if request.partition is not None:
        body["partition"] = grammar.partition_name(request.partition, "partition")
    return body


def reservation_update_body(update: ReservationUpdate) -> dict[str, Any]:
    """`reservation_desc_msg` changing what `update` names, as
    `update_reservation_argv` would: fields left out stay as they are."""
    body: dict[str, Any] = {"name": arguments.reservation_name(update.name)}
    if update.nodes is not None:
        body["node_list"] = _nodes(update.nodes)
    if update.start is not None:
        body["start_time"] = _start(update.start)
    if update.duration is not None:
        body["duration"] = _number(arguments.duration_minutes(update.duration))
    body.update(arguments.principals(update.users or (), update.accounts or ()))
    if len(body) == 1:
        raise InvalidValue("reservation update", update.name, "at least one field to change")
    return body


# scontrol update State= -> slurmrestd's node state flags (update_node_msg).
_STATE_FLAGS: Final[Mapping[NodeStateChange, tuple[str, ...]]] = {
    NodeStateChange.POWER_DOWN_ASAP: ("POWER_DOWN", "POWER_DRAIN"),
    NodeStateChange.POWER_DOWN_FORCE: ("POWER_DOWN", "POWERED_DOWN"),
}


def node_state_body(state: NodeStateChange, reason: str | None) -> dict[str, Any]:
    state = NodeStateChange(state)
    body: dict[str, Any] = {"state": list(_STATE_FLAGS.get(state, (state.value,)))}
    checked = arguments.checked_reason(state, reason)
    if checked is not None:
        body["reason"] = checked
    return body


def _csv(joined: str) -> list[str] | str:
    # An empty list means "leave unchanged" to the data_parser; "" clears.
    return joined.split(",") if joined else ""


def node_move_body(nodes: Sequence[str], units: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """`POST /nodes/` (batch update, v0.0.43+): every node `name` lists into `units`,
    update_node_msg's `topology_str`, as scontrol's `Topology=`."""
    names = arguments.node_names(nodes)
    return {"name": names.split(","), "topology_str": arguments.topology_units(units)}


def node_features_body(available: Sequence[str], active: Sequence[str] | None) -> dict[str, Any]:
    """Same rule as the CLI (arguments.update_features_argv): active follows."""
    listed = arguments.features(available)
    acting = listed if active is None else arguments.features(active, "active features")
    return {"features": _csv(listed), "features_act": _csv(acting)}
