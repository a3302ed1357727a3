"""Applying node health's actions: the order, what each step sends, a failed step
stopping only its own node, resume only of a health drain, the check job and its
reservation, and the wiring's pure parts (rule keys, fingerprints, lending)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

import pytest

from slurmkube.api import well_known as wk
from slurmkube.api.grammar import InvalidValue
from slurmkube.controllers.health import rule_keys
from slurmkube.controllers.health_apply import (
    CHECK_SCRIPT,
    HealthTarget,
    apply_health,
    check_job,
    check_reservation,
)
from slurmkube.lending.model import SlurmState, fold_slurm_state
from slurmkube.plan.health_model import ActionKind, HealthAction, NodeMemory
from slurmkube.slurm.arguments import submission
from slurmkube.slurm.errors import SlurmRejected
from slurmkube.slurm.models import (
    Job,
    JobSubmission,
    Node,
    NodeStateChange,
    ReservationFlag,
    ReservationRequest,
)
from slurmkube.topology.fleet import node_fingerprint
from tests.unit.test_health_plan import XID, N, plan


def slurm_node(name: str, state: set[str], reason: str = "", gpus: int = 4) -> Node:
    return Node(name, frozenset(state), "IDLE", reason, gpus=gpus, partitions=("gpu",))


@dataclass
class FakeRest:
    """What apply_health calls on a RestClient, recorded in order."""

    nodes: dict[str, Node] = field(default_factory=dict)
    jobs: list[Job] = field(default_factory=list)
    calls: list[tuple[str, ...]] = field(default_factory=list)
    refuse: set[str] = field(default_factory=set)  # operations that raise SlurmRejected
    user: str = "slurm"

    def _call(self, *call: str) -> None:
        self.calls.append(call)
        if call[0] in self.refuse:
            raise SlurmRejected(f"{call[0]} refused", operation=call[0])

    def update_node_state(
        self, name: str, state: NodeStateChange, reason: str | None = None
    ) -> None:
        self._call("state", name, state.value, reason or "")

    def list_jobs(self, states: Collection[str]) -> tuple[Job, ...]:
        return tuple(self.jobs)

    def requeue_job(self, job_id: int) -> None:
        self._call("requeue", str(job_id))

    def create_reservation(self, request: ReservationRequest) -> None:
        self._call("reserve", request.name)

    def get_reservation(self, name: str) -> None:
        self.calls.append(("get-reservation", name))

    def get_node(self, name: str) -> Node:
        return self.nodes[name]

    def submit_job(self, job: JobSubmission) -> int:
        self._call("submit", job.name, job.node)
        return 42

    def delete_reservation(self, name: str) -> None:
        self._call("release", name)


@dataclass
class FakeKube:
    taints: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    stale: bool = False

    def get(self, api_version: str, kind: str, name: str, namespace: None) -> dict[str, Any]:
        return {"metadata": {"resourceVersion": "7"}, "spec": {"taints": self.taints[name]}}

    def set_node_taints(self, name: str, taints: Sequence[dict[str, str]], rv: str) -> bool:
        if self.stale:
            return False
        self.taints[name] = list(taints)
        return True


def target(rest: FakeRest, kube: FakeKube) -> HealthTarget:
    return HealthTarget(cast(Any, kube), cast(Any, rest), "ns", "c", rest.nodes, 300)


def job(job_id: int, node: str, name: str = "train") -> Job:
    return Job(job_id, name, "alice", frozenset({"RUNNING"}), "gpu", 1, 1, nodes=(node,))


def test_fatal_node_is_drained_then_its_jobs_requeued_then_tainted() -> None:
    rest = FakeRest(jobs=[job(1, "g"), job(2, "other"), job(3, "g", "slurmkube-check-g")])
    kube = FakeKube(taints={"g": [{"key": "admin", "effect": "NoSchedule"}]})
    applied = apply_health(target(rest, kube), plan([N("g", busy=True).sick(XID)]))
    assert rest.calls == [
        ("state", "g", "DRAIN", "slurmkube:health: fatal condition GpuXidError True"),
        ("requeue", "1"),
    ]
    assert kube.taints["g"] == [
        {"key": "admin", "effect": "NoSchedule"},
        {"key": wk.TAINT_UNHEALTHY, "effect": "NoSchedule"},
    ]
    assert applied.done == [
        (ActionKind.DRAIN, "g"),
        (ActionKind.REQUEUE, "g"),
        (ActionKind.TAINT, "g"),
    ]


def test_a_refused_requeue_still_lets_the_node_be_tainted() -> None:
    rest = FakeRest(jobs=[job(1, "g")], refuse={"requeue"})
    kube = FakeKube(taints={"g": []})
    applied = apply_health(target(rest, kube), plan([N("g", busy=True).sick(XID)]))
    assert applied.failed == set()
    assert kube.taints["g"] == [{"key": wk.TAINT_UNHEALTHY, "effect": "NoSchedule"}]


def test_a_failed_step_stops_that_node_only() -> None:
    rest = FakeRest(refuse={"state"})
    kube = FakeKube(taints={"a": [], "b": []})
    applied = apply_health(target(rest, kube), plan([N("a").sick(XID), N("b").sick(XID)]))
    assert applied.failed == {"a", "b"}
    assert kube.taints == {"a": [], "b": []}  # no taint after a failed drain


def test_a_node_changed_under_the_taint_write_is_left_for_the_next_pass() -> None:
    kube = FakeKube(taints={"a": []}, stale=True)
    applied = apply_health(target(FakeRest(), kube), plan([N("a").sick(XID)]))
    assert applied.failed == {"a"}


def recovering(reason: str) -> tuple[FakeRest, FakeKube, Any]:
    rest = FakeRest(nodes={"c": slurm_node("c", {"IDLE", "DRAIN"}, reason)})
    kube = FakeKube(taints={"c": [{"key": wk.TAINT_UNHEALTHY, "effect": "NoSchedule"}]})
    memory = {"c": NodeMemory(sick_since=900.0, acted_at=900.0, failures=(900.0,))}
    return rest, kube, plan([N("c").drained(reason)], memory)


def test_recovery_reserves_then_undrains_then_submits_the_check() -> None:
    rest, kube, p = recovering("slurmkube:health: fatal condition GpuXidError True")
    applied = apply_health(target(rest, kube), p)
    assert rest.calls == [
        ("reserve", "slurmkube-check-c"),
        ("state", "c", "UNDRAIN", ""),
        ("submit", "slurmkube-check-c", "c"),
    ]
    assert applied.submitted == {"c": 42}


def test_resume_reads_the_node_again_and_leaves_an_admins_new_drain() -> None:
    rest, kube, p = recovering("slurmkube:health: fatal condition GpuXidError True")
    rest.nodes["c"] = slurm_node("c", {"IDLE", "DRAIN"}, "admin: RMA")  # drained since the read
    apply_health(target(rest, kube), p)
    assert ("state", "c", "UNDRAIN", "") not in rest.calls


def test_an_existing_check_reservation_is_reused() -> None:
    rest, kube, p = recovering("slurmkube:health: fatal condition GpuXidError True")
    rest.refuse = {"reserve"}
    applied = apply_health(target(rest, kube), p)
    assert ("get-reservation", "slurmkube-check-c") in rest.calls
    assert applied.submitted == {"c": 42}


def test_check_job_asks_for_the_nodes_gpus_in_its_partitions_for_the_timeout() -> None:
    action = HealthAction(ActionKind.RUN_CHECK, "g", reservation="slurmkube-check-g")
    made = check_job(action, slurm_node("g", {"IDLE"}, gpus=4), 601)
    assert (made.gpus, made.partitions, made.time_limit_minutes) == (4, ("gpu",), 11)
    assert made.script == CHECK_SCRIPT.format(reservation="slurmkube-check-g", gpus=4)
    assert "[ \"${SLURM_JOB_RESERVATION:-}\" = 'slurmkube-check-g' ]" in made.script
    assert check_job(action, None, 10).time_limit_minutes == 1


def test_check_reservation_is_the_checks_users_alone_and_outlives_the_check() -> None:
    action = HealthAction(ActionKind.RESERVE, "g", reservation="slurmkube-check-g")
    request = check_reservation(action, "slurm", 300)
    assert request.nodes == ("g",)
    assert request.users == ("slurm",)
    assert request.flags == frozenset({ReservationFlag.IGNORE_JOBS})
    assert request.duration is not None and request.duration > timedelta(seconds=300)


def test_submission_pins_one_node_inside_the_reservation() -> None:
    desc = submission(JobSubmission("chk", "g-1", "chk", "#!/bin/sh\ntrue\n", 5, 4, ("a", "b")))
    assert desc["required_nodes"] == ["g-1"]
    assert (desc["minimum_nodes"], desc["maximum_nodes"]) == (1, 1)
    assert desc["reservation"] == "chk"
    assert desc["tres_per_node"] == "gres/gpu:4"
    assert desc["partition"] == "a,b"
    assert desc["time_limit"] == {"set": True, "infinite": False, "number": 5}
    assert "tres_per_node" not in submission(JobSubmission("chk", "g", "chk", "x"))


@pytest.mark.parametrize(
    "job",
    [
        JobSubmission("bad name", "g", "chk", "x"),
        JobSubmission("chk", "g;rm", "chk", "x"),
        JobSubmission("chk", "g", "chk", "x", time_limit_minutes=0),
        JobSubmission("chk", "g", "chk", "x", gpus=-1),
        JobSubmission("chk", "g", "chk", "x", partitions=("a b",)),
    ],
)
def test_submission_refuses_values_slurm_would_misread(job: JobSubmission) -> None:
    with pytest.raises(InvalidValue):
        submission(job)


def test_rule_keys_are_the_condition_types_and_taint_keys_rules_read() -> None:
    spec = {
        "health": {
            "rules": [
                {"condition": {"type": "GpuXidError"}, "severity": "fatal"},
                {"taint": {"key": "nvidia.com/gpu-error"}, "severity": "drain"},
            ]
        }
    }
    assert rule_keys(spec) == {"GpuXidError", "nvidia.com/gpu-error"}
    assert rule_keys({}) == frozenset()


def node_raw(conditions: list[tuple[str, str, str]], taints: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "metadata": {"name": "g"},
        "spec": {"taints": [{"key": k, "effect": "NoSchedule"} for k in taints]},
        "status": {
            "conditions": [
                {"type": t, "status": s, "lastHeartbeatTime": beat} for t, s, beat in conditions
            ]
        },
    }


@pytest.mark.parametrize(
    ("before", "after", "changed"),
    [
        (node_raw([("Xid", "False", "1")]), node_raw([("Xid", "False", "2")]), False),
        (node_raw([("Xid", "False", "1")]), node_raw([("Xid", "True", "1")]), True),
        (node_raw([("Other", "False", "1")]), node_raw([("Other", "True", "1")]), False),
        (node_raw([]), node_raw([], ["nvidia.com/gpu-error"]), True),
        (node_raw([]), node_raw([], ["unrelated"]), False),
    ],
)
def test_fingerprint_moves_only_for_signals_a_rule_reads(
    before: dict[str, Any], after: dict[str, Any], changed: bool
) -> None:
    keys = {"Xid", "nvidia.com/gpu-error"}
    moved = node_fingerprint(before, signal_keys=keys) != node_fingerprint(after, signal_keys=keys)
    assert moved == changed
    # Without health keys (the cluster reconcile's digest), none of them counts.
    assert node_fingerprint(before) == node_fingerprint(after)


@pytest.mark.parametrize(
    ("reason", "want"),
    [
        ("slurmkube: slurmd pod leaving", SlurmState.IDLE),
        ("slurmkube:health: fatal condition GpuXidError True", SlurmState.DOWN),
        ("RMA", SlurmState.DOWN),
    ],
)
def test_lending_never_lends_a_node_under_a_health_drain(reason: str, want: SlurmState) -> None:
    state = fold_slurm_state(
        has_slurmd_pod=True,
        known=True,
        busy=False,
        responding=True,
        drain=True,
        drained_by_us=wk.is_ours(reason),
        health_drain=wk.is_health_drain(reason),
    )
    assert state == want
