"""The node health planner: verdicts, actions and their order, breaker, escalation, recovery."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkube.api import well_known as wk
from slurmkube.api.models import HealthSpec
from slurmkube.plan import health_rules as rules
from slurmkube.plan.health import plan_health
from slurmkube.plan.health_model import (
    ActionKind,
    CheckResult,
    HealthNode,
    HealthPlan,
    HealthSnapshot,
    NodeMemory,
    NodeTaint,
    SlurmHealthView,
)
from slurmkube.plan.health_rules import check_reservation, held_reason, sick_reason
from slurmkube.slurm.arguments import reason as adapter_reason
from slurmkube.slurm.arguments import reservation_name

XID = ("GpuXidError", "True")
NVLINK = ("NVLinkDown", "True")
ADMIN = "RMA bad GPU"
OURS = wk.TAINT_UNHEALTHY


def spec(**overrides: Any) -> HealthSpec:
    base: dict[str, Any] = {
        "rules": [
            {"condition": {"type": "GpuXidError"}, "severity": "fatal"},
            {"condition": {"type": "NVLinkDown"}, "severity": "drain"},
            {"condition": {"type": "GpuHealth", "status": "False"}, "severity": "drain"},
            {"taint": {"key": "nvidia.com/gpu-error", "value": "benign"}, "severity": "ignore"},
            {"taint": {"key": "nvidia.com/gpu-error"}, "severity": "drain"},
        ],
        "circuitBreaker": {"maxSickShare": 1},
    }
    return HealthSpec.model_validate(base | overrides)


@dataclass
class N:
    """Builder of one node's observations."""

    name: str
    conditions: list[tuple[str, str]] = field(default_factory=list)
    taints: list[NodeTaint] = field(default_factory=list)
    drain: str | None = None  # the drain reason, None: not drained
    busy: bool = False
    domain: str | None = None
    check: CheckResult = "none"
    slurm: bool = True
    lent: bool = False

    def sick(self, *conditions: tuple[str, str]) -> N:
        self.conditions += conditions
        return self

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> N:
        self.taints.append(NodeTaint(key, value, effect))
        return self

    def drained(self, reason: str) -> N:
        self.drain = reason
        return self

    def obj(self) -> HealthNode:
        view = SlurmHealthView(self.drain is not None, self.drain or "", self.busy)
        return HealthNode(
            self.name,
            self.domain,
            tuple(self.conditions),
            tuple(self.taints),
            view if self.slurm else None,
            self.check,
            self.lent,
        )


def plan(
    nodes: list[N], memory: Mapping[str, NodeMemory] | None = None, now: float = 1000.0, **kw: Any
) -> HealthPlan:
    return plan_health(HealthSnapshot(tuple(n.obj() for n in nodes), memory or {}, now), spec(**kw))


def kinds(p: HealthPlan, node: str) -> list[str]:
    return [str(a.kind) for v in p.verdicts if v.node == node for a in v.actions]


def verdict(p: HealthPlan, node: str) -> str:
    return next(v.verdict for v in p.verdicts if v.node == node)


SICK_SINCE = NodeMemory(sick_since=900.0, acted_at=900.0, failures=(900.0,))
CHECKING = replace(SICK_SINCE, check_started=990.0)
HEALTH_DRAIN = "slurmkube:health: drain condition NVLinkDown True"


