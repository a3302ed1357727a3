"""RestClient's HTTP behaviour over recorded responses (httpx.MockTransport, no daemon)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from slurmkube.controllers.apply import drained_idle
from slurmkube.slurm import (
    NodeStateChange,
    Reservation,
    ReservationFlag,
    ReservationRequest,
    ReservationUpdate,
    RestClient,
    SlurmAuthError,
    SlurmError,
    SlurmNotFound,
    SlurmRejected,
    SlurmUnreachable,
)
from slurmkube.slurm.incremental import SlurmLists
from slurmkube.slurm.parse import update_time_of
from slurmkube.slurm.responses import check_response
from slurmkube.slurm.rest_bodies import reservation_body

from . import slurm_recorded

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
KEY = b"k" * 32


def recorded(name: str, version: str = "v0.0.42") -> httpx.Response:
    doc = json.loads((FIXTURES / "rest" / version / f"{name}.json").read_text())
    return httpx.Response(doc["status"], json=doc["body"])


def openapi() -> httpx.Response:
    return httpx.Response(200, text=(FIXTURES / "openapi-24.11-paths.json").read_text())


@dataclass
class Server:
    """Answers by path; records every request."""

    routes: dict[str, Callable[[httpx.Request], httpx.Response]]
    seen: list[httpx.Request] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        route = self.routes.get(f"{request.method} {request.url.path}")
        if route is None:
            return httpx.Response(404, text="no route")
        return route(request)

    def paths(self) -> list[str]:
        return [f"{r.method} {r.url.path}" for r in self.seen]


def client(server: Server, **kwargs: Any) -> RestClient:
    options: dict[str, Any] = {"jwt_key": KEY, "max_backoff": 0.0}
    options.update(kwargs)
    return RestClient("http://slurmrestd", transport=httpx.MockTransport(server), **options)


def always(response: httpx.Response) -> Callable[[httpx.Request], httpx.Response]:
    return lambda _: response


def test_version_is_detected_once_and_used_for_every_path() -> None:
    server = Server(
        {
            "GET /openapi/v3": always(openapi()),
            "GET /slurm/v0.0.42/nodes/": always(recorded("nodes")),
        }
    )
    rest = client(server)

    assert len(rest.list_nodes()) == 10
    assert len(rest.list_nodes()) == 10
    assert server.paths() == [
        "GET /openapi/v3",
        "GET /slurm/v0.0.42/nodes/",
        "GET /slurm/v0.0.42/nodes/",
    ]


def test_minted_jwt_has_the_claims_slurm_expects_and_is_reused() -> None:
    server = Server({"GET /slurm/v0.0.40/ping/": always(recorded("ping", "v0.0.40"))})
    rest = client(server, data_parser="v0.0.40", user="slurmkube")

    rest.ping()
    rest.ping()

    tokens = {r.headers["X-SLURM-USER-TOKEN"] for r in server.seen}
    assert len(tokens) == 1
    claims = jwt.decode(tokens.pop(), KEY, algorithms=["HS256"])
    assert claims["sun"] == "slurmkube"
    assert claims["exp"] > claims["iat"]


def test_a_given_token_is_sent_as_is() -> None:
    server = Server({"GET /slurm/v0.0.42/ping/": always(recorded("ping"))})
    client(server, jwt_key=None, token="abc", data_parser="v0.0.42").ping()
    assert server.seen[0].headers["X-SLURM-USER-TOKEN"] == "abc"


@pytest.mark.parametrize("status", [502, 503, 504])
def test_transient_statuses_are_retried(status: int) -> None:
    answers = iter([httpx.Response(status, text="busy"), recorded("nodes")])
    server = Server({"GET /slurm/v0.0.42/nodes/": lambda _: next(answers)})

    assert client(server, data_parser="v0.0.42").list_nodes()
    assert len(server.seen) == 2


@pytest.mark.parametrize(
    ("response", "error"),
    [
        (httpx.Response(400, json={"errors": [{"error": "bad"}]}), SlurmRejected),
        (httpx.Response(401, text="Authentication failure"), SlurmAuthError),
        (httpx.Response(404, text="Not found"), SlurmNotFound),
        (recorded("nodes-bad-token"), SlurmAuthError),
        (recorded("node-update-unknown"), SlurmNotFound),
    ],
)
def test_client_errors_are_never_retried(response: httpx.Response, error: type[SlurmError]) -> None:
    server = Server({"GET /slurm/v0.0.42/nodes/": always(response)})
    with pytest.raises(error):
        client(server, data_parser="v0.0.42", attempts=5).list_nodes()
    assert len(server.seen) == 1


def test_connection_errors_become_unreachable_after_the_last_attempt() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    server = Server({"GET /slurm/v0.0.42/nodes/": refuse})
    with pytest.raises(SlurmUnreachable, match="ConnectError"):
        client(server, data_parser="v0.0.42", attempts=3).list_nodes()
    assert len(server.seen) == 3


@pytest.mark.parametrize(
    ("name", "error", "message"),
    [
        ("nodes-bad-token", SlurmAuthError, "Protocol authentication error"),
        ("node-update-unknown", SlurmNotFound, "Invalid node name specified"),
        ("node-update-bad-state", SlurmRejected, "Invalid node state specified"),
        ("reservation-unknown", SlurmRejected, "Unable to find reservation nosuch"),
    ],
)
def test_recorded_failures_map_to_typed_errors_with_slurms_words(
    name: str, error: type[SlurmError], message: str
) -> None:
    response = recorded(name)
    with pytest.raises(error, match=message) as raised:
        check_response(response.status_code, response.text, "op")
    assert raised.value.operation == "op"


def test_ok_responses_pass_and_slurmctld_down_is_unreachable() -> None:
    assert check_response(200, recorded("nodes").text, "op")["nodes"]
    with pytest.raises(SlurmUnreachable):
        check_response(502, json.dumps({"errors": [{"error_number": 1800}]}), "op")
    with pytest.raises(SlurmError):
        check_response(200, "not json", "op")


def test_unknown_node_is_not_found() -> None:
    server = Server({"GET /slurm/v0.0.42/node/nosuch": always(recorded("node-unknown"))})
    with pytest.raises(SlurmNotFound):
        client(server, data_parser="v0.0.42").get_node("nosuch")


def test_get_node_takes_partitions_from_the_partition_list() -> None:
    partitions = {
        "partitions": [
            {"name": "gb200", "nodes": {"configured": "gb200-[001-004]"}},
            {"name": "cpu", "nodes": {"configured": "cpu-01"}},
        ]
    }
    server = Server(
        {
            "GET /slurm/v0.0.42/node/gb200-001": always(recorded("node-gb200-001")),
            "GET /slurm/v0.0.42/partitions/": always(httpx.Response(200, json=partitions)),
        }
    )
    assert client(server, data_parser="v0.0.42").get_node("gb200-001").partitions == ("gb200",)


@pytest.mark.parametrize(
    ("state", "reason", "body"),
    [
        (NodeStateChange.DRAIN, "slurmkube: x", {"state": ["DRAIN"], "reason": "slurmkube: x"}),
        (NodeStateChange.UNDRAIN, None, {"state": ["UNDRAIN"]}),
        (NodeStateChange.POWER_DOWN_ASAP, None, {"state": ["POWER_DOWN", "POWER_DRAIN"]}),
    ],
)
def test_node_updates_post_slurms_state_flags(
    state: NodeStateChange, reason: str | None, body: dict[str, Any]
) -> None:
    server = Server({"POST /slurm/v0.0.42/node/n1": always(httpx.Response(200, json={}))})
    client(server, data_parser="v0.0.42").update_node_state("n1", state, reason)
    assert json.loads(server.seen[0].content) == body


def test_features_set_active_too_and_empty_clears() -> None:
    server = Server({"POST /slurm/v0.0.42/node/n1": always(httpx.Response(200, json={}))})
    rest = client(server, data_parser="v0.0.42")
    rest.set_node_features("n1", ["a", "b"])
    rest.set_node_features("n1", [])
    assert [json.loads(r.content) for r in server.seen] == [
        {"features": ["a", "b"], "features_act": ["a", "b"]},
        {"features": "", "features_act": ""},
    ]


@dataclass
class ReservationWriter:
    """Stands in for the CLI backend: records what RestClient hands it."""

    calls: list[str] = field(default_factory=list)

    def create_reservation(self, request: ReservationRequest) -> Reservation:
        self.calls.append(f"create {request.name}")
        return Reservation(name=request.name, nodes=request.nodes, start=None, end=None)

    def update_reservation(self, update: ReservationUpdate) -> Reservation:
        self.calls.append(f"update {update.name}")
        return Reservation(name=update.name, nodes=(), start=None, end=None)

    def delete_reservation(self, name: str) -> None:
        self.calls.append(f"delete {name}")

    def requeue_job(self, job_id: int) -> None:
        self.calls.append(f"requeue {job_id}")


def test_reservation_writes_are_delegated_and_need_a_delegate() -> None:
    server = Server({})
    writer = ReservationWriter()
    rest = client(server, data_parser="v0.0.42", reservations=writer)

    rest.create_reservation(ReservationRequest(name="r", nodes=("n1",), users=("root",)))
    rest.update_reservation(ReservationUpdate(name="r", nodes=("n2",)))
    rest.delete_reservation("r")
    rest.requeue_job(12)

    assert writer.calls == ["create r", "update r", "delete r", "requeue 12"]
    assert server.seen == []
    with pytest.raises(SlurmError, match="cannot create reservations"):
        client(server, data_parser="v0.0.42").create_reservation(
            ReservationRequest(name="r", nodes=("n1",), users=("root",))
        )


def test_reservations_are_read_over_rest() -> None:
    server = Server({"GET /slurm/v0.0.42/reservations/": always(recorded("reservations"))})
    rest = client(server, data_parser="v0.0.42")
    assert rest.get_reservation("test_res").nodes == ("gb200-020", "gb200-021")
    with pytest.raises(SlurmNotFound):
        rest.get_reservation("other")


def test_ping_with_a_refused_token_is_an_auth_error() -> None:
    down = {"pings": [{"hostname": "c", "pinged": "DOWN", "responding": False, "mode": "primary"}]}
    server = Server(
        {
            "GET /slurm/v0.0.42/ping/": always(httpx.Response(200, json=down)),
            "GET /slurm/v0.0.42/diag/": always(recorded("nodes-bad-token")),
        }
    )
    with pytest.raises(SlurmAuthError):
        client(server, data_parser="v0.0.42").ping()


def test_exactly_one_credential() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        RestClient("http://x", token="t", jwt_key=KEY)
    with pytest.raises(ValueError, match="exactly one"):
        RestClient("http://x")


@pytest.mark.parametrize(
    ("answer", "changed"),
    [
        # slurmctld: SLURM_NO_CHANGE_IN_DATA; slurmrestd: 304 Not Modified, no body.
        (httpx.Response(304), False),
        # Nodes changed, partitions not: 24.11's slurmrestd fails loading those.
        (
            httpx.Response(
                500,
                json={
                    "errors": [
                        {
                            "description": "Unable to query partitions",
                            "error_number": -1,
                            "error": "Unspecified error",
                            "source": "_dump_nodes",
                        }
                    ]
                },
            ),
            True,
        ),
        (recorded("nodes"), True),
    ],
)
def test_a_node_change_is_told_without_reading_every_node(
    answer: httpx.Response, changed: bool
) -> None:
    server = Server(
        {"GET /slurm/v0.0.42/nodes/": always(answer)},
    )
    assert client(server, data_parser="v0.0.42").nodes_changed_since(1796352974) is changed
    assert server.seen[0].url.params["update_time"] == "1796352974"


@pytest.mark.parametrize(
    ("answer", "changed_at"),
    [
        # slurmctld: SLURM_NO_CHANGE_IN_DATA; slurmrestd: no jobs and no update time.
        (httpx.Response(200, json={"jobs": [], "warnings": [], "errors": []}), 0),
        (recorded("jobs"), "recorded"),
    ],
)
def test_a_job_change_is_told_without_keeping_any_job(
    answer: httpx.Response, changed_at: int | str
) -> None:
    server = Server({"GET /slurm/v0.0.42/jobs/": always(answer)})
    told = client(server, data_parser="v0.0.42").jobs_changed_since(1796352974)
    assert server.seen[0].url.params["update_time"] == "1796352974"
    if changed_at == "recorded":
        assert told == update_time_of(recorded("jobs").json())
        assert told > 0
    else:
        assert told == changed_at


def test_a_node_list_carries_slurmctlds_update_time() -> None:
    server = Server({"GET /slurm/v0.0.42/nodes/": always(recorded("nodes"))})
    listed = client(server, data_parser="v0.0.42").node_list()
    assert listed.update_time == 1796226837
    assert len(listed.nodes) > 0


@pytest.mark.parametrize(
    ("probe", "full_reads"),
    [(httpx.Response(304), 1), (recorded("nodes"), 2)],
    ids=["unchanged: the last list", "changed: read again"],
)
def test_current_nodes_reads_every_node_only_after_a_change(
    probe: httpx.Response, full_reads: int
) -> None:
    def nodes(request: httpx.Request) -> httpx.Response:
        return probe if "update_time" in request.url.params else recorded("nodes")

    server = Server({"GET /slurm/v0.0.42/nodes/": nodes})
    rest = client(server, data_parser="v0.0.42")
    first = rest.current_nodes()
    again = rest.current_nodes()
    assert again.nodes == first.nodes
    reads = [r for r in server.seen if "update_time" not in r.url.params]
    assert len(reads) == full_reads
    assert [r.url.params["update_time"] for r in server.seen if r not in reads] == [
        str(first.update_time)
    ]


def test_a_client_given_the_last_lists_reads_no_node_before_a_change() -> None:
    def nodes(request: httpx.Request) -> httpx.Response:
        return httpx.Response(304) if "update_time" in request.url.params else recorded("nodes")

    server = Server({"GET /slurm/v0.0.42/nodes/": nodes})
    lists = SlurmLists()
    first = client(server, data_parser="v0.0.42", lists=lists).current_nodes()
    made_again = client(server, data_parser="v0.0.42", lists=lists)
    assert made_again.current_nodes() is first
    assert [r.url.params.get("update_time") for r in server.seen] == [
        None,
        str(first.update_time),
    ]


def test_pods_waiting_for_their_drain_ask_slurm_only_whether_a_node_changed() -> None:
    """apply's check after draining: each reconcile while jobs run asks with the
    kept list's time, and reads every node again only after a change."""

    def nodes(request: httpx.Request) -> httpx.Response:
        return httpx.Response(304) if "update_time" in request.url.params else recorded("nodes")

    server = Server({"GET /slurm/v0.0.42/nodes/": nodes})
    rest = client(server, data_parser="v0.0.42")
    pods = {"gb200-001": "pod-busy", "gb200-003": "pod-idle"}
    assert drained_idle(rest, pods) == ["pod-idle"]
    assert drained_idle(rest, pods) == ["pod-idle"]
    assert [r.url.params.get("update_time") is None for r in server.seen] == [True, False]


