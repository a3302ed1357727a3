"""A deleted SlurmCluster whose Slurm never answered: it waits only if a slurmd
ever registered (status.slurmdRegistered, plan/deletion.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkube.plan.deletion import DeletionStep, plan_deletion, slurmd_registered
from slurmkube.plan.model import SlurmNodeView


def view(state: str, *, busy: bool = False, responding: bool = True) -> SlurmNodeView:
    return SlurmNodeView("n", busy=busy, drain=False, responding=responding, state=state)


def drain_step(nodes: dict[str, SlurmNodeView] | None, registered: bool | None) -> DeletionStep:
    """deletionPolicy Drain, not forced, slurmctld's pod running."""
    return plan_deletion(
        policy="Drain",
        forced=False,
        slurm_nodes=nodes,
        controller_running=True,
        registered=registered,
    )


WRITTEN = {"observedGeneration": 1}


@pytest.mark.parametrize(
    ("status", "seen", "expected"),
    [
        # Slurm answers: registered when a node responds and is up, or runs a job.
        (None, {"n": view("idle")}, True),
        (None, {"n": view("drain")}, True),
        (None, {"n": view("down", busy=True, responding=False)}, True),
        (None, {"n": view("cloud")}, False),
        (None, {"n": view("down", responding=False)}, False),
        (None, {}, False),
        # Once seen, never cleared, whatever Slurm says later.
        ({**WRITTEN, "slurmdRegistered": True}, None, True),
        ({**WRITTEN, "slurmdRegistered": True}, {"n": view("cloud")}, True),
        # Slurm silent: a new cluster has had no slurmd; a known False stays False.
        (None, None, False),
        ({}, None, False),
        ({**WRITTEN, "slurmdRegistered": False}, None, False),
        # Status of an older operator without the field, Slurm silent: not known.
        (WRITTEN, None, None),
        # ... and known again from the next answer.
        (WRITTEN, {"n": view("cloud")}, False),
    ],
)
def test_slurmd_registered_is_set_once_a_slurmd_is_seen_and_never_cleared(
    status: Mapping[str, Any] | None, seen: dict[str, SlurmNodeView] | None, expected: bool | None
) -> None:
    assert slurmd_registered(status, seen) is expected


@pytest.mark.parametrize(
    ("registered", "proceed"),
    [(False, True), (True, False), (None, False)],
)
def test_a_silent_slurm_holds_the_deletion_only_if_a_slurmd_ever_registered(
    registered: bool | None, proceed: bool
) -> None:
    assert drain_step(None, registered).proceed is proceed


@given(st.booleans(), st.booleans())
def test_a_busy_node_holds_the_deletion_whatever_was_recorded(
    registered: bool, responding: bool
) -> None:
    busy = {"n": view("allocated", busy=True, responding=responding)}
    assert not drain_step(busy, registered).proceed


OBSERVATIONS = st.one_of(
    st.none(), st.sampled_from(["idle", "cloud", "down"]).map(lambda s: {"n": view(s)})
)


@given(st.lists(OBSERVATIONS))
def test_the_record_never_goes_back_from_true(seen: list[dict[str, SlurmNodeView] | None]) -> None:
    status: dict[str, Any] = {**WRITTEN, "slurmdRegistered": True}
    for nodes in seen:
        status["slurmdRegistered"] = slurmd_registered(status, nodes)
    assert status["slurmdRegistered"] is True