@pytest.mark.parametrize(
    ("node", "memory", "want_verdict", "want_actions"),
    [
        pytest.param(N("g"), None, "healthy", [], id="no-signal-nothing-to-do"),
        pytest.param(
            N("g", busy=True).sick(XID),
            None,
            "sick",
            ["drain", "requeue", "taint"],
            id="fatal-drains-then-requeues-then-taints",
        ),
        pytest.param(
            N("g", busy=True).sick(NVLINK),
            None,
            "sick",
            ["drain", "taint"],
            id="drain-lets-jobs-finish",
        ),
        pytest.param(
            N("g").sick(("GpuHealth", "False")),
            None,
            "sick",
            ["drain", "taint"],
            id="a-health-condition-false-is-sick",
        ),
        pytest.param(
            N("g").sick(("GpuHealth", "True")), None, "healthy", [], id="gpu-health-true-is-fine"
        ),
        pytest.param(
            N("g").taint("nvidia.com/gpu-error", "benign"),
            None,
            "healthy",
            [],
            id="an-ignore-rule-first-exempts-one-taint-value",
        ),
        pytest.param(
            N("g").taint("nvidia.com/gpu-error", "xid-79"),
            None,
            "sick",
            ["drain", "taint"],
            id="other-values-of-that-taint-drain",
        ),
        pytest.param(
            N("g").taint(OURS),
            None,
            "healthy",
            ["untaint"],
            id="our-own-taint-is-no-signal",
        ),
        pytest.param(
            N("g", busy=True).sick(XID).drained(ADMIN),
            None,
            "sick",
            ["requeue", "taint"],
            id="an-admin-drain-is-kept-its-reason-never-overwritten",
        ),
        pytest.param(
            N("g", busy=True, slurm=False).sick(XID),
            None,
            "sick",
            ["taint"],
            id="without-slurm-only-the-taint",
        ),
        pytest.param(
            N("g").sick(NVLINK).drained(HEALTH_DRAIN).taint(OURS),
            SICK_SINCE,
            "sick",
            [],
            id="already-drained-and-tainted-nothing-again",
        ),
        pytest.param(
            N("g").drained(HEALTH_DRAIN).taint(OURS),
            SICK_SINCE,
            "checking",
            ["reserve", "resume", "run-check"],
            id="cleared-reserve-before-resume-then-check",
        ),
        pytest.param(
            N("g", check="running").taint(OURS),
            CHECKING,
            "checking",
            [],
            id="a-running-check-is-left-alone",
        ),
        pytest.param(
            N("g", check="passed").taint(OURS),
            CHECKING,
            "healthy",
            ["release", "untaint"],
            id="a-passed-check-returns-the-node",
        ),
        pytest.param(
            N("g", check="failed").taint(OURS),
            CHECKING,
            "held",
            ["drain", "release"],
            id="a-failed-check-is-the-second-failure-held",
        ),
        pytest.param(
            N("g", check="running").taint(OURS),
            replace(CHECKING, check_started=300.0),
            "held",
            ["drain", "release"],
            id="a-check-past-its-timeout-has-failed",
        ),
        pytest.param(
            N("g", check="running").sick(NVLINK).taint(OURS),
            CHECKING,
            "held",
            ["drain", "release"],
            id="the-fault-back-during-its-check-is-a-failure",
        ),
        pytest.param(
            N("g").drained(ADMIN).taint(OURS),
            SICK_SINCE,
            "healthy",
            ["untaint"],
            id="an-admin-who-drained-it-since-owns-it",
        ),
        pytest.param(
            N("g").drained(held_reason(2, 3600, ["condition NVLinkDown True"])).taint(OURS),
            None,
            "held",
            [],
            id="a-held-reason-holds-even-without-memory",
        ),
        pytest.param(
            N("g").drained("slurmkube: slurmd pod removal"),
            None,
            "healthy",
            [],
            id="another-slurmkube-drain-is-not-healths",
        ),
    ],
)
def test_each_node_gets_its_verdict_and_actions_in_order(
    node: N, memory: NodeMemory | None, want_verdict: str, want_actions: list[str]
) -> None:
    p = plan([node], {node.name: memory} if memory else None)
    assert (verdict(p, node.name), kinds(p, node.name)) == (want_verdict, want_actions)


def test_the_drain_reason_is_owned_names_the_cause_and_passes_the_adapter_guard() -> None:
    p = plan([N("g", busy=True).sick(XID).taint("nvidia.com/gpu-error", "xid-79")])
    drain = p.verdicts[0].actions[0]
    assert drain.reason == (
        "slurmkube:health: fatal condition GpuXidError True, taint nvidia.com/gpu-error"
    )
    assert wk.is_ours(drain.reason) and wk.is_health_drain(drain.reason)
    assert adapter_reason(drain.reason) == drain.reason


def test_without_active_check_a_cleared_node_resumes_at_once() -> None:
    p = plan(
        [N("g").drained(HEALTH_DRAIN).taint(OURS)],
        {"g": SICK_SINCE},
        recovery={"activeCheck": False},
    )
    assert (verdict(p, "g"), kinds(p, "g")) == ("healthy", ["resume", "untaint"])


def test_our_drain_found_without_memory_is_checked_before_it_counts_as_healthy() -> None:
    first = plan([N("g").drained(HEALTH_DRAIN).taint(OURS)])
    assert (verdict(first, "g"), kinds(first, "g")) == (
        "checking",
        ["reserve", "resume", "run-check"],
    )
    # Resumed for its check, the check runs: still checking, the reservation stays.
    second = plan([N("g", check="running").taint(OURS)], first.memory, now=1060.0)
    assert (verdict(second, "g"), kinds(second, "g")) == ("checking", [])