def test_jobs_are_listed_again_only_when_slurmctld_changed_one() -> None:
    # What 24.11's slurmrestd answers when slurmctld says SLURM_NO_CHANGE_IN_DATA.
    unchanged = httpx.Response(
        200,
        json={
            "jobs": [],
            "last_update": {"set": False, "infinite": False, "number": 0},
            "warnings": [
                {
                    "description": "No job changes since update_time[1796226837]",
                    "source": "_op_handler_jobs",
                }
            ],
            "errors": [],
        },
    )
    answers = iter([recorded("jobs"), unchanged, recorded("jobs")])
    server = Server({"GET /slurm/v0.0.42/jobs/": lambda _: next(answers)})
    rest = client(server, data_parser="v0.0.42")
    first = rest.list_jobs()
    assert first
    assert rest.list_jobs() == first  # unchanged: the last list
    assert rest.list_jobs() == first  # changed: listed again (the same jobs here)
    assert [r.url.params.get("update_time") for r in server.seen] == [
        None,
        "1796226837",
        "1796226837",
    ]


# --- reservation writes and requeue over REST (26.05's data_parsers) ---

WRITTEN = slurm_recorded.WRITTEN_RESERVATION


def answers(*responses: httpx.Response) -> Callable[[httpx.Request], httpx.Response]:
    """The responses in turn, the last one for every later request."""
    pending = list(responses)
    return lambda _: pending.pop(0) if len(pending) > 1 else pending[0]


