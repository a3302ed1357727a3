"""Ready is honest: the control plane healthy with the config in force, enough nodes
answering (spec.readyNodeShare), and a failed reconcile says so."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurmkube.plan.conditions import compose, condition, reconcile_failed
from slurmkube.plan.model import Condition, Plan, SlurmNodeView

DESIRED = tuple(f"n{i}" for i in range(10))
APPLIED = Condition("ConfigApplied", True, "Applied", "config abc in force")
REACHABLE = Condition("SlurmReachable", True, "Reachable", "slurmrestd answered")


def plan(share: float) -> Plan:
    return Plan(rendered=None, desired={"gpu": DESIRED}, ready_node_share=share)


def responding(up: int) -> dict[str, SlurmNodeView]:
    return {
        n: SlurmNodeView(n, busy=False, drain=False, responding=i < up)
        for i, n in enumerate(DESIRED)
    }


@pytest.mark.parametrize(
    ("share", "up", "ready"),
    [
        (0.9, 10, True),
        (0.9, 9, True),  # one node down in ten: still Ready at the default share
        (0.9, 8, False),
        (1.0, 9, False),  # every node, as asked
        (0.0, 0, True),
    ],
)
def test_ready_needs_the_share_of_nodes_the_spec_asks_for(
    share: float, up: int, ready: bool
) -> None:
    composed = compose([APPLIED, REACHABLE], plan(share), responding(up))
    assert condition(composed, "Ready").status is ready
    # NodesRegistered still names who is missing, Ready or not.
    assert condition(composed, "NodesRegistered").status is (up == len(DESIRED))


@pytest.mark.parametrize(
    "not_yet",
    [
        Condition("ConfigApplied", False, "Propagating", "reconfigure in 9s"),
        Condition("ConfigApplied", False, "ReconfigureFailed", "boom"),
        Condition("SlurmReachable", False, "Unreachable", "connection refused"),
        Condition("Reconciled", False, "ReconcileError", "ApiException: 500"),
    ],
    ids=["config propagating", "reconfigure failed", "slurm unreachable", "reconcile failed"],
)
def test_ready_is_false_until_the_control_plane_has_the_config_in_force(
    not_yet: Condition,
) -> None:
    others = [c for c in (APPLIED, REACHABLE) if c.type != not_yet.type]
    composed = compose([*others, not_yet], plan(0.9), responding(10))
    ready = condition(composed, "Ready")
    assert not ready.status and not_yet.message in ready.message
    assert condition(composed, "Degraded").status


def test_a_default_spec_reads_ready_at_ninety_percent() -> None:
    from slurmkube_local.builders import bundle

    assert bundle().cluster.spec.ready_node_share == 0.9


def test_a_reconcile_error_becomes_a_condition_and_ready_turns_false() -> None:
    previous = [
        {
            "type": "ConfigApplied",
            "status": "True",
            "reason": "Applied",
            "message": "ok",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        },
        {
            "type": "Ready",
            "status": "True",
            "reason": "Ready",
            "message": "all good",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        },
    ]
    out = {c["type"]: c for c in reconcile_failed(previous, TimeoutError("read timed out"), 7, "T")}
    assert out["Reconciled"]["status"] == "False"
    assert out["Reconciled"]["reason"] == "ReconcileError"
    assert out["Reconciled"]["message"] == "TimeoutError: read timed out"
    assert (out["Ready"]["status"], out["Ready"]["lastTransitionTime"]) == ("False", "T")
    assert out["Degraded"]["status"] == "True" and "Reconciled" in out["Degraded"]["message"]
    # What was true stays as it was, with its transition time.
    assert out["ConfigApplied"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert {c["observedGeneration"] for c in out.values()} == {7}


def test_the_next_good_reconcile_clears_the_error() -> None:
    composed = compose([APPLIED, REACHABLE], plan(0.9), responding(10))
    assert condition(composed, "Reconciled").status
    assert condition(composed, "Ready").status
    empty = replace(plan(0.9), desired={})
    assert condition(compose([APPLIED, REACHABLE], empty, {}), "Ready").status
