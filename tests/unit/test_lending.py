"""The lending planner (slurmkube.lending): table tests by behaviour, and properties.

A fleet is written one string per NVLink block, one letter per node:
F free (no slurmd), I idle Slurm node, B busy Slurm node, D down.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkube.api import well_known as wk
from slurmkube.lending import (
    CheckState,
    LendingPlan,
    LendingPolicy,
    LendingWorld,
    NodeView,
    PodSetView,
    ReservationView,
    SlurmState,
    WorkloadView,
    fold_slurm_state,
    plan_lending,
    reservation_name,
    workload_view,
)
from slurmkube.placement import min_blocks_needed

CHECK = "slurm-lend"
NOW = 1_000_000.0
LETTERS = {
    "F": SlurmState.ABSENT,
    "I": SlurmState.IDLE,
    "B": SlurmState.BUSY,
    "D": SlurmState.DOWN,
}


def fleet(*blocks: str, gpus: int = 8) -> tuple[NodeView, ...]:
    nodes = []
    for b, states in enumerate(blocks):
        for n, letter in enumerate(states):
            state = LETTERS[letter]
            nodes.append(
                NodeView(
                    name=f"b{b}-n{n}",
                    node_set="gpu",
                    block=f"b{b}",
                    gpus=gpus,
                    slurm=state,
                    has_slurmd_pod=state is not SlurmState.ABSENT,
                )
            )
    return tuple(nodes)


@dataclass
class WorkloadBuilder:
    """MakeWorkload(...).obj(), Kueue style."""

    name: str = "wl"
    uid: str = "uid-1"
    state: CheckState = CheckState.PENDING
    pod_sets: list[PodSetView] = field(default_factory=lambda: [PodSetView("main", 2, 8)])
    quota_reserved: bool = True
    conditions: dict[str, bool] = field(default_factory=dict)

    def pods(self, count: int, gpus: int = 8, single_block: bool = False) -> WorkloadBuilder:
        self.pod_sets = [PodSetView("main", count, gpus, single_block)]
        return self

    def obj(self) -> WorkloadView:
        return WorkloadView(
            namespace="team",
            name=self.name,
            uid=self.uid,
            check=CHECK,
            check_state=self.state,
            pod_sets=tuple(self.pod_sets),
            quota_reserved=self.quota_reserved,
            **self.conditions,  # type: ignore[arg-type]
        )


def world(
    nodes: tuple[NodeView, ...],
    *workloads: WorkloadView,
    reservations: tuple[ReservationView, ...] = (),
    policy: LendingPolicy | None = None,
    reachable: bool = True,
) -> LendingWorld:
    return LendingWorld(
        checks=(policy or LendingPolicy(CHECK),),
        workloads=workloads,
        nodes=nodes,
        reservations=reservations,
        slurm_reachable=reachable,
        now=NOW,
    )


def leased(
    nodes: tuple[NodeView, ...], uid: str, *names: str, slurmd: bool
) -> tuple[NodeView, ...]:
    return tuple(
        replace(n, lease=uid, has_slurmd_pod=slurmd, slurm=n.slurm if slurmd else SlurmState.ABSENT)
        if n.name in names
        else n
        for n in nodes
    )


def reservation(uid: str, *nodes: str, age: float = 10.0) -> ReservationView:
    return ReservationView(reservation_name(uid), tuple(nodes), NOW - age)


def only_check(plan: LendingPlan) -> tuple[CheckState, str]:
    checks = [lend.check for lend in plan.lends if lend.check] + [
        r.check for r in plan.releases if r.check
    ]
    assert len(checks) == 1, checks
    return checks[0].state, checks[0].message


# --- lending, step by step ---------------------------------------------------------------


def test_idle_nodes_get_a_reservation_and_lease_labels_in_one_step() -> None:
    plan = plan_lending(world(fleet("IIII", "II"), WorkloadBuilder().obj()))
    (lend,) = plan.lends
    assert lend.create is not None
    assert lend.create.name == f"{wk.RESERVATION_PREFIX}uid-1"
    # Best fit: the two-node block, whole, keeps the four-node block intact.
    assert lend.create.nodes == ("b1-n0", "b1-n1")
    assert "IGNORE_JOBS" in lend.create.flags
    assert lend.label == ("b1-n0", "b1-n1")
    assert only_check(plan)[0] is CheckState.PENDING


def test_free_kubernetes_nodes_are_preferred_over_idle_slurm_nodes() -> None:
    plan = plan_lending(world(fleet("II", "FF"), WorkloadBuilder().obj()))
    assert plan.lends[0].create is not None
    assert plan.lends[0].create.nodes == ("b1-n0", "b1-n1")


def test_labelled_nodes_wait_pending_until_their_slurmd_pods_leave() -> None:
    nodes = leased(fleet("II"), "uid-1", "b0-n0", "b0-n1", slurmd=True)
    plan = plan_lending(
        world(
            nodes, WorkloadBuilder().obj(), reservations=(reservation("uid-1", "b0-n0", "b0-n1"),)
        )
    )
    state, message = only_check(plan)
    assert state is CheckState.PENDING
    assert "slurmd pods" in message
    assert plan.lends[0].create is None and plan.lends[0].label == ()


def test_ready_carries_the_lease_node_selector_and_the_policy_tolerations() -> None:
    nodes = leased(fleet("II"), "uid-1", "b0-n0", "b0-n1", slurmd=False)
    toleration = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    plan = plan_lending(
        world(
            nodes,
            WorkloadBuilder().obj(),
            reservations=(reservation("uid-1", "b0-n0", "b0-n1"),),
            policy=LendingPolicy(CHECK, tolerations=(toleration,)),
        )
    )
    check = plan.lends[0].check
    assert check is not None and check.state is CheckState.READY
    assert check.pod_set_updates == (
        {"name": "main", "nodeSelector": {wk.LABEL_LEASE: "uid-1"}, "tolerations": [toleration]},
    )


def test_reserved_busy_nodes_wait_for_their_jobs_without_labels() -> None:
    plan = plan_lending(
        world(
            fleet("BI"),
            WorkloadBuilder().obj(),
            reservations=(reservation("uid-1", "b0-n0", "b0-n1"),),
        )
    )
    state, message = only_check(plan)
    assert state is CheckState.PENDING and "waits for Slurm jobs on b0-n0" in message
    assert plan.lends[0].label == ()
    assert plan.waiting == ("uid-1",)


def test_busy_nodes_are_reserved_only_when_free_and_idle_ones_cannot_hold_the_gang() -> None:
    plan = plan_lending(world(fleet("BB", "IB"), WorkloadBuilder().obj()))
    (lend,) = plan.lends
    assert lend.create is not None and lend.label == ()
    assert lend.waiting


def test_waiting_past_the_timeout_answers_retry_and_returns_the_nodes() -> None:
    plan = plan_lending(
        world(
            fleet("BI"),
            WorkloadBuilder().obj(),
            reservations=(reservation("uid-1", "b0-n0", "b0-n1", age=4000),),
        )
    )
    (release,) = plan.releases
    assert release.delete_reservation == reservation_name("uid-1")
    assert release.check is not None and release.check.state is CheckState.RETRY
    assert release.check.requeue_after_seconds == 30
    assert plan.lends == ()


@pytest.mark.parametrize(
    "condition",
    [{"finished": True}, {"evicted": True}, {"active": False}, {"deleting": True}],
    ids=["finished", "evicted", "deactivated", "deleted"],
)
def test_a_workload_that_stops_holding_nodes_is_released(condition: dict[str, bool]) -> None:
    nodes = leased(fleet("II"), "uid-1", "b0-n0", "b0-n1", slurmd=False)
    w = WorkloadBuilder(state=CheckState.READY, conditions=condition).obj()
    plan = plan_lending(world(nodes, w, reservations=(reservation("uid-1", "b0-n0", "b0-n1"),)))
    (release,) = plan.releases
    assert release.unlabel == ("b0-n0", "b0-n1")
    assert release.delete_reservation == reservation_name("uid-1")
    assert not release.orphan and release.check is None
    assert plan.lends == () and plan.lent_nodes == 0


def test_eviction_resets_to_pending_without_quota_and_releases() -> None:
    nodes = leased(fleet("II"), "uid-1", "b0-n0", slurmd=False)
    w = WorkloadBuilder(quota_reserved=False).obj()
    plan = plan_lending(world(nodes, w, reservations=(reservation("uid-1", "b0-n0"),)))
    assert [r.uid for r in plan.releases] == ["uid-1"]


def test_leases_and_reservations_without_a_workload_are_collected_as_leaks() -> None:
    nodes = leased(fleet("III"), "gone", "b0-n0", slurmd=False)
    plan = plan_lending(world(nodes, reservations=(reservation("gone", "b0-n0", "b0-n1"),)))
    (release,) = plan.releases
    assert release.orphan and release.unlabel == ("b0-n0",)
    assert release.delete_reservation == reservation_name("gone")


def test_leases_of_workloads_on_other_clusters_are_left_alone() -> None:
    nodes = leased(fleet("II"), "elsewhere", "b0-n0", slurmd=False)
    plan = plan_lending(replace(world(nodes), live_elsewhere=frozenset({"elsewhere"})))
    assert plan.releases == ()


def test_a_ready_workload_whose_reservation_vanished_gets_it_back() -> None:
    nodes = leased(fleet("II"), "uid-1", "b0-n0", "b0-n1", slurmd=False)
    plan = plan_lending(world(nodes, WorkloadBuilder(state=CheckState.READY).obj()))
    (lend,) = plan.lends
    assert lend.create is not None and lend.create.nodes == ("b0-n0", "b0-n1")
    assert lend.check is None


def test_a_retry_answer_already_given_releases_what_is_left() -> None:
    w = WorkloadBuilder(state=CheckState.RETRY).obj()
    plan = plan_lending(world(fleet("II"), w, reservations=(reservation("uid-1", "b0-n0"),)))
    assert [r.delete_reservation for r in plan.releases] == [reservation_name("uid-1")]


@dataclass(frozen=True)
class Answer:
    blocks: tuple[str, ...]
    workload: WorkloadView
    state: CheckState
    says: str
    policy: LendingPolicy = field(default_factory=lambda: LendingPolicy(CHECK))
    reachable: bool = True


ANSWERS = {
    "more nodes than the pool ever has: Rejected": Answer(
        ("II",), WorkloadBuilder().pods(3).obj(), CheckState.REJECTED, "the pool has 2"
    ),
    "more GPUs per pod than any node: Rejected": Answer(
        ("II",), WorkloadBuilder().pods(1, gpus=16).obj(), CheckState.REJECTED, "largest node"
    ),
    "single block larger than any block: Rejected": Answer(
        ("II", "II"),
        WorkloadBuilder().pods(3, single_block=True).obj(),
        CheckState.REJECTED,
        "one NVLink block",
    ),
    "no GPU pod: Rejected": Answer(
        ("II",), WorkloadBuilder().pods(2, gpus=0).obj(), CheckState.REJECTED, "requests"
    ),
    "pool short now: Retry": Answer(("DI",), WorkloadBuilder().obj(), CheckState.RETRY, "waits"),
    "Slurm unreachable: Retry": Answer(
        ("II",), WorkloadBuilder().obj(), CheckState.RETRY, "not reachable", reachable=False
    ),
    "above maxNodes: Rejected": Answer(
        ("IIII",),
        WorkloadBuilder().pods(3).obj(),
        CheckState.REJECTED,
        "at most 2",
        policy=LendingPolicy(CHECK, max_nodes=2),
    ),
}


@pytest.mark.parametrize("case", ANSWERS.values(), ids=ANSWERS.keys())
def test_kueue_answers(case: Answer) -> None:
    plan = plan_lending(
        world(fleet(*case.blocks), case.workload, policy=case.policy, reachable=case.reachable)
    )
    state, message = only_check(plan)
    assert state is case.state
    assert case.says in message
    assert all(lend.create is None for lend in plan.lends)


def test_max_nodes_counts_what_other_workloads_hold() -> None:
    nodes = leased(fleet("IIII"), "uid-0", "b0-n0", "b0-n1", slurmd=False)
    holder = WorkloadBuilder(name="a", uid="uid-0", state=CheckState.READY).obj()
    plan = plan_lending(
        world(
            nodes,
            holder,
            WorkloadBuilder(name="b").obj(),
            reservations=(reservation("uid-0", "b0-n0", "b0-n1"),),
            policy=LendingPolicy(CHECK, max_nodes=3),
        )
    )
    state, message = only_check(plan)
    assert state is CheckState.RETRY and "2 of at most 3" in message


def test_only_nodes_of_the_checks_node_sets_are_lent() -> None:
    nodes = tuple(replace(n, node_set="cpu") if n.block == "b0" else n for n in fleet("FF", "II"))
    plan = plan_lending(
        world(
            nodes,
            WorkloadBuilder().obj(),
            policy=LendingPolicy(CHECK, node_sets=frozenset({"gpu"})),
        )
    )
    assert plan.lends[0].create is not None
    assert plan.lends[0].create.nodes == ("b1-n0", "b1-n1")


def test_nodes_in_an_admins_reservation_are_never_chosen() -> None:
    nodes = tuple(
        replace(n, slurm_reservation="maint") if n.block == "b1" else n for n in fleet("II", "FF")
    )
    plan = plan_lending(world(nodes, WorkloadBuilder().obj()))
    assert plan.lends[0].create is not None
    assert plan.lends[0].create.nodes == ("b0-n0", "b0-n1")


def test_two_workloads_in_one_round_get_disjoint_nodes() -> None:
    a = WorkloadBuilder(name="a", uid="uid-a").obj()
    b = WorkloadBuilder(name="b", uid="uid-b").obj()
    plan = plan_lending(world(fleet("IIII"), a, b))
    first, second = (lend.create for lend in plan.lends)
    assert first is not None and second is not None
    assert not set(first.nodes) & set(second.nodes)


def test_the_second_of_two_racing_workloads_retries_when_the_block_is_taken() -> None:
    a = WorkloadBuilder(name="a", uid="uid-a").obj()
    b = WorkloadBuilder(name="b", uid="uid-b").obj()
    plan = plan_lending(world(fleet("III"), a, b))
    assert [lend.uid for lend in plan.lends] == ["uid-a"]
    (release,) = plan.releases
    assert release.check is not None and release.check.state is CheckState.RETRY
    assert release.check.workload == "b"


# --- Workload objects --------------------------------------------------------------------


def raw_workload(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "job-x", "namespace": "team", "uid": "u-1"},
        "spec": {
            "podSets": [
                {
                    "name": "workers",
                    "count": 2,
                    "template": {
                        "metadata": {"annotations": {wk.ANNOTATION_BLOCK_POLICY: "single-block"}},
                        "spec": {
                            "containers": [
                                {"name": "a", "resources": {"limits": {wk.RESOURCE_GPU: "4"}}},
                                {"name": "b", "resources": {"requests": {"cpu": "1"}}},
                            ]
                        },
                    },
                },
                {"name": "launcher", "count": 1, "template": {"spec": {"containers": [{}]}}},
            ]
        },
        "status": status,
    }


def test_workload_view_reads_pod_sets_conditions_and_our_check() -> None:
    raw = raw_workload(
        conditions=[{"type": "QuotaReserved", "status": "True"}],
        admissionChecks=[
            {"name": "other", "state": "Ready"},
            {"name": CHECK, "state": "Pending", "message": "m"},
        ],
    )
    w = workload_view(raw, CHECK)
    assert w.pod_sets == (PodSetView("workers", 2, 4, True), PodSetView("launcher", 1, 0, False))
    assert w.quota_reserved and w.holds_nodes
    assert (w.check_state, w.check_message) == (CheckState.PENDING, "m")


# --- properties --------------------------------------------------------------------------

blocks_strategy = st.lists(st.text(alphabet="FIBD", min_size=1, max_size=6), min_size=1, max_size=6)


@settings(max_examples=200, deadline=None)
@given(blocks=blocks_strategy, size=st.integers(1, 10))
def test_a_gang_that_fits_in_k_blocks_never_spans_more(blocks: list[str], size: int) -> None:
    nodes = fleet(*blocks)
    plan = plan_lending(world(nodes, WorkloadBuilder().pods(size).obj()))
    create = plan.lends[0].create if plan.lends else None
    if create is None:
        return
    by_name = {n.name: n for n in nodes}
    usable = [sum(1 for c in b if c in "FI") for b in blocks]
    k = min_blocks_needed(usable, size)
    if k is None:  # busy nodes were needed: count them too
        k = min_blocks_needed([sum(1 for c in b if c in "FIB") for b in blocks], size)
    assert len({by_name[n].block for n in create.nodes}) == k


@settings(max_examples=200, deadline=None)
@given(blocks=blocks_strategy, sizes=st.lists(st.integers(1, 6), min_size=2, max_size=4))
def test_workloads_never_share_a_node(blocks: list[str], sizes: list[int]) -> None:
    workloads = [
        WorkloadBuilder(name=f"w{i}", uid=f"uid-{i}").pods(size).obj()
        for i, size in enumerate(sizes)
    ]
    nodes = fleet(*blocks)
    reservations: list[ReservationView] = []
    # Two rounds: the first reserves, the second sees those reservations as facts.
    for _ in range(2):
        plan = plan_lending(world(nodes, *workloads, reservations=tuple(reservations)))
        for lend in plan.lends:
            if lend.create is not None:
                reservations.append(ReservationView(lend.create.name, lend.create.nodes, NOW))
        nodes = tuple(
            replace(n, slurm_reservation=r.name) if n.name in r.nodes else n
            for n in nodes
            for r in [
                next((r for r in reservations if n.name in r.nodes), ReservationView("", (), 0))
            ]
        )
    taken = [n for r in reservations for n in r.nodes]
    assert len(taken) == len(set(taken))


FOLD = {
    "a job running wins over everything": (
        {"has_slurmd_pod": False, "busy": True, "drain": True},
        SlurmState.BUSY,
    ),
    "an admin's drain is never lent": ({"drain": True}, SlurmState.DOWN),
    "our own drain (pod leaving) is idle": (
        {"drain": True, "drained_by_us": True},
        SlurmState.IDLE,
    ),
    "no slurmd pod: Kubernetes owns it": (
        {"has_slurmd_pod": False, "known": False},
        SlurmState.ABSENT,
    ),
    "a pod Slurm does not answer for yet": ({"responding": False}, SlurmState.STARTING),
    "registered and idle": ({}, SlurmState.IDLE),
}


@pytest.mark.parametrize(("given", "state"), FOLD.values(), ids=FOLD.keys())
def test_slurm_state_folds_for_lending(given: dict[str, bool], state: SlurmState) -> None:
    facts = {
        "has_slurmd_pod": True,
        "known": True,
        "busy": False,
        "responding": True,
        "drain": False,
        "drained_by_us": False,
    } | given
    assert fold_slurm_state(**facts) is state
