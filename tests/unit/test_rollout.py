"""Replacing slurmd pods whose template changed: drain first, maxUnavailable at a time."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurmkube.api import well_known as wk
from slurmkube.plan.cluster import plan_cluster
from slurmkube.plan.model import Observed, PodView, SlurmNodeView
from slurmkube.plan.rollout import STARTING_LOOK_SECONDS
from slurmkube.topology.fleet import fleet_node
from slurmkube_local.builders import bundle, nvl_fleet

NODES = ("gpu-0001", "gpu-0002", "gpu-0003", "gpu-0004")
OLD = "0000000000000000"


def observed(
    pods: list[PodView],
    slurm: dict[str, SlurmNodeView] | None,
    strategy: dict[str, object] | None = None,
) -> Observed:
    b = bundle(block_size=2)
    ns = b.node_sets[0]
    if strategy is not None:
        spec = ns.spec.model_validate(
            ns.spec.model_dump(by_alias=True) | {"updateStrategy": strategy}
        )
        ns = ns.model_copy(update={"spec": spec})
    return Observed(
        bundle=type(b)(b.cluster, (ns,)),
        fleet=[fleet_node(n) for n in nvl_fleet(2, 2)],
        pods=pods,
        slurm_nodes=slurm,
    )


def current_hash(node: str) -> str:
    """The template hash today's plan gives the pod of `node`."""
    plan = plan_cluster(observed([], None))
    (created,) = (p for p in plan.create_pods if p["metadata"]["name"] == f"gpu-{node}")
    return str(created["metadata"]["annotations"][wk.ANNOTATION_POD_TEMPLATE_HASH])


def pod(node: str, template: str = OLD, ready: bool = True) -> PodView:
    return PodView(f"gpu-{node}", node, "gpu", ready=ready, template_hash=template)


def node(name: str, busy: bool = False, drained: bool = False) -> SlurmNodeView:
    reason = f"{wk.DRAIN_REASON_PREFIX} slurmd pod removal" if drained else ""
    return SlurmNodeView(name, busy=busy, drain=drained, reason=reason)


def test_pods_with_todays_template_are_left_alone() -> None:
    pods = [pod(n, current_hash(n)) for n in NODES]
    plan = plan_cluster(observed(pods, {n: node(n) for n in NODES}))
    assert plan.drain == () and plan.delete_pods == () and plan.rolling == frozenset()
    assert plan.look_again_seconds is None


def test_pods_from_before_template_hashes_are_not_rolled_on_an_operator_upgrade() -> None:
    plan = plan_cluster(observed([pod(n, "") for n in NODES], {n: node(n) for n in NODES}))
    assert plan.drain == () and plan.delete_pods == ()


@pytest.mark.parametrize(
    ("max_unavailable", "busy", "drain"),
    [
        # One at a time, idle nodes before busy ones (a busy node would hold the rollout).
        (1, {"gpu-0001"}, ("gpu-0002",)),
        (2, {"gpu-0001", "gpu-0002"}, ("gpu-0003", "gpu-0004")),
        (3, set(), ("gpu-0001", "gpu-0002", "gpu-0003")),
        # Every node busy: drained all the same, each pod going once its job ends.
        (2, set(NODES), ("gpu-0001", "gpu-0002")),
    ],
)
def test_outdated_pods_are_drained_max_unavailable_at_a_time_idle_first(
    max_unavailable: int, busy: set[str], drain: tuple[str, ...]
) -> None:
    slurm = {n: node(n, busy=n in busy) for n in NODES}
    obs = observed([pod(n) for n in NODES], slurm, {"maxUnavailable": max_unavailable})
    plan = plan_cluster(obs)
    assert plan.drain == drain
    assert plan.delete_pods == ()
    assert plan.rolling == frozenset(drain)
    assert plan.pods_go_when_idle == frozenset(drain) & busy


def test_a_drained_idle_outdated_pod_is_deleted_and_its_node_stays_drained() -> None:
    slurm = {n: node(n) for n in NODES} | {"gpu-0001": node("gpu-0001", drained=True)}
    plan = plan_cluster(observed([pod(n) for n in NODES], slurm))
    assert plan.delete_pods == ("gpu-gpu-0001",)
    assert plan.drain == ()  # the budget of one is in use
    assert "gpu-0001" in plan.rolling  # not resumed before its new pod


def test_a_drained_outdated_node_with_a_job_keeps_its_pod() -> None:
    slurm = {n: node(n) for n in NODES} | {"gpu-0001": node("gpu-0001", True, drained=True)}
    plan = plan_cluster(observed([pod(n) for n in NODES], slurm))
    assert plan.delete_pods == () and plan.drain == ()
    # Its job's end is no event: the poll reconciles when Slurm shows the node idle.
    assert plan.pods_go_when_idle == {"gpu-0001"}


def test_a_replacement_still_starting_counts_against_max_unavailable() -> None:
    now = current_hash("gpu-0001")
    pods = [pod("gpu-0001", now, ready=False)] + [pod(n) for n in NODES[1:]]
    plan = plan_cluster(observed(pods, {n: node(n) for n in NODES}))
    assert plan.drain == () and plan.delete_pods == ()
    # Its turning Ready is no event: the reconcile looks again soon, not at the resync.
    assert plan.look_again_seconds == STARTING_LOOK_SECONDS
    # Once it is ready, the next one goes.
    pods[0] = pod("gpu-0001", now)
    plan = plan_cluster(observed(pods, {n: node(n) for n in NODES}))
    assert plan.drain == ("gpu-0002",)
    assert plan.look_again_seconds is None


def test_on_delete_replaces_nothing() -> None:
    slurm = {n: node(n) for n in NODES}
    plan = plan_cluster(observed([pod(n) for n in NODES], slurm, {"type": "OnDelete"}))
    assert plan.drain == () and plan.delete_pods == ()


def test_nothing_is_rolled_while_slurm_cannot_be_asked() -> None:
    plan = plan_cluster(observed([pod(n) for n in NODES], None))
    assert plan.drain == () and plan.delete_pods == ()


@pytest.mark.parametrize(
    ("busy", "drained", "since", "deleted"),
    [
        # Slurm keeps a silent node's jobs until SlurmdTimeout: its pod waits.
        (True, False, None, False),
        (True, True, None, False),
        (True, True, 0.0, True),  # long past SlurmdTimeout plus the grace: Slurm gave up
        (False, False, None, True),  # nothing runs there
    ],
    ids=["busy", "busy drained", "busy overdue", "idle"],
)
def test_an_outdated_pod_on_a_node_slurm_does_not_reach_goes_only_if_no_job_can_be_lost(
    busy: bool, drained: bool, since: float | None, deleted: bool
) -> None:
    silent = replace(node("gpu-0001", busy=busy, drained=drained), responding=False)
    slurm = {n: node(n) for n in NODES} | {"gpu-0001": silent}
    obs = replace(
        observed([pod(n) for n in NODES], slurm),
        now=10_000.0,
        not_responding_since={} if since is None else {"gpu-0001": since},
    )
    plan = plan_cluster(obs)
    assert ("gpu-gpu-0001" in plan.delete_pods) is deleted


def test_an_admins_drained_idle_node_is_replaced_with_its_drain_kept() -> None:
    admin = SlurmNodeView("gpu-0001", busy=False, drain=True, reason="RMA ticket 42")
    slurm = {n: node(n) for n in NODES} | {"gpu-0001": admin}
    plan = plan_cluster(observed([pod(n) for n in NODES], slurm))
    assert "gpu-gpu-0001" in plan.delete_pods
    assert "gpu-0001" not in plan.drain  # its reason is not overwritten
