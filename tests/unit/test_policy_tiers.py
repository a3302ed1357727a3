"""What a team's waiting work carries on each scheduler: the tier label of its
pending Kueue work (plan.policy.tiers), the hold's reason on its Slurm jobs
(plan.policy.held)."""

from __future__ import annotations

from typing import Any

import pytest

from slurmkube.plan.policy import BudgetLevel, Observation, TeamUsage, plan_all_gates
from slurmkube.plan.policy.held import PREFIX, plan_hold_comments
from slurmkube.plan.policy.tiers import (
    TIER_ANNOTATION,
    TierLabel,
    plan_policy_tier_labels,
    plan_tier_labels,
)
from slurmkube.plan.policy.usage import JobUse
from tests.unit.policy_builders import TeamBuilder, policy

VALUES = {"high": 1000, "normal": 100, "low": 10, "users-own": 50, "vip": 5000}
HOUR = 3600.0


def workload(
    name: str = "job-a",
    namespace: str = "team-a",
    priority_class: str | None = None,
    *,
    ours: str | None = None,
    owner: tuple[str, str] = ("batch/v1", "Job"),
    reserved: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"job-{name}-1a2b",
        "namespace": namespace,
        "ownerReferences": [
            {"apiVersion": owner[0], "kind": owner[1], "name": name, "controller": True}
        ],
    }
    if ours is not None:
        meta["annotations"] = {TIER_ANNOTATION: ours}
    spec: dict[str, Any] = {"podSets": [], "queueName": "team-a"}
    if priority_class is not None:
        spec["priorityClassRef"] = {
            "group": "kueue.x-k8s.io",
            "kind": "WorkloadPriorityClass",
            "name": priority_class,
        }
    conditions = [{"type": "QuotaReserved", "status": "True"}] if reserved else []
    return {"metadata": meta, "spec": spec, "status": {"conditions": conditions}}


@pytest.mark.parametrize(
    ("allowed", "now", "ours", "want"),
    [
        ("normal", None, None, "normal"),  # no class: the team's tier
        ("low", None, None, "low"),
        ("low", "normal", None, "low"),  # above the allowed tier: lowered
        ("normal", "vip", None, "normal"),  # any class above, the policy's or not
        ("normal", "normal", None, None),  # already there
        ("normal", "low", None, None),  # the user chose lower: left
        ("normal", "users-own", None, None),
        ("normal", "low", "low", "normal"),  # ours: raised again in a new period
        ("normal", "low", "normal", None),  # the user relabelled it since: theirs
        ("high", "unknown-class", None, None),  # no value known: left to Kueue to refuse
    ],
)
def test_a_pending_workloads_job_gets_the_allowed_tier(
    allowed: str, now: str | None, ours: str | None, want: str | None
) -> None:
    labels = plan_tier_labels(allowed, VALUES, [workload(priority_class=now, ours=ours)])
    assert [label.priority_class for label in labels] == ([want] if want else [])


def test_the_label_goes_to_the_controlling_owner() -> None:
    (label,) = plan_tier_labels(
        "low", VALUES, [workload("trainer", owner=("jobset.x-k8s.io/v1alpha2", "JobSet"))]
    )
    assert label == TierLabel(
        namespace="team-a",
        workload="job-trainer-1a2b",
        api_version="jobset.x-k8s.io/v1alpha2",
        kind="JobSet",
        name="trainer",
        priority_class="low",
    )


def test_owners_whose_label_kueue_does_not_read_are_left() -> None:
    pods = workload(owner=("v1", "Pod"))
    orphan = workload()
    orphan["metadata"]["ownerReferences"] = []
    assert plan_tier_labels("low", VALUES, [pods, orphan]) == []


def _policy() -> Any:
    return policy(
        TeamBuilder("team-a").gpus(8).budget(10).namespaces("team-a").tier("normal").obj(),
        TeamBuilder("team-b").gpus(4).namespaces("team-b", "team-b2").tier("high").obj(),
    )


