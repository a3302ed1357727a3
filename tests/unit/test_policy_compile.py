"""A policy -> Slurm objects, their sacctmgr changes, and Kueue objects."""

from __future__ import annotations

import re
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from slurmkube.api.grammar import InvalidValue
from slurmkube.plan.policy import (
    KueueGate,
    PolicyError,
    SlurmEntity,
    SlurmGate,
    compile_kueue,
    compile_slurm,
    diff_slurm,
    kueue_configuration,
    sacctmgr_commands,
)
from slurmkube.plan.policy.shares import nominal_quotas
from slurmkube.plan.policy.slurm_diff import SlurmChange
from tests.unit.policy_builders import TeamBuilder, policy, teams_with_users, two_teams


def _by_key(entities: tuple[SlurmEntity, ...]) -> dict[tuple[str, str, str], SlurmEntity]:
    return {e.key: e for e in entities}


def test_each_team_gets_an_account_with_fair_share_and_gpu_cap() -> None:
    slurm = _by_key(compile_slurm(two_teams()).entities)
    a = slurm[("account", "team-a", "")]
    assert (a.attr("Fairshare"), a.attr("GrpTRES")) == ("2", "gres/gpu=8")
    assert (a.attr("QOS"), a.attr("DefaultQOS")) == ("budget-team-a", "budget-team-a")
    b = slurm[("account", "team-b", "")]
    assert (b.attr("GrpTRES"), b.attr("QOS")) == ("gres/gpu=4", "tier-normal")
    assert {k for k in slurm if k[0] == "user"} == {
        ("user", "alice", "team-a"),
        ("user", "bob", "team-a"),
        ("user", "carol", "team-b"),
    }


def test_budget_qos_caps_gpu_minutes_at_the_grace_and_never_decays() -> None:
    qos = _by_key(compile_slurm(two_teams()).entities)[("qos", "budget-team-a", "")]
    assert qos.attr("GrpTRESMins") == f"gres/gpu={5000 * 60 * 12 // 10}"
    assert qos.attr("Flags") == "NoDecay"
    assert qos.attr("Priority") == "1000"  # tier high


def test_carry_over_raises_the_budget_by_at_most_half_the_base() -> None:
    entities = _by_key(compile_slurm(two_teams(), carried_gpu_hours={"team-a": 4000}).entities)
    assert entities[("qos", "budget-team-a", "")].attr("GrpTRESMins") == f"gres/gpu={7500 * 72}"


def test_tiers_preempt_only_lower_tiers() -> None:
    slurm = _by_key(compile_slurm(two_teams()).entities)
    preempt = {k[1]: e.attr("Preempt") for k, e in slurm.items() if k[0] == "qos"}
    assert preempt == {
        "tier-high": "tier-low,tier-normal",
        "budget-team-a": "tier-low,tier-normal",
        "tier-normal": "tier-low",
        "tier-low": "",
    }


def test_slurm_and_kueue_decay_usage_with_one_half_life() -> None:
    p = policy(TeamBuilder("a").obj(), halfLifeHours=36)
    config = dict(compile_slurm(p).config)
    assert config["PriorityDecayHalfLife"] == "1-12:00:00"
    fair = kueue_configuration(p)["admissionFairSharing"]
    assert fair["usageHalfLifeTime"] == "36h"
    assert fair["resourceWeights"] == {"nvidia.com/gpu": 1.0, "cpu": 0.0, "memory": 0.0}
    assert config["AccountingStorageEnforce"] == "associations,limits,qos,safe"
    assert config["PriorityType"] == "priority/multifactor"


def test_gates_set_the_association_cap_and_the_tier() -> None:
    gates = {"team-a": SlurmGate(grp_tres_gpus=3, tier="normal")}
    slurm = _by_key(compile_slurm(two_teams(), gates=gates).entities)
    assert slurm[("account", "team-a", "")].attr("GrpTRES") == "gres/gpu=3"
    assert slurm[("qos", "budget-team-a", "")].attr("Priority") == "100"
    assert slurm[("qos", "tier-high", "")].attr("Preempt") == "budget-team-a,tier-low,tier-normal"


def test_from_nothing_everything_is_added_in_an_order_sacctmgr_accepts() -> None:
    changes = diff_slurm(compile_slurm(two_teams()).entities, ())
    assert {c.action for c in changes} == {"add"}
    kinds = [c.entity.kind for c in changes]
    assert kinds == sorted(kinds, key=["qos", "account", "user"].index)
    created: set[str] = set()
    for change in changes:
        if change.entity.kind == "qos":
            assert set(filter(None, (change.entity.attr("Preempt") or "").split(","))) <= created
            created.add(change.entity.name)