def live(version: str, **routes: Callable[[httpx.Request], httpx.Response]) -> Server:
    """slurmrestd 26.05 as recorded: its /openapi/v3 and `routes` under /slurm/{version}."""
    table = {"GET /openapi/v3": always(httpx.Response(200, json=slurm_recorded.openapi("26.05")))}
    for key, route in routes.items():
        method, path = key.split(" ", 1)
        table[f"{method} /slurm/{version}{path}"] = route
    return Server(table)


@pytest.mark.parametrize(("release", "over_rest"), [("24.11", False), ("26.05", True)])
def test_reservation_writes_follow_the_data_parser_the_daemon_offers(
    release: str, over_rest: bool
) -> None:
    doc = slurm_recorded.openapi(release)
    server = Server({"GET /openapi/v3": always(httpx.Response(200, json=doc))})
    rest = client(server, reservations=ReservationWriter())
    assert rest.abilities.writes_reservations is over_rest
    assert rest.abilities.requeues_jobs is over_rest


@pytest.mark.parametrize("version", ["v0.0.43", "v0.0.44", "v0.0.45"])
def test_a_reservation_is_created_over_rest_and_read_back(version: str) -> None:
    recorded_26 = functools.partial(slurm_recorded.response, "26.05", version)
    server = live(
        version,
        **{
            "GET /reservations/": answers(
                recorded_26("reservations"), recorded_26("reservation-updated")
            ),
            "POST /reservation": always(recorded_26("reservation-create")),
        },
    )
    writer = ReservationWriter()
    made = client(server, data_parser=version, reservations=writer).create_reservation(WRITTEN)

    assert (made.name, made.nodes) == ("recorded_res", ("n1",))
    assert server.paths() == [
        f"GET /slurm/{version}/reservations/",
        f"POST /slurm/{version}/reservation",
        f"GET /slurm/{version}/reservations/",
    ]
    assert json.loads(server.seen[1].content) == reservation_body(WRITTEN, version)
    assert writer.calls == []


