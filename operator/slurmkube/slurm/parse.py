"""Slurm's data_parser JSON -> the typed models in `models.py`. Pure, no I/O.

slurmrestd (`/slurm/v0.0.4x/...`) and `scontrol show ... --json` print the
same data_parser documents, so both backends parse here. The fields read are
the same in v0.0.40-v0.0.45 (checked against responses recorded from 24.11
and 26.05 in tests/fixtures/slurm/); everything else is ignored, so newer
fields break nothing. Numbers may be integers or `{"set", "infinite", "number"}`.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Annotated, Any, Final, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from slurmkube.slurm.errors import SlurmError
from slurmkube.slurm.gres import gres_gpu_type, gres_gpus, tres_gpus
from slurmkube.slurm.hostlist import HostlistError, expand
from slurmkube.slurm.models import ControllerPing, Job, Node, Reservation

__all__ = [
    "SUPPORTED_DATA_PARSERS",
    "SlurmMessage",
    "choose_data_parser",
    "gres_gpus",
    "jobs_from",
    "messages_from",
    "node_from",
    "nodes_from",
    "partition_members",
    "pings_from",
    "reservations_from",
    "tres_gpus",
    "update_time_of",
    "version_key",
]

# Oldest first. 24.11 serves v0.0.40-v0.0.42; 26.05 serves v0.0.42-v0.0.45 (25.05
# added v0.0.43, 25.11 v0.0.44). Each has recorded responses in tests/fixtures/slurm/.
SUPPORTED_DATA_PARSERS: Final = (
    "v0.0.40",
    "v0.0.41",
    "v0.0.42",
    "v0.0.43",
    "v0.0.44",
    "v0.0.45",
)


def _number(value: Any) -> Any:
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        return value.get("number")
    return value


def _text(value: Any) -> Any:
    return "" if value is None else value


def _names(value: Any) -> Any:
    """A list, or a comma-separated string (users, accounts), as a tuple."""
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(v for v in (x.strip() for x in value.split(",")) if v)
    return value


Number = Annotated[int | None, BeforeValidator(_number)]
Text = Annotated[str, BeforeValidator(_text)]
Names = Annotated[tuple[str, ...], BeforeValidator(_names)]


class _Edge(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _NodeJson(_Edge):
    name: str
    state: Names = ()
    reason: Text = ""
    reason_set_by_user: Text = ""
    features: Names = ()
    active_features: Names = ()
    partitions: Names = ()
    gres: Text = ""
    gres_used: Text = ""
    cpus: Number = 0
    alloc_cpus: Number = 0
    real_memory: Number = 0
    alloc_memory: Number = 0
    reservation: Text = ""
    address: Text = ""
    last_busy: Number = 0
    reason_changed_at: Number = 0
    topology: Text = ""


class _JobJson(_Edge):
    job_id: int
    name: Text = ""
    user_name: Text = ""
    account: Text = ""
    job_state: Names = ()
    partition: Text = ""
    priority: Number = 0
    node_count: Number = 0
    nodes: Text = ""
    state_reason: Text = ""
    resv_name: Text = ""
    features: Text = ""
    tres_per_node: Text = ""
    tres_per_job: Text = ""
    tres_per_task: Text = ""
    tasks: Number = 0
    gres_detail: tuple[str, ...] = ()
    submit_time: Number = None
    start_time: Number = None
    end_time: Number = None
    time_limit: Number = None  # minutes
    batch_flag: bool = False
    requeue: bool = False
    restart_cnt: Number = 0
    admin_comment: Text = ""


class _ReservationJson(_Edge):
    name: str
    node_list: Text = ""
    node_count: Number = 0
    start_time: Number = None
    end_time: Number = None
    flags: Names = ()
    users: Names = ()
    accounts: Names = ()
    partition: Text = ""


class _PartitionNodesJson(_Edge):
    configured: Text = ""


class _PartitionJson(_Edge):
    name: str
    nodes: _PartitionNodesJson = _PartitionNodesJson()


class _PingJson(_Edge):
    hostname: Text = ""
    responding: bool | None = None
    pinged: Text = ""
    mode: Text = ""
    latency: Number = 0


class SlurmMessage(_Edge):
    """One entry of a response's `errors` (or `warnings`) list."""

    description: Text = ""
    error_number: Number = 0
    error: Text = ""
    source: Text = ""

    def __str__(self) -> str:
        parts = [p for p in (self.description, self.error) if p and p != "No error"]
        return ": ".join(parts) or f"error {self.error_number}"