def test_applying_the_same_policy_twice_changes_nothing() -> None:
    desired = compile_slurm(two_teams()).entities
    assert diff_slurm(desired, desired, last_applied=desired) == ()


def _with(entity: SlurmEntity, **attrs: str) -> SlurmEntity:
    merged = {**dict(entity.attrs), **attrs}
    return SlurmEntity(entity.kind, entity.name, entity.account, tuple(sorted(merged.items())))


def test_an_allocation_change_is_a_modify_not_drift() -> None:
    before = compile_slurm(two_teams()).entities
    after = compile_slurm(two_teams(), gates={"team-b": SlurmGate(2, "normal")}).entities
    (change,) = diff_slurm(after, before, last_applied=before)
    assert (change.action, change.entity.name, change.drift) == ("modify", "team-b", False)
    assert change.changed == (("GrpTRES", "gres/gpu=4", "gres/gpu=2"),)


def test_a_hand_edit_is_reported_as_drift_and_put_back() -> None:
    desired = compile_slurm(two_teams()).entities
    observed = tuple(
        _with(e, GrpTRES="gres/gpu=64") if e.key == ("account", "team-a", "") else e
        for e in desired
    )
    (change,) = diff_slurm(desired, observed, last_applied=desired)
    assert change.drift and change.action == "modify"
    assert sacctmgr_commands([change]) == [
        ["sacctmgr", "-i", "modify", "account", "where", "Name=team-a", "set", "GrpTRES=gres/gpu=8"]
    ]
    assert change.describe().startswith("drift: modify account team-a")


def test_a_user_added_by_hand_to_a_managed_account_is_removed_as_drift() -> None:
    desired = compile_slurm(two_teams()).entities
    intruder = SlurmEntity("user", "mallory", "team-a")
    (change,) = diff_slurm(desired, (*desired, intruder), last_applied=desired)
    assert (change.action, change.drift) == ("delete", True)
    assert sacctmgr_commands([change]) == [
        ["sacctmgr", "-i", "delete", "user", "where", "Name=mallory", "Account=team-a"]
    ]


def test_objects_slurmkube_does_not_own_are_never_touched() -> None:
    desired = compile_slurm(two_teams()).entities
    foreign = (
        SlurmEntity("account", "physics", "", (("Description", "physics dept"),)),
        SlurmEntity("user", "zoe", "physics"),
        SlurmEntity("qos", "normal", "", (("Description", "Normal QOS default"),)),
    )
    assert diff_slurm(desired, (*desired, *foreign)) == ()


def test_a_removed_team_is_deleted_users_first_then_account_then_qos() -> None:
    before = compile_slurm(two_teams()).entities
    after = compile_slurm(policy(TeamBuilder("team-b").gpus(4).users("carol").obj())).entities
    deletes = [c for c in diff_slurm(after, before) if c.action == "delete"]
    assert [(c.entity.kind, c.entity.name) for c in deletes] == [
        ("user", "alice"),
        ("user", "bob"),
        ("account", "team-a"),
        ("qos", "budget-team-a"),
    ]