@pytest.mark.parametrize("name", ["test_res", "TEST_RES"])
def test_a_taken_name_is_refused_and_nothing_is_written(name: str) -> None:
    listed = slurm_recorded.response("26.05", "v0.0.45", "reservations")
    server = live("v0.0.45", **{"GET /reservations/": always(listed)})
    taken = replace(WRITTEN, name=name)
    with pytest.raises(SlurmRejected, match="Duplicate reservation name"):
        client(server, data_parser="v0.0.45").create_reservation(taken)
    assert [p for p in server.paths() if p.startswith("POST")] == []


def test_an_update_changes_only_what_it_names_and_never_creates() -> None:
    recorded_45 = functools.partial(slurm_recorded.response, "26.05", "v0.0.45")
    server = live(
        "v0.0.45",
        **{
            "GET /reservations/": always(recorded_45("reservation-updated")),
            "POST /reservation": always(recorded_45("reservation-update")),
        },
    )
    rest = client(server, data_parser="v0.0.45")
    update = ReservationUpdate(name="recorded_res", users=("root", "slurm"))

    assert rest.update_reservation(update).users == ("root", "slurm")
    (posted,) = [r for r in server.seen if r.method == "POST"]
    assert json.loads(posted.content) == {"name": "recorded_res", "users": ["root", "slurm"]}

    with pytest.raises(SlurmNotFound, match="nosuch"):
        rest.update_reservation(ReservationUpdate(name="nosuch", users=("root",)))
    assert len([r for r in server.seen if r.method == "POST"]) == 1


