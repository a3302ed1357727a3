"""The 2 s poll of Slurm's nodes (plan/slurm_poll.py): busy labels follow Slurm
for every cluster with slurmd pods, only where they differ."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkube.plan.model import PodView, SlurmNodeView
from slurmkube.plan.slurm_poll import plan_poll, polled


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
