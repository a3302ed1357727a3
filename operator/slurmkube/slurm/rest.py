"""The slurmrestd backend: what an operator in its own pod speaks.

The data_parser version (v0.0.40-v0.0.45) is read from `/openapi/v3` on
first use and the newest one slurmkube knows is used. Requests carry a JWT in
`X-SLURM-USER-TOKEN`: a given token, or one minted from the cluster's
`jwt.key` as Slurm's auth/jwt expects (HS256; `exp`, `iat`, `sun` =
username; see jwt.html in the Slurm docs). Transient failures (connection
errors, 502/503/504, which slurmrestd returns when slurmctld is down) are
retried with backoff; nothing else is, and never a 4xx (`slurm/rest_calls.py`).

Reservations are created, updated and deleted over REST from v0.0.43 on (26.05),
jobs requeued from v0.0.45 on (`rest_bodies.abilities`). 24.11's slurmrestd
(v0.0.40-v0.0.42) can do neither: `RestClient` then *delegates* those calls to
the `ReservationWriter` given as `reservations` (normally a `CliClient`): it is
composed with it, not derived from it, and reads stay on REST.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import httpx

from slurmkube.api import grammar
from slurmkube.slurm import arguments
from slurmkube.slurm import rest_bodies as bodies
from slurmkube.slurm.decode import Converters
from slurmkube.slurm.errors import (
    SlurmError,
    SlurmNotFound,
    SlurmRejected,
    SlurmUnreachable,
    missing_or_rejected,
)
from slurmkube.slurm.incremental import SlurmLists
from slurmkube.slurm.models import (
    ControllerPing,
    Job,
    JobList,
    JobSubmission,
    Node,
    NodeList,
    NodeStateChange,
    Reservation,
    ReservationRequest,
    ReservationUpdate,
)
from slurmkube.slurm.parse import (
    choose_data_parser,
    config_loaded_from,
    jobs_from,
    node_from,
    nodes_from,
    partition_members,
    pings_from,
    reservations_from,
    update_time_of,
)
from slurmkube.slurm.protocol import ACTIVE_JOB_STATES, ReservationWriter
from slurmkube.slurm.rest_calls import RestCalls, http_client
from slurmkube.slurm.tokens import token_source

__all__ = ["RestClient"]

_NODES: Final = {"nodes": node_from}
# The probe's answer, when a node changed, is every node: it only tells that one
# did, so each is dropped as it is decoded (one item at a time, so neither a
# whole fleet's dicts nor one long parse that holds the GIL).
_NODES_DROPPED: Final = {"nodes": lambda _index, _item: None}
_JOBS_DROPPED: Final = {"jobs": lambda _index, _item: None}

log = logging.getLogger(__name__)


class RestClient:
    """`SlurmClient` over slurmrestd (see the module docstring for what is delegated).

    Give exactly one of `token` (used as is) or `jwt_key`/`jwt_key_file`
    (tokens minted for `user`). `data_parser` pins a version instead of
    asking `/openapi/v3`. `lists` keeps the last node and job lists
    (slurm/incremental.py); give the cluster's own to a client made again.
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        jwt_key: bytes | None = None,
        jwt_key_file: str | Path | None = None,
        user: str = "root",
        reservations: ReservationWriter | None = None,
        data_parser: str | None = None,
        timeout: float = 10.0,
        list_timeout: float = 120.0,
        attempts: int = 4,
        max_backoff: float = 2.0,
        transport: httpx.BaseTransport | None = None,
        lists: SlurmLists | None = None,
        ca_pem: bytes | None = None,
        server_name: str | None = None,
    ) -> None:
        minted = token_source(user, token=token, jwt_key=jwt_key, jwt_key_file=jwt_key_file)
        self._user = user
        self._reservations = reservations
        self._data_parser = data_parser
        self._version_lock = threading.Lock()
        self._url = url
        self._http = http_client(url, timeout=timeout, transport=transport, ca_pem=ca_pem)
        self._calls = RestCalls(
            self._http,
            minted,
            attempts=attempts,
            max_backoff=max_backoff,
            server_name=server_name,
        )
        # slurmrestd needs ~16 s to list 25,000 nodes: the full read gets its own
        # timeout, the calls whose answers do not grow with the fleet keep `timeout`.
        self._list_timeout = list_timeout
        self._lists = SlurmLists() if lists is None else lists

    @property
    def user(self) -> str:
        """Whom minted tokens name: the owner of jobs this client submits."""
        return self._user

    @property
    def url(self) -> str:
        """slurmrestd's URL as given."""
        return self._url

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the data_parser in every path (each request: slurm/rest_calls.py) ---
    @property
    def data_parser(self) -> str:
        with self._version_lock:
            if self._data_parser is None:
                self._data_parser = choose_data_parser(
                    self._calls.send("GET", "/openapi/v3", "detect data_parser version")
                )
                log.info("slurmrestd data_parser=%s", self._data_parser)
            return self._data_parser

    def _slurm(
        self,
        method: str,
        path: str,
        operation: str,
        body: Mapping[str, Any] | None = None,
        convert: Converters | None = None,
        *,
        timeout: float | None = None,
    ) -> Mapping[str, Any]:
        path = f"/slurm/{self.data_parser}{path}"
        return self._calls.send(method, path, operation, body, convert, timeout=timeout)

    # --- controller ---
    def ping(self) -> tuple[ControllerPing, ...]:
        pings = pings_from(self._slurm("GET", "/ping/", "ping"))
        if any(p.responding for p in pings):
            return pings
        # slurmrestd reports a rejected token as "DOWN" on /ping; a call that
        # needs slurmctld tells auth failure (511) from a dead controller (502).
        self._slurm("GET", "/diag/", "ping")
        raise SlurmUnreachable("no slurmctld is responding", operation="ping")

    def reconfigure(self) -> None:
        self._slurm("GET", "/reconfigure/", "reconfigure")

    def config_loaded_at(self) -> datetime:
        """When slurmctld last read its files (`GET /conf`, v0.0.45+)."""
        if not self.abilities.reads_config:
            raise SlurmError(f"slurmrestd {self.data_parser} serves no /conf")
        return config_loaded_from(self._slurm("GET", "/conf", "read config"))

    # --- nodes ---
    def list_nodes(self) -> tuple[Node, ...]:
        """Every node, read in full now (kept for `current_nodes` too)."""
        return self.node_list().nodes

    def node_list(self) -> NodeList:
        """Every node, and the time slurmctld last changed any (`update_time` for
        `nodes_changed_since`), read in full."""
        # Each node becomes its model as it is decoded: see slurm/decode.py.
        doc = self._slurm(
            "GET", "/nodes/", "list nodes", convert=_NODES, timeout=self._list_timeout
        )
        return self._lists.nodes.keep(NodeList(nodes_from(doc), update_time_of(doc)))

    def current_nodes(self) -> NodeList:
        """Every node as `node_list` gives them, read in full only when slurmctld
        changed a node since this client's last full read: otherwise the last list,
        after a probe that costs the same at any fleet size (`nodes_changed_since`;
        2 ms against 16 s for the full read at 25,000 nodes). Threads sharing this
        client's lists wait for one full read instead of each making their own."""
        return self._lists.nodes.current(lambda _: self.node_list(), self.nodes_changed_since)

    def nodes_changed_since(self, update_time: int) -> bool:
        """Whether any node changed since `update_time` (a node list's), at a cost
        that does not grow with the fleet when none did: slurmctld then answers
        SLURM_NO_CHANGE_IN_DATA instead of the nodes and slurmrestd sends an
        empty 304 Not Modified. When nodes changed, 24.11's slurmrestd goes on to
        load the partitions with the same time and answers 500 if those did not
        change (openapi/slurmctld nodes.c): any answer but 304 means a change.
        slurmctld counts a change in the second of `update_time` as a change
        (`last_update - 1 >= last_node_update` is "no change", proc_req.c)."""
        operation = "nodes changed since"
        try:
            # The list's timeout: when a node changed, the answer is every node.
            doc = self._slurm(
                "GET",
                f"/nodes/?update_time={int(update_time)}",
                operation,
                convert=_NODES_DROPPED,
                timeout=self._list_timeout,
            )
        except SlurmRejected:
            return True
        return bool(doc)

    def get_node(self, name: str) -> Node:
        node = grammar.hostname(name, "node")
        operation = f"get node {node}"
        # An unknown node is a 200 with an empty list (and an error numbered 0).
        for item in nodes_from(self._slurm("GET", f"/node/{node}", operation)):
            if item.name == node:
                return replace(item, partitions=self._partitions_of(node, operation))
        raise SlurmNotFound(f"node {node} not found", operation=operation)

    def _partitions_of(self, node: str, operation: str) -> tuple[str, ...]:
        """24.11's /node/{name} fills `partitions` by indexing a one-node array
        with cluster-wide node indices (slurm_populate_node_partitions), so it
        names the partitions of the cluster's first node. Ask /partitions/."""
        members = partition_members(self._slurm("GET", "/partitions/", operation))
        return tuple(p for p, nodes in members.items() if nodes is None or node in nodes)

    def update_node_state(
        self, name: str, state: NodeStateChange, reason: str | None = None
    ) -> None:
        node = grammar.hostname(name, "node")
        body = bodies.node_state_body(state, reason)
        self._slurm("POST", f"/node/{node}", f"set node {node} {state}", body)

    def set_node_features(
        self, name: str, available: Sequence[str], active: Sequence[str] | None = None
    ) -> None:
        node = grammar.hostname(name, "node")
        body = bodies.node_features_body(available, active)
        self._slurm("POST", f"/node/{node}", f"set features of node {node}", body)

    def move_nodes(self, nodes: Sequence[str], units: Sequence[tuple[str, str]]) -> None:
        body = bodies.node_move_body(nodes, units)
        self._slurm("POST", "/nodes/", f"move {len(nodes)} nodes", body)

    # --- jobs ---
    def list_jobs(self, states: Collection[str] = ACTIVE_JOB_STATES) -> tuple[Job, ...]:
        """The jobs in `states`. Asked with the time of the last list:
        slurmctld then sends no jobs when none changed (SLURM_NO_CHANGE_IN_DATA,
        which slurmrestd answers with a warning, openapi/slurmctld jobs.c), and
        the last list stands."""
        wanted = frozenset(states)
        listed = self._lists.jobs.current(self._jobs_since)
        return tuple(j for j in listed.jobs if j.state & wanted)

    def jobs_changed_since(self, update_time: int) -> int:
        """0 when no job changed since `update_time` (an earlier answer's), at a cost
        that grows with neither the fleet nor the queue: slurmctld compares the
        time before it packs anything (`_slurm_rpc_dump_jobs`, proc_req.c) and
        slurmrestd then sends no jobs. Otherwise the answer's update_time, every
        job in it dropped as it is decoded."""
        doc = self._slurm(
            "GET",
            f"/jobs/?update_time={int(update_time)}",
            "jobs changed since",
            convert=_JOBS_DROPPED,
            timeout=self._list_timeout,
        )
        return update_time_of(doc)

    def _jobs_since(self, since: int) -> JobList | None:
        path = f"/jobs/?update_time={since}" if since else "/jobs/"
        doc = self._slurm("GET", path, "list jobs", timeout=self._list_timeout)
        listed_at = update_time_of(doc)
        return JobList(jobs_from(doc), listed_at) if listed_at or not since else None

    def requeue_job(self, job_id: int) -> None:
        if not self.abilities.requeues_jobs:
            self._writer("requeue jobs").requeue_job(job_id)
            return
        job = arguments.job_id(job_id)
        self._slurm("GET", f"/job/{job}/requeue", f"requeue job {job}")

    def set_admin_comment(self, job_id: int, text: str) -> None:
        """A job's AdminComment (`POST /job/{id}`, a job_desc_msg; SlurmUser may)."""
        job = arguments.job_id(job_id)
        self._slurm("POST", f"/job/{job}", f"comment job {job}", {"admin_comment": text})

    def submit_job(self, job: JobSubmission) -> int:
        """Submit a batch job (POST /job/submit, v0.0.40+); returns its id."""
        operation = f"submit job {job.name}"
        doc = self._slurm("POST", "/job/submit", operation, {"job": arguments.submission(job)})
        submitted = doc.get("job_id")
        if not isinstance(submitted, int):
            raise SlurmError("slurmrestd returned no job_id", operation=operation)
        return submitted

    # --- reservations ---
    def list_reservations(self) -> tuple[Reservation, ...]:
        return reservations_from(self._slurm("GET", "/reservations/", "list reservations"))

    def get_reservation(self, name: str) -> Reservation:
        # GET /reservation/{name} answers an unknown name with a generic 422,
        # so look it up in the list instead.
        checked = arguments.reservation_name(name)
        for res in self.list_reservations():
            if res.name == checked:
                return res
        raise SlurmNotFound(
            f"reservation {checked} not found", operation=f"get reservation {checked}"
        )

    @property
    def abilities(self) -> bodies.RestAbilities:
        """What this slurmrestd's data_parser writes itself (asks `/openapi/v3` once)."""
        return bodies.abilities(self.data_parser)

    def _writer(self, operation: str) -> ReservationWriter:
        if self._reservations is None:
            raise SlurmError(
                f"slurmrestd {self.data_parser} cannot {operation}; "
                "give RestClient(reservations=CliClient(...))",
                operation=operation,
            )
        return self._reservations

    def create_reservation(self, request: ReservationRequest) -> Reservation:
        body = bodies.reservation_body(request, self.data_parser)
        if not self.abilities.writes_reservations or body is None:
            return self._writer("create reservations").create_reservation(request)
        name = body["name"]
        operation = f"create reservation {name}"
        # POST /reservation updates a reservation of that name (compared without
        # case) instead of refusing it as scontrol create does: refuse it here.
        if any(r.name.casefold() == name.casefold() for r in self.list_reservations()):
            raise SlurmRejected(
                f"reservation {name} exists: Duplicate reservation name", operation=operation
            )
        self._slurm("POST", "/reservation", operation, body)
        return self.get_reservation(name)

    def update_reservation(self, update: ReservationUpdate) -> Reservation:
        if not self.abilities.writes_reservations:
            return self._writer("update reservations").update_reservation(update)
        body = bodies.reservation_update_body(update)
        name = body["name"]
        operation = f"update reservation {name}"
        # POST /reservation would create a reservation that does not exist.
        if not any(r.name == name for r in self.list_reservations()):
            raise SlurmNotFound(f"reservation {name} not found", operation=operation)
        self._slurm("POST", "/reservation", operation, body)
        return self.get_reservation(name)

    def delete_reservation(self, name: str) -> None:
        if not self.abilities.writes_reservations:
            self._writer("delete reservations").delete_reservation(name)
            return
        checked = arguments.reservation_name(name)
        operation = f"delete reservation {checked}"
        missing_or_rejected(
            lambda: self._slurm("DELETE", f"/reservation/{checked}", operation),
            lambda: self.get_reservation(checked),
            f"reservation {checked}",
            operation,
        )