_M = TypeVar("_M", bound=_Edge)


def _items(doc: Mapping[str, Any], key: str) -> list[Any]:
    items = doc.get(key)
    if items is None:
        return []
    if not isinstance(items, list):
        raise SlurmError(f"unexpected Slurm response: {key!r} is {type(items).__name__}")
    return items


def _parse(model: type[_M], doc: Mapping[str, Any], key: str) -> list[_M]:
    try:
        return [model.model_validate(item) for item in _items(doc, key)]
    except ValidationError as err:
        raise SlurmError(f"unexpected Slurm response in {key!r}: {err}") from err


def _time(epoch: int | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, UTC) if epoch else None


def _hosts(expression: str) -> tuple[str, ...]:
    try:
        return expand(expression)
    except HostlistError as err:
        raise SlurmError(f"unexpected Slurm response: {err}") from err


def update_time_of(doc: Mapping[str, Any]) -> int:
    """A response's `last_update`, epoch seconds (0 when not given)."""
    value = _number(doc.get("last_update"))
    return int(value) if isinstance(value, int | float) else 0


def config_loaded_from(doc: Mapping[str, Any]) -> datetime:
    """When slurmctld last read its files, from `GET /conf` (v0.0.45+):
    `slurm_conf_meta.LastUpdate`, what scontrol prints as `Configuration data as of`."""
    meta = doc.get("slurm_conf_meta")
    epoch = meta.get("LastUpdate") if isinstance(meta, Mapping) else None
    loaded = _time(epoch) if isinstance(epoch, int) else None
    if loaded is None:
        raise SlurmError("slurmctld's config has no slurm_conf_meta.LastUpdate")
    return loaded


def nodes_from(doc: Mapping[str, Any]) -> tuple[Node, ...]:
    """Items already converted by `node_from` while decoding pass through."""
    return tuple(
        item if isinstance(item, Node) else node_from(i, item)
        for i, item in enumerate(_items(doc, "nodes"))
    )


def node_from(index: int, item: Any) -> Node:
    """One item of a response's `nodes` list (the `index`th)."""
    try:
        return _node(_NodeJson.model_validate(item))
    except ValidationError as err:
        raise SlurmError(f"unexpected Slurm response in 'nodes' item {index}: {err}") from err


def _node(n: _NodeJson) -> Node:
    """Values most nodes of a fleet share (states, features, partitions, GRES) are
    one object each: a client keeps the last list of every node (slurm/incremental.py),
    and each item is decoded on its own."""
    return Node(
        name=n.name,
        state=_shared(frozenset(n.state)),
        base_state=_shared(n.state[0] if n.state else "UNKNOWN"),
        reason=_shared(n.reason),
        reason_set_by=_shared(n.reason_set_by_user),
        features=_shared(n.features),
        active_features=_shared(n.active_features),
        partitions=_shared(n.partitions),
        gres=_shared(n.gres),
        gpus=gres_gpus(n.gres),
        gpu_type=_shared(gres_gpu_type(n.gres)),
        gpus_allocated=gres_gpus(n.gres_used),
        cpus=n.cpus or 0,
        cpus_allocated=n.alloc_cpus or 0,
        memory_mib=n.real_memory or 0,
        memory_allocated_mib=n.alloc_memory or 0,
        reservation=n.reservation,
        address=n.address,
        last_busy=n.last_busy or 0,
        reason_changed_at=n.reason_changed_at or 0,
        topology=n.topology,
    )


_H = TypeVar("_H", bound=Hashable)


@lru_cache(maxsize=4096)
def _shared(value: _H) -> _H:
    return value


