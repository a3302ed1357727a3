"""What the health controller keeps, shows and writes around the planner: the record
codec, check results, the taint edit, status, condition, events, check outcomes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkube.api import well_known as wk
from slurmkube.plan.health_model import ActionKind, HealthSnapshot, NodeMemory
from slurmkube.plan.health_state import (
    CIRCUIT_CONDITION,
    HealthRecord,
    check_outcomes,
    check_result,
    circuit_condition,
    health_events,
    health_status,
    next_checks,
    node_set_health,
    node_set_health_empty,
    parse_record,
    record_text,
    with_health_taint,
)
from tests.unit.test_health_plan import CHECKING, NVLINK, XID, N, plan

times = st.one_of(st.none(), st.floats(0, 2e9, allow_nan=False))
memories = st.builds(
    NodeMemory,
    sick_since=times,
    acted_at=times,
    failures=st.lists(st.floats(0, 2e9, allow_nan=False), max_size=4).map(tuple),
    check_started=times,
    check_failed_at=times,
    held=st.booleans(),
    held_seen=st.booleans(),
)
node_names = st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True)


@given(
    st.dictionaries(node_names, memories, max_size=5),
    st.dictionaries(node_names, st.integers(1, 2**31)),
)
def test_record_survives_its_annotation_text(memory: dict[str, NodeMemory], checks: Any) -> None:
    record = HealthRecord(memory, checks)
    again = parse_record(record_text(record))
    assert dict(again.memory) == memory
    assert dict(again.checks) == checks
    assert record_text(again) == record_text(record)


@pytest.mark.parametrize(
    "text",
    [None, "", "not json", "[]", '{"nodes": 3}', '{"nodes": {"a": "x"}, "checks": {"a": "1"}}'],
)
def test_an_unreadable_record_is_an_empty_one(text: str | None) -> None:
    record = parse_record(text)
    assert record.memory == {}
    assert record.checks == {}


def test_fields_of_the_wrong_type_read_as_unset() -> None:
    text = '{"nodes": {"a": {"sickSince": "x", "failures": [1, "y", true], "held": 1}}}'
    assert parse_record(text).memory == {"a": NodeMemory(failures=(1.0,))}


@pytest.mark.parametrize(
    ("states", "want"),
    [
        (None, "none"),
        (frozenset({"PENDING"}), "running"),
        (frozenset({"RUNNING"}), "running"),
        (frozenset({"RUNNING", "COMPLETING"}), "running"),
        (frozenset({"COMPLETED"}), "passed"),
        (frozenset({"FAILED"}), "failed"),
        (frozenset({"TIMEOUT"}), "failed"),
        (frozenset({"CANCELLED"}), "failed"),
        (frozenset({"NODE_FAIL"}), "failed"),
    ],
)
def test_check_result_follows_the_job_state(states: frozenset[str] | None, want: str) -> None:
    assert check_result(states) == want


def test_a_node_keeps_its_check_job_only_while_checking() -> None:
    p = plan([N("a"), N("b").drained("slurmkube:health: drain x")], {"b": CHECKING})
    # a: healthy (no check), b: checking (its check started at 990).
    assert next_checks({"a": 1, "b": 2}, p, {}) == {"b": 2}
    assert next_checks({"b": 2}, p, {"b": 7}) == {"b": 7}
    assert next_checks({}, p, {"a": 9}) == {}


OTHER = {"key": "nvidia.com/gpu-error", "value": "xid", "effect": "NoExecute"}
ADMIN = {"key": "example.com/maintenance", "effect": "NoSchedule"}
OURS = {"key": wk.TAINT_UNHEALTHY, "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("taints", "tainted", "want"),
    [
        ([], True, [OURS]),
        ([OTHER, ADMIN], True, [OTHER, ADMIN, OURS]),
        ([OTHER, OURS, ADMIN], True, [OTHER, ADMIN, OURS]),
        ([OTHER, OURS, ADMIN], False, [OTHER, ADMIN]),
        ([OTHER], False, [OTHER]),
        ([{"key": wk.TAINT_UNHEALTHY, "effect": "NoExecute"}], False, []),
    ],
)
def test_health_taint_edit_never_touches_another_taint(
    taints: list[dict[str, str]], tainted: bool, want: list[dict[str, str]]
) -> None:
    assert with_health_taint(taints, tainted) == want


@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "key": st.sampled_from(["a", "b/c", wk.TAINT_UNHEALTHY]),
                "effect": st.sampled_from(["NoSchedule", "NoExecute"]),
            }
        ),
        max_size=6,
    ),
    st.booleans(),
)
def test_health_taint_is_there_once_or_not_and_others_keep_their_order(
    taints: list[dict[str, str]], tainted: bool
) -> None:
    out = with_health_taint(taints, tainted)
    ours = [t for t in out if t["key"] == wk.TAINT_UNHEALTHY]
    assert len(ours) == int(tainted)
    others = [t for t in taints if t["key"] != wk.TAINT_UNHEALTHY]
    assert [t for t in out if t["key"] != wk.TAINT_UNHEALTHY] == others


def test_status_counts_verdicts_and_healthy_gpus() -> None:
    p = plan(
        [N("a"), N("b").sick(XID), N("c").drained("slurmkube:health: drain x")], {"c": CHECKING}
    )
    status = health_status(p, {"a": 4, "b": 4, "c": 4})
    assert (status["sick"], status["checking"], status["held"], status["waiting"]) == (1, 1, 0, 0)
    assert status["healthyGpus"] == 4
    assert [n["name"] for n in status["nodes"]] == ["b", "c"]
    assert status["nodes"][0]["causes"] == ["condition GpuXidError True"]


def test_each_node_set_shows_its_own_nodes_health() -> None:
    p = plan(
        [N("a"), N("b").sick(XID), N("c").drained("slurmkube:health: drain x"), N("d")],
        {"c": CHECKING},
    )
    gpus = {"a": 4, "b": 4, "c": 4, "d": 8}
    found = node_set_health(p, gpus, {"a": "gpu", "b": "gpu", "c": "big", "d": "big"})
    assert found["gpu"]["sick"] == 1 and found["gpu"]["healthyGpus"] == 4
    assert [n["name"] for n in found["gpu"]["nodes"]] == ["b"]
    assert (found["big"]["checking"], found["big"]["healthyGpus"]) == (1, 8)
    assert node_set_health(p, gpus, {}) == {}
    assert node_set_health_empty()["nodes"] == []
    # The NodeSets' figures add up to the cluster's.
    cluster = health_status(p, gpus)
    assert sum(s["healthyGpus"] for s in found.values()) == cluster["healthyGpus"]


def test_breaker_waiting_nodes_show_as_waiting_and_open_the_condition() -> None:
    p = plan([N("a").sick(XID), N("b").sick(NVLINK), N("c")], circuitBreaker={"maxSickShare": 0.34})
    status = health_status(p, {})
    assert status["waiting"] == 1
    assert status["circuit"]["open"] is True
    condition = circuit_condition(p, 3, "2026-01-01T00:00:00Z")
    assert (condition["type"], condition["status"], condition["reason"]) == (
        CIRCUIT_CONDITION,
        "True",
        "TooManySick",
    )
    closed = circuit_condition(plan([N("a")]), 3, "2026-01-01T00:00:00Z")
    assert (closed["status"], closed["reason"]) == ("False", "Closed")


def test_events_aggregate_one_per_action_and_the_breaker_only_when_it_opens() -> None:
    p = plan([N("a").sick(XID), N("b").sick(NVLINK), N("c")], circuitBreaker={"maxSickShare": 0.34})
    done = [(ActionKind.DRAIN, "a"), (ActionKind.DRAIN, "x"), (ActionKind.TAINT, "a")]
    events = health_events(p, done, circuit_opened=False)
    assert [(e.reason, e.message) for e in events] == [
        ("HealthDrained", "drained in Slurm 2 nodes: a, x")
    ]
    opened = health_events(p, done, circuit_opened=True)
    assert opened[-1].reason == CIRCUIT_CONDITION and opened[-1].warning


@pytest.mark.parametrize(
    ("check", "now", "want"),
    [
        ("passed", 1000.0, {"passed": 1, "failed": 0}),
        ("failed", 1000.0, {"passed": 0, "failed": 1}),
        ("running", 1000.0, {"passed": 0, "failed": 0}),
        ("running", 990.0 + 601, {"passed": 0, "failed": 1}),  # timed out
    ],
)
def test_check_outcomes_count_checks_that_ended(check: Any, now: float, want: Any) -> None:
    node = N("c", check=check).drained("slurmkube:health: drain x")
    memory = {"c": replace(CHECKING, failures=())}
    p = plan([node], memory, now=now)
    snap = HealthSnapshot((node.obj(),), memory, now)
    assert check_outcomes(snap, p) == want