def test_a_node_slurm_does_not_know_loses_its_taint_once_its_signals_clear() -> None:
    p = plan([N("g", slurm=False).taint(OURS)], {"g": SICK_SINCE})
    assert (verdict(p, "g"), kinds(p, "g")) == ("healthy", ["untaint"])


def test_a_healthy_fleet_leaves_no_memory() -> None:
    assert plan([N(f"g-{i}") for i in range(5)]).memory == {}


def test_a_failed_check_below_the_hold_drains_and_waits_its_interval() -> None:
    kw: dict[str, Any] = {"recovery": {"failuresBeforeHold": 3, "checkIntervalSeconds": 300}}
    failed = plan([N("g", check="failed").taint(OURS)], {"g": CHECKING}, **kw)
    assert (verdict(failed, "g"), kinds(failed, "g")) == ("sick", ["drain", "release"])
    memory = failed.memory
    soon = plan([N("g").drained(failed.verdicts[0].actions[0].reason)], memory, 1100.0, **kw)
    assert (verdict(soon, "g"), kinds(soon, "g")) == ("sick", ["taint"])
    later = plan([N("g").drained(failed.verdicts[0].actions[0].reason)], memory, 1400.0, **kw)
    assert verdict(later, "g") == "checking"


def test_a_node_sick_twice_in_the_window_is_held_until_an_admin_resumes_it() -> None:
    first = plan([N("g").sick(NVLINK)], now=100.0)
    memory = replace(first.memory["g"], sick_since=None)  # it recovered in between
    again = plan([N("g").sick(NVLINK)], {"g": memory}, now=200.0)
    assert verdict(again, "g") == "held"
    held = again.verdicts[0].actions[0].reason
    assert held.startswith("slurmkube:health: held after 2 failures")
    # Signals clear: still held, no resume.
    quiet = plan([N("g").drained(held).taint(OURS)], dict(again.memory), now=300.0)
    assert (verdict(quiet, "g"), kinds(quiet, "g")) == ("held", [])
    # An admin resumes it (`scontrol update State=RESUME`): a fresh start.
    resumed = plan([N("g").taint(OURS)], dict(quiet.memory), now=400.0)
    assert (verdict(resumed, "g"), kinds(resumed, "g")) == ("healthy", ["untaint"])
    assert resumed.memory["g"].failures == ()


LEASE_DRAIN = "slurmkube: slurmd pod removal"


@pytest.mark.parametrize("severity,signal", [("fatal", XID), ("drain", NVLINK)])
def test_a_lent_node_turning_sick_gets_healths_reason_over_its_leases_drain(
    severity: str, signal: tuple[str, str]
) -> None:
    p = plan([N("g1", lent=True).sick(signal).drained(LEASE_DRAIN)])
    assert kinds(p, "g1") == ["drain", "taint"]  # nothing runs in Slurm there to requeue
    assert p.actions[0].reason.startswith(f"slurmkube:health: {severity} condition")


def test_another_slurmkube_drain_on_a_node_not_lent_stays_its_owners() -> None:
    p = plan([N("g1").sick(NVLINK).drained(LEASE_DRAIN)])
    assert kinds(p, "g1") == ["taint"]


def test_an_admins_drain_on_a_lent_node_is_never_reworded() -> None:
    p = plan([N("g1", lent=True).sick(NVLINK).drained(ADMIN)])
    assert kinds(p, "g1") == ["taint"]


def test_a_lent_node_that_clears_stays_out_until_its_lease_ends_then_is_checked() -> None:
    reason = sick_reason("drain", ["condition NVLinkDown True"])
    memory = {"g1": NodeMemory(sick_since=900.0, acted_at=900.0, failures=(900.0,))}
    lent = plan([N("g1", lent=True).drained(reason).taint(OURS)], memory)
    assert verdict(lent, "g1") == "sick" and kinds(lent, "g1") == []
    returned = plan([N("g1").drained(reason).taint(OURS)], dict(lent.memory))
    assert verdict(returned, "g1") == "checking"
    assert kinds(returned, "g1") == ["reserve", "resume", "run-check"]