@pytest.mark.parametrize(
    ("used_hours", "level", "tier"),
    [
        (0.0, BudgetLevel.OK, "normal"),
        (8.5, BudgetLevel.NOTIFY, "normal"),
        (10.5, BudgetLevel.LOWER_TIER, "low"),
        (12.5, BudgetLevel.HOLD, "low"),
    ],
)
def test_only_pending_work_of_each_team_follows_its_budget(
    used_hours: float, level: BudgetLevel, tier: str
) -> None:
    pol = _policy()
    gates = plan_all_gates(
        pol,
        {"team-a": Observation()},
        {"team-a": TeamUsage(period_gpu_seconds=used_hours * HOUR)},
    )
    assert gates["team-a"].level == level
    work = [
        workload("a-pending", "team-a", "normal"),
        workload("a-running", "team-a", "normal", reserved=True),
        workload("b-pending", "team-b2"),
        workload("elsewhere", "other-team"),
    ]
    labels = plan_policy_tier_labels(pol, gates, VALUES, work)
    got = {(label.name, label.priority_class) for label in labels}
    want = {("b-pending", "high")} | ({("a-pending", "low")} if tier == "low" else set())
    assert got == want


def test_the_policys_own_tier_values_win_over_what_the_cluster_listed() -> None:
    """Just applied: a stale listing of a tier's value must not decide."""
    pol = _policy()
    gates = plan_all_gates(pol, {}, {"team-a": TeamUsage(period_gpu_seconds=10.5 * HOUR)})
    stale = {"normal": 1, "low": 10}  # "normal" listed below "low"
    labels = plan_policy_tier_labels(pol, gates, stale, [workload("a", "team-a", "normal")])
    assert [(label.name, label.priority_class) for label in labels] == [("a", "low")]


def test_no_label_names_a_class_the_cluster_does_not_have_yet() -> None:
    """The first sync: the tiers' WorkloadPriorityClasses are applied after the labels."""
    pol = _policy()
    gates = plan_all_gates(pol, {}, {})
    work = [workload("a", "team-a"), workload("b", "team-b")]
    labels = plan_policy_tier_labels(pol, gates, {"normal": 100}, work)
    assert [(label.name, label.priority_class) for label in labels] == [("a", "normal")]


def test_a_sync_labels_a_bounded_number_of_jobs_oldest_first() -> None:
    """A burst of submissions is labelled over several syncs, the oldest Workloads of
    every team first, so one sync never holds the quotas back for long."""
    pol = _policy()
    gates = plan_all_gates(pol, {}, {})
    work = []
    for i in range(30):
        for ns in ("team-a", "team-b2"):
            w = workload(f"{ns}-{i:02d}", ns)
            w["metadata"]["creationTimestamp"] = f"2026-12-05T17:{i:02d}:00Z"
            work.append(w)
    labels = plan_policy_tier_labels(pol, gates, VALUES, list(reversed(work)), limit=10)
    assert [label.name for label in labels] == [w["metadata"]["ownerReferences"][0]["name"]
                                                for w in work[:10]]  # fmt: skip


# --- a held team's waiting Slurm jobs say why (plan.policy.held) ---


def _gates_at(used_hours: float) -> Any:
    return plan_all_gates(
        _policy(), {}, {"team-a": TeamUsage(period_gpu_seconds=used_hours * HOUR)}
    )


def test_a_held_teams_waiting_jobs_get_the_reason_and_lose_it_when_the_hold_ends() -> None:
    held = _gates_at(12.5)
    reason = PREFIX + held["team-a"].notice
    jobs = [
        JobUse("team-a", False, 4, job_id=7, pending=True),  # waiting: gets it
        JobUse("team-a", True, 4, job_id=3),  # running: left alone
        JobUse("team-a", False, 4, job_id=8, pending=True, admin_comment=reason),  # says it
        JobUse(
            "team-b", False, 4, job_id=9, pending=True, admin_comment="site note"
        ),  # not held, not ours
    ]
    assert plan_hold_comments(held, jobs) == [(7, reason)]
    waiting = [JobUse("team-a", False, 4, job_id=8, pending=True, admin_comment=reason)]
    assert plan_hold_comments(_gates_at(10.5), waiting) == [(8, "")]  # back at LOWER_TIER
    assert reason == (
        "slurmkube: allocation team-a (AllocationSource fleet): "
        "120% of the budget used: new work is held"
    )
    assert "GPU-hours" in held["team-a"].reason  # the status's reason keeps the figures
