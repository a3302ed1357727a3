"""A lent node that turns sick (issue 21): its workload is told why, a fatal fault
evicts it through Retry, and the node is never lent while sick (lending.sick)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkube.api import well_known as wk
from slurmkube.build.slurmd import slurmd_pod
from slurmkube.lending import (
    CheckState,
    NodeView,
    Sickness,
    SlurmState,
    placement_state,
    plan_lending,
    reservation_name,
    sickness_of,
)
from slurmkube.placement import NodeState
from slurmkube.plan.health_rules import held_reason, sick_reason
from slurmkube_local.builders import bundle
from tests.unit.test_lending import WorkloadBuilder, fleet, leased, only_check, reservation, world

DRAIN = sick_reason("drain", ["condition GpuNvlinkWatch True"])
FATAL = sick_reason("fatal", ["condition SysLogsXIDError True"])
LEASE_DRAIN = "slurmkube: slurmd pod removal"


def sick(nodes: tuple[NodeView, ...], reason: str, *names: str) -> tuple[NodeView, ...]:
    """Health took `names` out: drained with `reason` and tainted."""
    sickness = sickness_of(drain=True, reason=reason, tainted=True)
    return tuple(replace(n, sickness=sickness) if n.name in names else n for n in nodes)


def running(*sick_nodes: str, reason: str = DRAIN) -> tuple[NodeView, ...]:
    """Two nodes lent to a Ready workload uid-1; `sick_nodes` of them taken out."""
    nodes = leased(fleet("II", "II"), "uid-1", "b0-n0", "b0-n1", slurmd=False)
    return sick(nodes, reason, *sick_nodes)


READY = WorkloadBuilder(state=CheckState.READY).obj()
HELD = reservation("uid-1", "b0-n0", "b0-n1")


# --- reading health's verdict back -------------------------------------------------------


@dataclass(frozen=True)
class Reading:
    drain: bool
    reason: str
    tainted: bool
    sickness: Sickness | None


READINGS = {
    "a drain-severity health drain": Reading(
        True, DRAIN, True, Sickness("drain condition GpuNvlinkWatch True", fatal=False)
    ),
    "a fatal health drain": Reading(
        True, FATAL, True, Sickness("fatal condition SysLogsXIDError True", fatal=True)
    ),
    "a hold is not fatal": Reading(
        True,
        held_reason(2, 3600, ["condition SysLogsXIDError True"]),
        True,
        Sickness(
            "held after 2 failures in 3600s, resume by hand: condition SysLogsXIDError True",
            fatal=False,
        ),
    ),
    "health's taint before its drain shows": Reading(
        True, LEASE_DRAIN, True, Sickness(f"tainted {wk.TAINT_UNHEALTHY}", fatal=False)
    ),
    "the lease's own drain": Reading(True, LEASE_DRAIN, False, None),
    "an admin's drain": Reading(True, "RMA bad GPU", False, None),
    "a resumed node with a stale reason": Reading(False, FATAL, False, None),
}


@pytest.mark.parametrize("case", READINGS.values(), ids=READINGS.keys())
def test_sickness_is_read_from_healths_drain_reason_and_taint(case: Reading) -> None:
    got = sickness_of(drain=case.drain, reason=case.reason, tainted=case.tainted)
    assert got == case.sickness


@pytest.mark.parametrize("severity", ["drain", "fatal"])
def test_only_a_fatal_rules_reason_reads_as_fatal(severity: str) -> None:
    reason = sick_reason(severity, ["taint nvidia.com/gpu-error"])
    assert wk.is_fatal_health_drain(reason) is (severity == "fatal")


# --- the workload holding the node -------------------------------------------------------


def test_a_drain_severity_fault_keeps_the_workload_ready_and_tells_it_why() -> None:
    healthy = plan_lending(world(running(), READY, reservations=(HELD,)))
    assert healthy.lends == () and healthy.releases == ()

    plan = plan_lending(world(running("b0-n1"), READY, reservations=(HELD,)))
    assert plan.releases == ()
    (lend,) = plan.lends
    assert lend.check is not None and lend.check.state is CheckState.READY
    assert "b0-n1 (drain condition GpuNvlinkWatch True)" in lend.check.message
    assert "runs on" in lend.check.message and lend.sick in lend.check.message
    # Kueue refuses changed podSetUpdates on an admitted workload: the same as at Ready.
    selector = {"name": "main", "nodeSelector": {wk.LABEL_LEASE: "uid-1"}}
    assert [dict(u) for u in lend.check.pod_set_updates] == [selector]
    assert lend.create is None and lend.label == ()
    assert plan.lent_nodes == 2


def test_a_fatal_fault_answers_retry_and_returns_every_lent_node() -> None:
    plan = plan_lending(world(running("b0-n0", reason=FATAL), READY, reservations=(HELD,)))
    state, message = only_check(plan)
    assert state is CheckState.RETRY
    assert "b0-n0 (fatal condition SysLogsXIDError True)" in message
    assert "evicted and requeued" in message
    (release,) = plan.releases
    assert release.unlabel == ("b0-n0", "b0-n1")
    assert release.delete_reservation == reservation_name("uid-1")
    assert release.check is not None and release.check.requeue_after_seconds == 30
    assert plan.lends == () and plan.lent_nodes == 0


def test_a_fatal_fault_wins_over_a_drain_fault_on_another_lent_node() -> None:
    nodes = sick(running("b0-n0"), FATAL, "b0-n1")
    state, message = only_check(plan_lending(world(nodes, READY, reservations=(HELD,))))
    assert state is CheckState.RETRY
    assert "b0-n0 (drain" in message and "b0-n1 (fatal" in message


def test_a_sick_node_under_a_vanished_reservation_gets_it_back_and_is_still_told() -> None:
    (lend,) = plan_lending(world(running("b0-n1"), READY)).lends
    assert lend.create is not None and lend.create.nodes == ("b0-n0", "b0-n1")
    assert lend.check is not None and "b0-n1" in lend.check.message


def test_the_workload_ending_returns_the_sick_node_like_any_other() -> None:
    done = WorkloadBuilder(state=CheckState.READY, conditions={"finished": True}).obj()
    (release,) = plan_lending(world(running("b0-n1"), done, reservations=(HELD,))).releases
    assert release.unlabel == ("b0-n0", "b0-n1")
    assert release.delete_reservation == reservation_name("uid-1")


def test_a_reserved_node_that_turns_sick_before_ready_answers_retry() -> None:
    nodes = sick(fleet("II", "II"), DRAIN, "b0-n1")
    pending = WorkloadBuilder().obj()
    plan = plan_lending(world(nodes, pending, reservations=(HELD,)))
    state, message = only_check(plan)
    assert state is CheckState.RETRY and "reserved node turned sick: b0-n1" in message
    assert [r.delete_reservation for r in plan.releases] == [reservation_name("uid-1")]


# --- never lent while sick ---------------------------------------------------------------


def test_the_returned_sick_node_is_not_lent_to_the_next_workload() -> None:
    # After the lease: the sick node is back in Slurm, drained by health.
    nodes = sick(fleet("II", "II"), FATAL, "b0-n1")
    nodes = tuple(replace(n, slurm=SlurmState.DOWN) if n.name == "b0-n1" else n for n in nodes)
    (lend,) = plan_lending(world(nodes, WorkloadBuilder(uid="uid-2").obj())).lends
    assert lend.create is not None and "b0-n1" not in lend.create.nodes


def test_a_sick_node_is_unavailable_even_where_slurm_still_reads_idle_or_free() -> None:
    for slurm, pod in ((SlurmState.IDLE, True), (SlurmState.ABSENT, False)):
        node = NodeView("n", "gpu", "b0", 8, slurm, has_slurmd_pod=pod)
        assert placement_state(node) is not NodeState.UNAVAILABLE
        tainted = replace(node, sickness=sickness_of(drain=False, reason="", tainted=True))
        assert placement_state(tainted) is NodeState.UNAVAILABLE


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from("FIB"), min_size=2, max_size=8),
    st.sets(st.integers(0, 7)),
    st.integers(1, 3),
)
def test_no_plan_ever_reserves_or_labels_a_sick_node(
    letters: list[str], sick_at: set[int], pods: int
) -> None:
    nodes = fleet("".join(letters[:4]), "".join(letters[4:]) or "I")
    names = [n.name for i, n in enumerate(nodes) if i in sick_at]
    nodes = sick(nodes, DRAIN, *names)
    plan = plan_lending(world(nodes, WorkloadBuilder().pods(pods).obj()))
    for lend in plan.lends:
        chosen = set(lend.label) | set(lend.create.nodes if lend.create else ())
        assert not chosen & set(names)


# --- the slurmd pod comes back to a sick node --------------------------------------------


def test_slurmd_tolerates_healths_taint_so_a_returned_sick_node_can_be_checked() -> None:
    b = bundle()
    pod = slurmd_pod(b.cluster, b.node_sets[0], "gpu-0001", 4, "hash")
    assert {"key": wk.TAINT_UNHEALTHY, "operator": "Exists", "effect": "NoSchedule"} in pod["spec"][
        "tolerations"
    ]


# --- escalated NVLink domains (rack escalation) -----------------------------------------


def escalated(nodes: tuple[NodeView, ...], block: str) -> tuple[NodeView, ...]:
    """Node health escalated `block`: half of it is sick (its first two nodes)."""
    sick_ones = [n.name for n in nodes if n.block == block][:2]
    out = sick(nodes, DRAIN, *sick_ones)
    return tuple(replace(n, escalated=n.block == block) for n in out)


@pytest.mark.parametrize(
    ("pods", "gang_nodes", "placed_on"),
    [
        # A 2-node gang is kept off the escalated block b0, though its two healthy
        # nodes would hold it: it takes b1.
        (2, 2, ("b1-n0", "b1-n1")),
        # A 1-node workload may use a healthy node of the escalated block (best fit).
        (1, 2, ("b0-n2",)),
        # With gangNodes 3 the 2-node gang is small enough to stay there.
        (2, 3, ("b0-n2", "b0-n3")),
    ],
)
def test_an_escalated_domain_takes_small_workloads_only(
    pods: int, gang_nodes: int, placed_on: tuple[str, ...]
) -> None:
    nodes = escalated(fleet("IIII", "IIII"), "b0")
    w = replace(world(nodes, WorkloadBuilder().pods(pods).obj()), escalation_gang_nodes=gang_nodes)
    (lend,) = plan_lending(w).lends
    assert lend.create is not None and lend.create.nodes == placed_on


def test_a_gang_never_lands_on_an_escalated_domain_even_when_only_it_is_idle() -> None:
    """b1 is busy (the default policy reserves busy nodes and waits for them): the
    gang waits for b1 rather than take the escalated b0's two idle nodes."""
    nodes = escalated(fleet("IIII", "BB"), "b0")
    (lend,) = plan_lending(world(nodes, WorkloadBuilder().pods(2).obj())).lends
    assert lend.create is not None and lend.create.nodes == ("b1-n0", "b1-n1")


def test_large_and_small_views_share_one_rounds_reservations() -> None:
    """A gang placed in a round is seen by the small view made after it: no node is
    reserved twice, and the small workloads take the escalated block's healthy nodes
    and what the gang left."""
    nodes = escalated(fleet("IIII", "III"), "b0")
    gang = WorkloadBuilder(name="gang", uid="uid-g").pods(2).obj()
    smalls = [WorkloadBuilder(name=f"s{i}", uid=f"uid-s{i}").pods(1).obj() for i in range(3)]
    plan = plan_lending(world(nodes, gang, *smalls))
    by_uid = {lend.uid: lend.create.nodes for lend in plan.lends if lend.create}
    taken = [n for found in by_uid.values() for n in found]
    assert len(taken) == len(set(taken)) == 5
    assert set(by_uid["uid-g"]) <= {"b1-n0", "b1-n1", "b1-n2"}
    assert not {"b0-n0", "b0-n1"} & set(taken)  # the sick ones
