"""What the adapter sends to scontrol: validated values, exact argv, no injection."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkube.api.grammar import InvalidValue
from slurmkube.api.well_known import DRAIN_REASON_PREFIX
from slurmkube.slurm import arguments
from slurmkube.slurm.models import (
    NodeStateChange,
    ReservationFlag,
    ReservationRequest,
    ReservationUpdate,
)


@pytest.mark.parametrize(
    "bad",
    [
        "x State=RESUME",
        'x" State=RESUME',
        "x'",
        "x\nState=RESUME",
        "x\tdrain",
        "back\\slash",
        "",
        " leading",
        "trailing ",
        "-starts-with-dash",
        "x" * 201,
        "é",
    ],
)
def test_reasons_that_could_carry_another_keyword_are_refused(bad: str) -> None:
    with pytest.raises(InvalidValue):
        arguments.reason(bad)
    with pytest.raises(InvalidValue):
        arguments.node_state_argv("gb200-001", NodeStateChange.DRAIN, bad)


@given(st.text(max_size=80))
def test_a_node_update_argv_never_holds_more_than_one_keyword_per_element(text: str) -> None:
    try:
        argv = arguments.node_state_argv("gb200-001", NodeStateChange.DRAIN, text)
    except InvalidValue:
        return
    assert all(arg.count("=") == 1 for arg in argv[1:])
    assert not any(c in arg for arg in argv for c in "\n\r\t\"'\\")


def test_drain_reason_adds_our_prefix_once() -> None:
    assert arguments.drain_reason("lent to w-1") == f"{DRAIN_REASON_PREFIX} lent to w-1"
    assert arguments.drain_reason(f"{DRAIN_REASON_PREFIX} x") == f"{DRAIN_REASON_PREFIX} x"
    assert arguments.is_ours(arguments.drain_reason("x"))
    assert not arguments.is_ours("admin: bad gpu")
    assert not arguments.is_ours(f"admin says {DRAIN_REASON_PREFIX}")


def test_node_state_argv() -> None:
    assert arguments.node_state_argv("gb200-001", NodeStateChange.DRAIN, "slurmkube: x") == [
        "update",
        "NodeName=gb200-001",
        "State=DRAIN",
        "Reason=slurmkube: x",
    ]
    assert arguments.node_state_argv("gb200-001", NodeStateChange.UNDRAIN, None) == [
        "update",
        "NodeName=gb200-001",
        "State=UNDRAIN",
    ]
    with pytest.raises(InvalidValue, match="reason"):
        arguments.node_state_argv("gb200-001", NodeStateChange.DOWN, None)
    with pytest.raises(InvalidValue):
        arguments.node_state_argv("gb200-001 State=RESUME", NodeStateChange.RESUME, None)


def test_create_reservation_argv_is_exact_and_in_utc() -> None:
    request = ReservationRequest(
        name="slurmkube-3f2a",
        nodes=("gb200-003", "gb200-004"),
        users=("root", "alice"),
        accounts=("ml",),
        start=datetime(2030, 1, 1, 2, 0, tzinfo=timezone(timedelta(hours=2))),
        duration=timedelta(minutes=90, seconds=1),
        flags=frozenset({ReservationFlag.MAINT, ReservationFlag.IGNORE_JOBS}),
        partition="gb200",
    )
    assert arguments.create_reservation_argv(request) == [
        "create",
        "reservation",
        "ReservationName=slurmkube-3f2a",
        "Nodes=gb200-003,gb200-004",
        "StartTime=2030-01-01T00:00:00",
        "Duration=91",
        "Users=root,alice",
        "Accounts=ml",
        "Flags=IGNORE_JOBS,MAINT",
        "PartitionName=gb200",
    ]


def test_reservation_defaults_are_now_and_unlimited() -> None:
    argv = arguments.create_reservation_argv(
        ReservationRequest(name="r", nodes=("n1",), users=("root",))
    )
    assert "StartTime=now" in argv and "Duration=UNLIMITED" in argv


@pytest.mark.parametrize(
    "request_",
    [
        ReservationRequest(name="a b", nodes=("n1",), users=("root",)),
        ReservationRequest(name="x=Flags=MAINT", nodes=("n1",), users=("root",)),
        ReservationRequest(name="r", nodes=(), users=("root",)),
        ReservationRequest(name="r", nodes=("n1,n2",), users=("root",)),
        ReservationRequest(name="r", nodes=("n1",), users=("root Flags=MAINT",)),
        ReservationRequest(name="r", nodes=("n1",), accounts=("ML,ops",)),
        ReservationRequest(name="r", nodes=("n1",), users=("root",), partition="DEFAULT"),
        ReservationRequest(name="r", nodes=("n1",), users=("root",), start=datetime(2030, 1, 1)),
        ReservationRequest(name="r", nodes=("n1",), users=("root",), duration=timedelta(0)),
    ],
)
def test_bad_reservation_requests_never_reach_scontrol(request_: ReservationRequest) -> None:
    with pytest.raises(InvalidValue):
        arguments.create_reservation_argv(request_)


def test_update_reservation_argv() -> None:
    update = ReservationUpdate(name="r", nodes=("n1", "n2"), duration=timedelta(hours=1))
    assert arguments.update_reservation_argv(update) == [
        "update",
        "ReservationName=r",
        "Nodes=n1,n2",
        "Duration=60",
    ]
    with pytest.raises(InvalidValue, match="at least one field"):
        arguments.update_reservation_argv(ReservationUpdate(name="r"))
    assert arguments.delete_reservation_argv("r") == ["delete", "ReservationName=r"]


@pytest.mark.parametrize("bad", [0, -1, 0xFFFFFFFE, True, "12", 1.0])
def test_requeue_argv_takes_only_a_real_job_id(bad: object) -> None:
    assert arguments.requeue_job_argv(12) == ["requeue", "12"]
    with pytest.raises(InvalidValue, match="job id"):
        arguments.requeue_job_argv(bad)  # type: ignore[arg-type]


def test_features_argv() -> None:
    assert arguments.update_features_argv("n1", ["a", "b"], None) == [
        "update",
        "NodeName=n1",
        "AvailableFeatures=a,b",
        "ActiveFeatures=a,b",
    ]
    assert arguments.update_features_argv("n1", [], None)[2:] == [
        "AvailableFeatures=",
        "ActiveFeatures=",
    ]
    assert arguments.update_features_argv("n1", ["x", "y"], ["x"])[-1] == "ActiveFeatures=x"
    with pytest.raises(InvalidValue):
        arguments.update_features_argv("n1", ["a|b"], None)


def test_slurm_start_is_utc() -> None:
    assert arguments.slurm_start(datetime(2030, 6, 1, 12, tzinfo=UTC)) == "2030-06-01T12:00:00"
