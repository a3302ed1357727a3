"""slurmrestd request bodies per data_parser version (slurmkube.slurm.rest_bodies)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkube.api.grammar import InvalidValue
from slurmkube.slurm import arguments
from slurmkube.slurm.models import ReservationFlag, ReservationRequest, ReservationUpdate
from slurmkube.slurm.rest_bodies import (
    abilities,
    reservation_body,
    reservation_update_body,
)

WRITERS = ["v0.0.43", "v0.0.44", "v0.0.45"]
HOUR = {"set": True, "infinite": False, "number": 60}


def request(**fields: Any) -> ReservationRequest:
    base: dict[str, Any] = {"name": "wl-1", "nodes": ("gb200-001",), "users": ("slurm",)}
    return ReservationRequest(**{**base, **fields})


@pytest.mark.parametrize(
    ("version", "reservations", "requeue"),
    [
        ("v0.0.40", False, False),
        ("v0.0.42", False, False),
        ("v0.0.43", True, False),
        ("v0.0.44", True, False),
        ("v0.0.45", True, True),
    ],
)
def test_writes_over_rest_follow_the_data_parser_version(
    version: str, reservations: bool, requeue: bool
) -> None:
    can = abilities(version)
    assert (can.writes_reservations, can.requeues_jobs) == (reservations, requeue)


@pytest.mark.parametrize("version", WRITERS)
@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {},
            {
                "name": "wl-1",
                "node_list": ["gb200-001"],
                "users": ["slurm"],
                "start_time": "now",
                "duration": {"set": True, "infinite": True, "number": 0},
            },
        ),
        (
            {
                "nodes": ("gb200-001", "gb200-002"),
                "users": ("alice", "bob"),
                "accounts": ("team-a",),
                "start": datetime(2026, 12, 4, 10, 0, tzinfo=timezone(timedelta(hours=2))),
                "duration": timedelta(minutes=59, seconds=1),
                "flags": frozenset({ReservationFlag.IGNORE_JOBS, ReservationFlag.MAINT}),
                "partition": "gpu",
            },
            {
                "name": "wl-1",
                "node_list": ["gb200-001", "gb200-002"],
                "users": ["alice", "bob"],
                "accounts": ["team-a"],
                "start_time": {"set": True, "infinite": False, "number": 1796371200},
                "duration": HOUR,
                "flags": ["IGNORE_JOBS", "MAINT"],
                "partition": "gpu",
            },
        ),
        (
            {"flags": frozenset({ReservationFlag.NO_HOLD_JOBS_AFTER})},
            {"flags": ["NO_HOLD_JOBS_AFTER_END"]},
        ),
        ({"flags": frozenset({ReservationFlag.STATIC_ALLOC})}, {"flags": ["STATIC"]}),
    ],
)
def test_a_reservation_request_becomes_slurms_reservation_desc(
    version: str, fields: dict[str, Any], expected: dict[str, Any]
) -> None:
    made = reservation_body(request(**fields), version)
    assert made is not None
    assert {k: made[k] for k in expected} == expected
    if not fields:
        assert made == expected


@pytest.mark.parametrize(("version", "expressible"), [("v0.0.43", False), ("v0.0.44", True)])
def test_a_flag_the_version_cannot_parse_leaves_the_request_to_scontrol(
    version: str, expressible: bool
) -> None:
    made = reservation_body(request(flags=frozenset({ReservationFlag.REPLACE_DOWN})), version)
    assert (made is not None) is expressible


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"name": "x;rm"}, "reservation name"),
        ({"nodes": ()}, "nodes"),
        ({"nodes": ("a b",)}, "nodes[0]"),
        ({"users": ("Root=x",)}, "users[0]"),
        ({"accounts": ("a,b",)}, "accounts[0]"),
        ({"duration": timedelta(0)}, "duration"),
        ({"start": datetime(2026, 1, 1)}, "start"),
        ({"partition": "gpu\nNodeName=x"}, "partition"),
    ],
)
def test_bad_values_are_refused_before_anything_is_sent(fields: dict[str, Any], where: str) -> None:
    with pytest.raises(InvalidValue) as raised:
        reservation_body(request(**fields), "v0.0.45")
    assert raised.value.where == where


@pytest.mark.parametrize(
    ("update", "expected"),
    [
        (ReservationUpdate(name="wl-1", nodes=("n2",)), {"name": "wl-1", "node_list": ["n2"]}),
        (
            ReservationUpdate(name="wl-1", users=("a", "b"), duration=timedelta(hours=1)),
            {"name": "wl-1", "users": ["a", "b"], "duration": HOUR},
        ),
        (
            ReservationUpdate(name="wl-1", start=datetime(2026, 12, 4, 8, 0, tzinfo=UTC)),
            {"name": "wl-1", "start_time": {"set": True, "infinite": False, "number": 1796371200}},
        ),
        # An empty list leaves users alone, as scontrol's update does.
        (
            ReservationUpdate(name="wl-1", users=(), accounts=("t",)),
            {"name": "wl-1", "accounts": ["t"]},
        ),
    ],
)
def test_an_update_sends_only_what_changes(
    update: ReservationUpdate, expected: dict[str, Any]
) -> None:
    assert reservation_update_body(update) == expected


def test_an_update_that_changes_nothing_is_refused() -> None:
    with pytest.raises(InvalidValue, match="at least one field"):
        reservation_update_body(ReservationUpdate(name="wl-1", users=()))


_names = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)


_requests = st.builds(
    request,
    nodes=st.lists(_names, min_size=1, max_size=4, unique=True).map(tuple),
    users=st.lists(_names, max_size=3, unique=True).map(tuple),
    accounts=st.lists(_names, max_size=3, unique=True).map(tuple),
    duration=st.none() | st.integers(1, 10_000).map(lambda m: timedelta(minutes=m)),
    flags=st.frozensets(st.sampled_from(list(ReservationFlag))),
)


@given(asked=_requests, version=st.sampled_from(WRITERS))
def test_rest_and_scontrol_reserve_the_same_nodes_for_the_same_people(
    asked: ReservationRequest, version: str
) -> None:
    argv = dict(a.split("=", 1) for a in arguments.create_reservation_argv(asked)[2:])
    made = reservation_body(asked, version)
    if made is None:
        assert version == "v0.0.43" and ReservationFlag.REPLACE_DOWN in asked.flags
        return
    assert argv["ReservationName"] == made["name"]
    assert argv["Nodes"].split(",") == made["node_list"]
    assert argv.get("Users", "").split(",") == made.get("users", [""])
    assert argv.get("Accounts", "").split(",") == made.get("accounts", [""])
    duration = made["duration"]
    assert argv["Duration"] == ("UNLIMITED" if duration["infinite"] else str(duration["number"]))
    renamed = {"NO_HOLD_JOBS_AFTER": "NO_HOLD_JOBS_AFTER_END", "STATIC_ALLOC": "STATIC"}
    scontrol_flags = argv["Flags"].split(",") if "Flags" in argv else []
    assert sorted(renamed.get(f, f) for f in scontrol_flags) == made.get("flags", [])
