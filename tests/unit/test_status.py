"""Status counts and pod conditions from Slurm node states (pure)."""

from __future__ import annotations

import pytest

from slurmkube.plan.model import PodView, SlurmNodeView
from slurmkube.plan.status import (
    gpu_counts,
    node_counts,
    pod_condition,
    pod_condition_updates,
)


def view(name: str, state: str = "idle", **kw: object) -> SlurmNodeView:
    busy = state in ("allocated", "mixed")
    args: dict[str, object] = {"busy": busy, "drain": state == "drain", "state": state}
    args |= kw
    return SlurmNodeView(name, **args)  # type: ignore[arg-type]


FLEET = {
    "a": view("a", gpus=4),
    "b": view("b", "allocated", gpus=4, gpus_allocated=4),
    "c": view("c", "mixed", gpus=4, gpus_allocated=1),
    "d": view("d", "drain", reason="slurmkube: slurmd pod removal", gpus=4),
    "e": view("e", "down", responding=False, gpus=4),
    "f": view("f", "cloud", responding=False),
    "g": view("g", "cloud", responding=False),
}


def test_counts_add_up_to_the_nodes_that_should_run_slurmd() -> None:
    up = ["a", "b", "c", "d", "e", "unregistered"]
    counts = node_counts(FLEET, up, members=[*FLEET, "unregistered"])
    assert counts == {
        "total": 6,
        "idle": 1,
        "allocated": 1,
        "mixed": 1,
        "drain": 1,
        "down": 2,  # e does not answer; `unregistered` is not known to Slurm yet
        "cloud": 2,
    }
    assert sum(counts[s] for s in ("idle", "allocated", "mixed", "drain", "down")) == 6


def test_gpus_count_registered_nodes_only() -> None:
    assert gpu_counts(FLEET, ["a", "b", "c", "e"]) == {"total": 12, "allocated": 5}


@pytest.mark.parametrize(
    ("node", "status", "reason"),
    [
        (view("n"), True, "Idle"),
        (view("n", "allocated"), True, "Allocated"),
        (view("n", "mixed"), True, "Mixed"),
        (view("n", "drain", reason="admin: bad DIMM"), False, "Drained"),
        (view("n", "drain", busy=True, reason="slurmkube: x"), False, "Draining"),
        (view("n", "down", responding=False, reason="Not responding"), False, "NotResponding"),
        (None, False, "NotRegistered"),
    ],
)
def test_pod_condition_follows_the_slurm_state(
    node: SlurmNodeView | None, status: bool, reason: str
) -> None:
    cond = pod_condition("pod", node)
    assert (cond.status, cond.reason) == (status, reason)


def test_drain_reason_is_the_condition_message() -> None:
    assert pod_condition("p", view("n", "drain", reason="admin: bad DIMM")).message == (
        "admin: bad DIMM"
    )


def test_only_changed_pod_conditions_are_written() -> None:
    current = pod_condition("p-a", FLEET["a"])
    pods = [
        PodView("p-a", "a", "set", slurm_condition=(True, "Idle", current.message)),
        PodView("p-b", "b", "set", slurm_condition=(True, "Idle", "stale")),
        PodView("p-c", "c", "set"),
        PodView("p-d", "d", "set", deleting=True),
    ]
    assert [u.pod for u in pod_condition_updates(pods, FLEET)] == ["p-b", "p-c"]