@pytest.mark.parametrize(
    ("name", "answer", "error"),
    [
        ("recorded_res", "reservation-delete", None),
        ("nosuch", "reservation-delete-unknown", SlurmNotFound),
    ],
)
def test_a_reservation_is_deleted_over_rest_and_a_missing_one_is_not_found(
    name: str, answer: str, error: type[SlurmError] | None
) -> None:
    recorded_45 = functools.partial(slurm_recorded.response, "26.05", "v0.0.45")
    server = live(
        "v0.0.45",
        **{
            f"DELETE /reservation/{name}": always(recorded_45(answer)),
            "GET /reservations/": always(recorded_45("reservations")),
        },
    )
    rest = client(server, data_parser="v0.0.45", reservations=ReservationWriter())
    if error is None:
        rest.delete_reservation(name)
    else:
        with pytest.raises(error):
            rest.delete_reservation(name)
    assert server.paths()[0] == f"DELETE /slurm/v0.0.45/reservation/{name}"


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (httpx.Response(200, json={"status": [], "errors": [], "warnings": []}), None),
        (slurm_recorded.response("26.05", "v0.0.45", "job-requeue-unknown"), SlurmNotFound),
        (slurm_recorded.response("26.05", "v0.0.45", "job-requeue-pending"), SlurmRejected),
    ],
)
def test_v0_0_45_requeues_over_rest(answer: httpx.Response, error: type[SlurmError] | None) -> None:
    server = live("v0.0.45", **{"GET /job/12/requeue": always(answer)})
    writer = ReservationWriter()
    rest = client(server, data_parser="v0.0.45", reservations=writer)
    if error is None:
        rest.requeue_job(12)
    else:
        with pytest.raises(error):
            rest.requeue_job(12)
    assert (server.paths(), writer.calls) == (["GET /slurm/v0.0.45/job/12/requeue"], [])


def test_before_v0_0_45_a_requeue_goes_to_scontrol() -> None:
    writer = ReservationWriter()
    client(Server({}), data_parser="v0.0.44", reservations=writer).requeue_job(12)
    assert writer.calls == ["requeue 12"]


def test_a_flag_the_version_cannot_parse_goes_to_scontrol() -> None:
    writer = ReservationWriter()
    rest = client(Server({}), data_parser="v0.0.43", reservations=writer)
    rest.create_reservation(replace(WRITTEN, flags=frozenset({ReservationFlag.REPLACE_DOWN})))
    assert writer.calls == ["create recorded_res"]