def test_a_clock_that_starts_at_zero_is_still_a_clock() -> None:
    first = plan([N("g").sick(NVLINK)], now=0.0)
    again = plan(
        [N("g").sick(NVLINK).drained(first.verdicts[0].actions[0].reason)], first.memory, 60.0
    )
    assert (again.memory["g"].sick_since, again.memory["g"].failures) == (0.0, (0.0,))
    assert verdict(again, "g") == "sick"


def test_failures_outside_the_window_do_not_count() -> None:
    old = NodeMemory(failures=(100.0,))
    p = plan([N("g").sick(NVLINK)], {"g": old}, now=100.0 + 3600 + 1)
    assert verdict(p, "g") == "sick"


def test_the_circuit_breaker_acts_on_at_most_the_share_and_the_rest_wait() -> None:
    nodes = [N(f"g-{i}").sick(NVLINK) if i < 5 else N(f"g-{i}") for i in range(10)]
    p = plan(nodes, circuitBreaker={"maxSickShare": 0.3, "windowSeconds": 300})
    acted = [v.node for v in p.verdicts if v.actions]
    assert acted == ["g-0", "g-1", "g-2"]
    assert p.circuit.open and p.circuit.waiting == ("g-3", "g-4")
    assert all(v.verdict == "sick" for v in p.verdicts if v.waiting)
    # Within the window, the acted-on nodes still count: still only those three.
    fleet = {n.name: n for n in nodes}
    _apply(fleet, p)
    later = plan(nodes, dict(p.memory), now=1100.0, circuitBreaker={"maxSickShare": 0.3})
    assert later.circuit.waiting == ("g-3", "g-4")
    assert [v.node for v in later.verdicts if v.actions] == []
    # Past the window, the waiting nodes get their turn.
    past = plan(nodes, dict(later.memory), now=1400.0, circuitBreaker={"maxSickShare": 0.3})
    assert [v.node for v in past.verdicts if v.actions] == ["g-3", "g-4"]
    assert not past.circuit.open


def test_nodes_already_taken_out_keep_their_actions_when_the_breaker_opens() -> None:
    nodes = [N("g-0", busy=True).sick(XID).drained("slurmkube:health: drain x"), N("g-1")]
    nodes.append(N("g-2").sick(XID))
    memory = {"g-0": SICK_SINCE}
    p = plan(nodes, memory, circuitBreaker={"maxSickShare": 0.34})
    assert kinds(p, "g-0") == ["drain", "requeue", "taint"]  # same episode: not new
    assert p.circuit.waiting == ("g-2",)


def test_a_domain_with_half_its_nodes_out_is_escalated_and_its_healthy_nodes_stay() -> None:
    rack = [N(f"a-{i}", domain="rack-a") for i in range(4)]
    rack[0].sick(NVLINK)
    rack[1].sick(XID)
    other = [N(f"b-{i}", domain="rack-b") for i in range(4)]
    other[0].sick(NVLINK)
    p = plan(rack + other)
    assert [(e.domain, e.out) for e in p.escalations] == [("rack-a", 2)]
    assert p.escalations[0].reason == "slurmkube:health: rack rack-a: 2 of 4 nodes out"
    assert verdict(p, "a-2") == "healthy" and kinds(p, "a-2") == []


def test_a_check_reservation_is_a_valid_slurm_name_even_for_long_node_names() -> None:
    long_name = "n" * 30 + "." + "m" * 32
    for node in ("g-1", long_name, long_name.replace("m", "x")):
        name = check_reservation(node)
        assert len(name) <= 63 and reservation_name(name) == name
    assert check_reservation(long_name) != check_reservation(long_name.replace("m", "x"))


# --- properties ---------------------------------------------------------------------

REASONS = [None, ADMIN, "slurmkube: slurmd pod removal", HEALTH_DRAIN, "HELD"]
SIGNALS = st.lists(st.sampled_from([XID, NVLINK, ("GpuHealth", "False"), ("Ready", "True")]))


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[N], dict[str, NodeMemory]]:
    count = draw(st.integers(1, 12))
    nodes, memory = [], {}
    for i in range(count):
        reason = draw(st.sampled_from(REASONS))
        if reason == "HELD":
            reason = held_reason(2, 3600, ["condition NVLinkDown True"])
        node = N(
            f"g-{i}",
            conditions=draw(SIGNALS),
            drain=reason,
            busy=draw(st.booleans()),
            domain=draw(st.sampled_from([None, "r1", "r2"])),
            check=draw(st.sampled_from(["none", "running", "passed", "failed"])),
            lent=draw(st.booleans()),
        )
        if draw(st.booleans()):
            node.taint(OURS)
        nodes.append(node)
        memory[node.name] = NodeMemory(
            sick_since=draw(st.sampled_from([None, 500.0, 990.0])),
            acted_at=draw(st.sampled_from([None, 500.0, 990.0])),
            failures=tuple(draw(st.lists(st.sampled_from([500.0, 900.0]), max_size=2))),
            check_started=draw(st.sampled_from([None, 100.0, 990.0])),
            held=draw(st.booleans()),
            held_seen=draw(st.booleans()),
        )
    return nodes, memory


