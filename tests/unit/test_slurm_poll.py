"""The 2 s poll of Slurm's nodes (plan/slurm_poll.py): busy labels follow Slurm
for every cluster with slurmd pods, only where they differ."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkube.plan import autoscale
from slurmkube.plan.model import PodView, SlurmNodeView
from slurmkube.plan.slurm_poll import SUSPEND_GRACE_S, NodeReads, node_reads, plan_poll, polled


def pod(node: str, *, labelled_busy: bool = False) -> PodView:
    return PodView(f"pod-{node}", node, "gpu", busy_label=labelled_busy)


def slurm(**busy: bool) -> dict[str, SlurmNodeView]:
    return {n: SlurmNodeView(n, busy=b, drain=False) for n, b in busy.items()}


@pytest.mark.parametrize(
    ("autoscaling", "pods", "creating", "expected"),
    [
        (False, 0, 0, False),
        (False, 1, 0, True),
        (False, 0, 2, True),
        (True, 0, 0, True),
    ],
)
def test_every_cluster_with_slurmd_pods_is_polled(
    autoscaling: bool, pods: int, creating: int, expected: bool
) -> None:
    assert polled(autoscaling=autoscaling, pods=pods, creating=creating) is expected


CASES = {
    "job started: its pod labelled busy": (
        [pod("a"), pod("b")],
        slurm(a=True, b=False),
        {"pod-a": True},
    ),
    "job ended: its label cleared": (
        [pod("a", labelled_busy=True)],
        slurm(a=False),
        {"pod-a": False},
    ),
    "labels already right: nothing patched": (
        [pod("a", labelled_busy=True), pod("b")],
        slurm(a=True, b=False),
        {},
    ),
    "a node Slurm does not know is not busy": (
        [pod("a", labelled_busy=True)],
        slurm(),
        {"pod-a": False},
    ),
    "Slurm silent: labels kept": ([pod("a", labelled_busy=True)], None, {}),
}


@pytest.mark.parametrize(("pods", "nodes", "expected"), CASES.values(), ids=CASES.keys())
def test_the_poll_patches_only_the_labels_slurm_contradicts(
    pods: list[PodView], nodes: dict[str, SlurmNodeView] | None, expected: dict[str, bool]
) -> None:
    step = plan_poll(autoscaling=False, changed=True, pods=pods, slurm_nodes=nodes)
    assert dict(step.labels) == expected
    assert not step.reconcile


@given(st.booleans(), st.dictionaries(st.sampled_from("abcd"), st.booleans()))
def test_nothing_changed_means_nothing_done(autoscaling: bool, busy: dict[str, bool]) -> None:
    pods = [pod(n, labelled_busy=not b) for n, b in busy.items()]
    step = plan_poll(autoscaling=autoscaling, changed=False, pods=pods, slurm_nodes=slurm(**busy))
    assert (dict(step.labels), step.reconcile) == ({}, False)


@given(
    st.booleans(), st.dictionaries(st.sampled_from("abcd"), st.tuples(st.booleans(), st.booleans()))
)
def test_after_the_patch_every_label_is_what_slurm_shows(
    autoscaling: bool, states: dict[str, tuple[bool, bool]]
) -> None:
    pods = [pod(n, labelled_busy=label) for n, (label, _) in states.items()]
    nodes = slurm(**{n: busy for n, (_, busy) in states.items()})
    step = plan_poll(autoscaling=autoscaling, changed=True, pods=pods, slurm_nodes=nodes)
    after = {p.name: step.labels.get(p.name, p.busy_label) for p in pods}
    assert after == {f"pod-{n}": busy for n, (_, busy) in states.items()}
    assert set(step.labels) == {f"pod-{n}" for n, (label, busy) in states.items() if label != busy}
    assert step.reconcile is autoscaling


@pytest.mark.parametrize(
    ("changed", "answered", "before", "reconcile"),
    [
        (True, False, True, True),  # Slurm stopped answering: Ready must say so now
        (False, True, False, True),  # answering again
        (True, False, False, False),  # still silent: no reconcile every poll
        (False, True, True, False),  # quiet and answering
        (True, False, None, False),  # the first poll: the reconcile that started it knows
    ],
)
def test_a_cluster_reconciles_when_slurm_stops_or_starts_answering(
    changed: bool, answered: bool, before: bool | None, reconcile: bool
) -> None:
    step = plan_poll(
        autoscaling=False,
        changed=changed,
        pods=[],
        slurm_nodes=None,
        answered=answered,
        answered_before=before,
    )
    assert step.reconcile is reconcile


@pytest.mark.parametrize(
    ("nodes", "reconcile"),
    [
        (slurm(a=True, b=False), False),  # its job still runs
        (slurm(a=False, b=False), True),  # its job ended: its pod may go now
        (slurm(b=False), True),  # Slurm no longer has it
        (None, False),  # Slurm silent: nothing known
    ],
)
def test_a_cluster_reconciles_when_a_node_whose_pod_goes_once_idle_is(
    nodes: dict[str, SlurmNodeView] | None, reconcile: bool
) -> None:
    step = plan_poll(
        autoscaling=False, changed=True, pods=[], slurm_nodes=nodes, go_when_idle={"a"}
    )
    assert step.reconcile is reconcile


@pytest.mark.parametrize(
    ("nodes", "reconcile"),
    [
        ({"a": SlurmNodeView("a", busy=False, drain=False, responding=False)}, False),
        ({"a": SlurmNodeView("a", busy=False, drain=False)}, True),  # its slurmd registered
        (slurm(b=False), False),  # not in Slurm's list yet
        (None, False),
    ],
)
def test_a_cluster_reconciles_when_a_slurmd_it_awaits_registers(
    nodes: dict[str, SlurmNodeView] | None, reconcile: bool
) -> None:
    step = plan_poll(autoscaling=False, changed=True, pods=[], slurm_nodes=nodes, awaited={"a"})
    assert step.reconcile is reconcile


NOW = 1_800_000_000.0


def view(
    name: str, *, busy: bool = False, power: str = autoscale.UP, idle_s: float = 0.0
) -> SlurmNodeView:
    return SlurmNodeView(name, busy=busy, drain=False, power=power, last_busy=NOW - idle_s)


def reads(*nodes: SlurmNodeView, suspend_time: int | None = 600) -> NodeReads:
    return node_reads({n.name: n for n in nodes}, suspend_time, NOW)


def test_nodes_are_read_every_poll_until_a_first_read() -> None:
    assert node_reads(None, 600, NOW).due(NOW)
    assert NodeReads().due(NOW)


def test_without_power_saving_only_a_job_change_reads_nodes() -> None:
    quiet = reads(view("a", idle_s=10_000), view("b", busy=True), suspend_time=None)
    assert not any(quiet.due(NOW + s) for s in (0, 600, 86_400))


@pytest.mark.parametrize(
    "power", [autoscale.RESUMING, autoscale.SUSPENDING, autoscale.POWER_DOWN_REQUESTED]
)
def test_a_node_between_power_states_is_read_every_poll(power: str) -> None:
    assert reads(view("a", busy=True), view("b", power=power)).due(NOW)


def test_an_idle_node_is_read_for_from_when_its_suspend_time_runs_out() -> None:
    idle = reads(view("a", idle_s=100), view("b", busy=True), view("c", power=autoscale.SUSPENDED))
    assert idle.suspends == (NOW + 500,)
    assert not idle.due(NOW + 499)
    assert idle.due(NOW + 500)
    assert idle.due(NOW + 500 + SUSPEND_GRACE_S)
    # Kept up past it (SuspendExcNodes' count): no longer waited on.
    assert not idle.due(NOW + 501 + SUSPEND_GRACE_S)


def test_a_node_idle_since_long_ago_is_not_waited_on() -> None:
    assert reads(view("a", idle_s=10_000)).suspends == ()


@given(st.lists(st.floats(0, 2_000), max_size=8), st.floats(-100, 3_000))
def test_a_read_is_due_exactly_inside_some_nodes_window(idle: list[float], later: float) -> None:
    nodes = [view(f"n{i}", idle_s=s) for i, s in enumerate(idle)]
    due = reads(*nodes).due(NOW + later)
    ends = [NOW - s + 600 for s in idle]
    inside = [
        e for e in ends if e <= NOW + later <= e + SUSPEND_GRACE_S and e >= NOW - SUSPEND_GRACE_S
    ]
    assert due is bool(inside)