def jobs_from(doc: Mapping[str, Any]) -> tuple[Job, ...]:
    return tuple(_job(j) for j in _parse(_JobJson, doc, "jobs"))


def _job(j: _JobJson) -> Job:
    return Job(
        job_id=j.job_id,
        name=j.name,
        user=j.user_name,
        account=j.account,
        state=frozenset(j.job_state),
        partition=j.partition,
        priority=j.priority or 0,
        node_count=j.node_count or 0,
        nodes=_hosts(j.nodes),
        reason=j.state_reason,
        reservation=j.resv_name,
        features=j.features,
        gpus_per_node=tres_gpus(j.tres_per_node),
        gpus_per_job=tres_gpus(j.tres_per_job),
        gpus_per_task=tres_gpus(j.tres_per_task),
        tasks=j.tasks or 0,
        gpus_allocated=sum(gres_gpus(d) for d in j.gres_detail),
        submit_time=_time(j.submit_time),
        start_time=_time(j.start_time),
        end_time=_time(j.end_time),
        time_limit=timedelta(minutes=j.time_limit) if j.time_limit is not None else None,
        batch=j.batch_flag,
        requeue=j.requeue,
        restarts=j.restart_cnt or 0,
        admin_comment=j.admin_comment,
    )


def reservations_from(doc: Mapping[str, Any]) -> tuple[Reservation, ...]:
    return tuple(
        Reservation(
            name=r.name,
            nodes=_hosts(r.node_list),
            start=_time(r.start_time),
            end=_time(r.end_time),
            flags=frozenset(r.flags),
            users=r.users,
            accounts=r.accounts,
            partition=r.partition,
            node_count=r.node_count or 0,
        )
        for r in _parse(_ReservationJson, doc, "reservations")
    )


def partition_members(doc: Mapping[str, Any]) -> dict[str, frozenset[str] | None]:
    """Partition name -> its nodes, in slurm.conf order; None for `Nodes=ALL`."""
    members: dict[str, frozenset[str] | None] = {}
    for part in _parse(_PartitionJson, doc, "partitions"):
        configured = part.nodes.configured
        members[part.name] = None if configured == "ALL" else frozenset(_hosts(configured))
    return members


def pings_from(doc: Mapping[str, Any]) -> tuple[ControllerPing, ...]:
    return tuple(
        ControllerPing(
            hostname=p.hostname,
            # v0.0.40 has only `pinged`; later versions add `responding`.
            responding=p.responding if p.responding is not None else p.pinged == "UP",
            # v0.0.45 drops `mode`; pings come in SlurmctldHost order, as scontrol
            # ping names them.
            mode=p.mode or ("primary" if i == 0 else f"backup{i}"),
            latency_us=p.latency or 0,
        )
        for i, p in enumerate(_parse(_PingJson, doc, "pings"))
    )


def messages_from(doc: Mapping[str, Any], key: str = "errors") -> tuple[SlurmMessage, ...]:
    return tuple(_parse(SlurmMessage, doc, key))


_VERSION_PATH: Final = re.compile(r"/slurm/(v0\.0\.\d+)/")


def version_key(version: str) -> tuple[int, ...]:
    """`v0.0.45` -> (0, 0, 45), for ordering data_parser versions."""
    return tuple(int(x) for x in version.lstrip("v").split("."))


def choose_data_parser(openapi: Mapping[str, Any]) -> str:
    """The newest data_parser version both slurmrestd (its `/openapi/v3`
    `paths`) and this adapter support."""
    paths = openapi.get("paths")
    if not isinstance(paths, Mapping):
        raise SlurmError("slurmrestd /openapi/v3 has no 'paths'")
    offered = {m.group(1) for p in paths if (m := _VERSION_PATH.match(p))}
    usable = sorted(offered & set(SUPPORTED_DATA_PARSERS), key=version_key)
    if not usable:
        raise SlurmError(
            f"slurmrestd offers data_parser {sorted(offered, key=version_key) or 'none'} "
            f"for /slurm/; slurmkube supports {', '.join(SUPPORTED_DATA_PARSERS)} "
            "(load openapi/slurmctld with one of them)"
        )
    return usable[-1]