@settings(max_examples=300, deadline=None)
@given(fleets(), st.sampled_from([0.0, 0.2, 0.5, 1.0]))
def test_health_never_resumes_a_drain_that_is_not_its_own_nor_a_hold(
    fleet: tuple[list[N], dict[str, NodeMemory]], share: float
) -> None:
    nodes, memory = fleet
    p = plan(nodes, memory, circuitBreaker={"maxSickShare": share})
    by_name = {n.name: n for n in nodes}
    for action in p.actions:
        if action.kind == ActionKind.RESUME:
            reason = by_name[action.node].drain or ""
            assert wk.is_health_drain(reason)
            assert not reason.startswith("slurmkube:health: held")
        if action.reason:
            assert adapter_reason(action.reason) == action.reason


@settings(max_examples=300, deadline=None)
@given(fleets(), st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.75]))
def test_the_circuit_breaker_never_begins_acting_on_more_than_the_share(
    fleet: tuple[list[N], dict[str, NodeMemory]], share: float
) -> None:
    nodes, memory = fleet
    p = plan(nodes, memory, circuitBreaker={"maxSickShare": share, "windowSeconds": 300})
    allowed = int(share * len(nodes) + 1e-9)

    def in_window(m: dict[str, NodeMemory]) -> set[str]:
        return {n for n, x in m.items() if x.acted_at is not None and x.acted_at > 700.0}

    before = in_window(memory)
    # A node counts once per window: acting on it again takes no new share.
    assert len(in_window(dict(p.memory)) - before) <= max(0, allowed - len(before))


def _apply(nodes: dict[str, N], p: HealthPlan) -> None:
    """What a controller would do to Slurm and the Node for each action."""
    for a in p.actions:
        node = nodes[a.node]
        if a.kind == ActionKind.DRAIN:
            node.drain = a.reason
        elif a.kind == ActionKind.RESUME:
            node.drain = None
        elif a.kind == ActionKind.TAINT:
            node.taint(OURS)
        elif a.kind == ActionKind.UNTAINT:
            node.taints = [t for t in node.taints if t.key != OURS]
        elif a.kind == ActionKind.RUN_CHECK:
            node.check = "running"


EVENTS = st.sampled_from(["sick", "fatal", "clear", "pass", "fail", "admin-drain", "wait"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), EVENTS), min_size=1, max_size=25))
def test_a_held_node_never_resumes_and_an_admin_drain_is_never_touched(
    events: list[tuple[int, str]],
) -> None:
    nodes = {f"g-{i}": N(f"g-{i}") for i in range(3)}
    memory: dict[str, NodeMemory] = {}
    admin: set[str] = set()
    now = 0.0
    for index, event in events:
        node = nodes[f"g-{index}"]
        if event in ("sick", "fatal"):
            node.conditions = [NVLINK if event == "sick" else XID]
        elif event == "clear":
            node.conditions = []
        elif event in ("pass", "fail") and node.check == "running":
            node.check = "passed" if event == "pass" else "failed"
        elif event == "admin-drain":
            node.drain = ADMIN
            admin.add(node.name)
        now += 60.0
        # Held: our hold's drain is in Slurm (an admin's drain over it ends the hold).
        held_before = {n for n, x in nodes.items() if rules.is_held_reason(x.drain or "")}
        p = plan_health(HealthSnapshot(tuple(n.obj() for n in nodes.values()), memory, now), spec())
        for a in p.actions:
            assert not (a.kind == ActionKind.RESUME and a.node in held_before)
            assert not (a.node in admin and a.kind in (ActionKind.DRAIN, ActionKind.RESUME))
        _apply(nodes, p)
        memory = dict(p.memory)
        for n in nodes.values():
            if (
                n.check in ("passed", "failed")
                and memory.get(n.name, NodeMemory()).check_started is None
            ):
                n.check = "none"