def _teams_with(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[SlurmEntity, ...]:
    return compile_slurm(teams_with_users(a, b)).entities


def test_a_users_default_account_moves_before_its_association_goes() -> None:
    """Slurm refuses to delete a user's default account while another association is left."""
    before = _teams_with(("grace",), ("grace",))
    # Leaving team-a, the default: the default moves to team-b first.
    argvs = sacctmgr_commands(
        diff_slurm(_teams_with((), ("grace",)), before, None, {"grace": "team-a"})
    )
    assert argvs == [
        ["sacctmgr", "-i", "modify", "user", "where", "Name=grace", "set", "DefaultAccount=team-b"],
        ["sacctmgr", "-i", "delete", "user", "where", "Name=grace", "Account=team-a"],
    ]
    # Leaving both: the default association is deleted last, nothing to move to.
    argvs = sacctmgr_commands(diff_slurm(_teams_with((), ()), before, None, {"grace": "team-a"}))
    assert [a[-1] for a in argvs] == ["Account=team-b", "Account=team-a"]
    # Moving from team-a to team-b: added, made the default, then the old one deleted.
    only_a = _teams_with(("grace",), ())
    argvs = sacctmgr_commands(
        diff_slurm(_teams_with((), ("grace",)), only_a, None, {"grace": "team-a"})
    )
    assert [a[2] for a in argvs if "grace" in " ".join(a)] == ["add", "modify", "delete"]
    # Leaving a team that is not the default: nothing moves.
    changes = diff_slurm(_teams_with(("grace",), ()), before, None, {"grace": "team-a"})
    assert [c.action for c in changes] == ["delete"]


def test_commands_are_argument_lists_with_names_in_name_fields() -> None:
    commands = sacctmgr_commands(diff_slurm(compile_slurm(two_teams()).entities, ()))
    assert ["sacctmgr", "-i", "add", "user", "Name=alice", "Account=team-a"] in commands
    assert all(isinstance(c, list) and all(isinstance(a, str) for a in c) for c in commands)


def test_clearing_a_preempt_list_sends_an_empty_value() -> None:
    qos = SlurmEntity("qos", "tier-low", "", (("Description", "slurmkube"), ("Preempt", "")))
    change = SlurmChange("modify", qos, (("Preempt", "tier-x", ""),))
    assert sacctmgr_commands([change])[0][-1] == "Preempt="


_SAFE = re.compile(r"[A-Za-z0-9_.,/:=-]+")


@settings(max_examples=300, deadline=None)
@given(account=st.text(max_size=40), user=st.text(max_size=40))
def test_no_name_can_add_a_key_or_a_command(account: str, user: str) -> None:
    try:
        p = policy(TeamBuilder(account).users(user).obj())
    except (PolicyError, InvalidValue):
        return
    for argv in sacctmgr_commands(diff_slurm(compile_slurm(p).entities, ())):
        for argument in argv:
            assert _SAFE.fullmatch(argument) or argument == "-i", argument
        names = [a for a in argv if a.startswith(("Name=", "Account="))]
        assert all(a.count("=") == 1 for a in names)


def _kueue(**gates: KueueGate) -> dict[tuple[str, str, str], dict[str, Any]]:
    objects = compile_kueue(two_teams(), gates)
    return {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects
    }


def test_kueue_gets_a_cohort_a_cluster_queue_per_team_and_local_queues() -> None:
    objects = _kueue()
    assert ("Cohort", "", "fleet") in objects
    assert {k for k in objects if k[0] == "LocalQueue"} == {
        ("LocalQueue", "team-a", "team-a"),
        ("LocalQueue", "team-b", "team-b"),
    }
    spec = objects[("ClusterQueue", "", "team-a")]["spec"]
    assert spec["cohortName"] == "fleet"
    assert spec["fairSharing"] == {"weight": "2"}
    quota, *unmetered = spec["resourceGroups"][0]["flavors"][0]["resources"]
    assert spec["resourceGroups"][0]["coveredResources"] == ["nvidia.com/gpu", "cpu", "memory"]
    assert unmetered == [
        {"name": "cpu", "nominalQuota": "1M"},
        {"name": "memory", "nominalQuota": "1Pi"},
    ]
    assert quota == {
        "name": "nvidia.com/gpu",
        "nominalQuota": 8,
        "borrowingLimit": 0,
        "lendingLimit": 0,
    }
    assert spec["namespaceSelector"]["matchExpressions"][0]["values"] == ["team-a"]


def test_a_team_that_may_borrow_lends_and_borrows_only_up_to_its_gpus() -> None:
    spec = _kueue()[("ClusterQueue", "", "team-b")]["spec"]
    quota = spec["resourceGroups"][0]["flavors"][0]["resources"][0]
    # Default capacity (the teams' gpus together): its nominal is its own 4, no lendingLimit.
    assert quota == {"name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 0}


# (kueueGPUs, teams as (name, gpus, weight, borrowing)) -> name: (nominal, borrowing limit)
NOMINAL_TABLE: dict[
    str, tuple[int | None, list[tuple[str, int, int, bool]], dict[str, tuple[int, int]]]
] = {
    "unset capacity: each team's own gpus": (
        None,
        [("a", 8, 2, True), ("b", 4, 1, True)],
        {"a": (8, 0), "b": (4, 0)},
    ),
    "2:1 of 12, both may use the fleet": (
        12,
        [("a", 12, 2, True), ("b", 12, 1, True)],
        {"a": (8, 4), "b": (4, 8)},
    ),
    "largest remainder: 2:1 of 16 is 11 + 5": (
        16,
        [("a", 16, 2, True), ("b", 16, 1, True)],
        {"a": (11, 5), "b": (5, 11)},
    ),
    "remainder ties go by name": (
        5,
        [("b", 5, 1, True), ("a", 5, 1, True)],
        {"a": (3, 2), "b": (2, 3)},
    ),
    "a team capped below its share: the rest goes to the others by weight": (
        12,
        [("a", 2, 2, True), ("b", 12, 1, True), ("c", 12, 1, True)],
        {"a": (2, 0), "b": (5, 7), "c": (5, 7)},
    ),
    "caps summing below the capacity: nominal = gpus": (
        100,
        [("a", 8, 2, False), ("b", 4, 1, False)],
        {"a": (8, 0), "b": (4, 0)},
    ),
    "a team that may not borrow keeps its share only": (
        9,
        [("a", 9, 2, False), ("b", 9, 1, True)],
        {"a": (6, 0), "b": (3, 6)},
    ),
    "zero capacity": (
        0,
        [("a", 4, 2, True), ("b", 4, 1, True)],
        {"a": (0, 4), "b": (0, 4)},
    ),
}


def _gpu_quotas(objects: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    out = {}
    for o in objects:
        if o["kind"] == "ClusterQueue":
            quota = o["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
            out[o["metadata"]["name"]] = (quota["nominalQuota"], quota["borrowingLimit"])
    return out


@pytest.mark.parametrize("case", NOMINAL_TABLE)
def test_the_cohorts_capacity_is_split_by_weight_into_nominal_quotas(case: str) -> None:
    capacity, teams, want = NOMINAL_TABLE[case]
    built = [
        (TeamBuilder(n).gpus(g).weight(w).borrowing() if b else TeamBuilder(n).gpus(g).weight(w))
        for n, g, w, b in teams
    ]
    spec = {} if capacity is None else {"kueueGPUs": capacity}
    assert _gpu_quotas(compile_kueue(policy(*(t.obj() for t in built), **spec))) == want


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(0, 64),
    teams=st.lists(st.tuples(st.integers(0, 32), st.integers(1, 5)), min_size=1, max_size=5),
)
def test_nominal_quotas_add_up_to_the_capacity_and_no_team_passes_its_gpus(
    capacity: int, teams: list[tuple[int, int]]
) -> None:
    p = policy(
        *(TeamBuilder(f"t{i}").gpus(g).weight(w).obj() for i, (g, w) in enumerate(teams)),
        kueueGPUs=capacity,
    )
    quotas = nominal_quotas(p)
    assert sum(quotas.values()) == min(capacity, sum(g for g, _ in teams))
    assert all(quotas[t.name] <= t.gpus for t in p.teams)


def test_the_gate_bounds_nominal_plus_borrowing() -> None:
    p = policy(
        TeamBuilder("a").gpus(12).weight(2).borrowing().obj(),
        TeamBuilder("b").gpus(12).weight(1).borrowing().obj(),
        kueueGPUs=12,
    )
    gates = {"a": KueueGate(10, "None", "normal"), "b": KueueGate(3, "None", "normal")}
    # a: share 8, may hold 10 -> borrows 2; b: share 4 but may hold 3 -> nominal 3, no borrowing.
    assert _gpu_quotas(compile_kueue(p, gates)) == {"a": (8, 2), "b": (3, 0)}


def test_tiers_become_workload_priority_classes() -> None:
    classes = {k[2]: o["value"] for k, o in _kueue().items() if k[0] == "WorkloadPriorityClass"}
    assert classes == {"high": 1000, "normal": 100, "low": 10}


def test_kueue_gates_bound_the_quota_and_hold() -> None:
    spec = _kueue(**{"team-a": KueueGate(2, "Hold", "normal")})[("ClusterQueue", "", "team-a")][
        "spec"
    ]
    assert spec["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == 2
    assert spec["stopPolicy"] == "Hold"


def test_a_gated_teams_queue_names_its_allocation_and_an_ungated_one_carries_nothing() -> None:
    reason = "allocation team-a (test): 12.1 of 10.0 GPU-hours this period; held"
    held = _kueue(**{"team-a": KueueGate(0, "Hold", "low", reason)})
    assert (
        held[("ClusterQueue", "", "team-a")]["metadata"]["annotations"]["slurmkube.io/budget"]
        == reason
    )
    for queue in (_kueue()[("ClusterQueue", "", "team-a")], held[("ClusterQueue", "", "team-b")]):
        assert "slurmkube.io/budget" not in queue["metadata"]["annotations"]


def test_a_team_without_namespaces_gets_no_local_queue_and_selects_no_namespace() -> None:
    objects = compile_kueue(policy(TeamBuilder("solo").obj()))
    (cq,) = [o for o in objects if o["kind"] == "ClusterQueue"]
    assert "namespaceSelector" not in cq["spec"]  # Kueue: unset selects no namespace
    assert not [o for o in objects if o["kind"] == "LocalQueue"]


def test_the_configuration_fragment_turns_kueue_fair_sharing_on() -> None:
    # config.kueue.x-k8s.io/v1beta2 has no fairSharing.enable: the section itself enables it.
    fair = kueue_configuration(two_teams())["fairSharing"]
    assert fair == {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]}
