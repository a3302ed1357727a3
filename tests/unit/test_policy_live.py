"""The live policy's pure parts: what slurmdbd shows, usage per team, status,
conditions and Events, Kueue ownership, and the policy's keys in slurm.conf."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkube.api.allocation_source import TeamStatus
from slurmkube.api.grammar import InvalidValue
from slurmkube.plan.cluster import Observed, plan_cluster
from slurmkube.plan.policy import compile_kueue, compile_slurm, diff_slurm, plan_all_gates
from slurmkube.plan.policy.kueue import SOURCE_LABEL, owned_by, source_label, stale
from slurmkube.plan.policy.ledger import BudgetLevel, Observation, TeamUsage
from slurmkube.plan.policy.observed import observed_entities
from slurmkube.plan.policy.slurm import slurm_config_keys
from slurmkube.plan.policy.slurm_diff import SlurmChange
from slurmkube.plan.policy.sync import SyncOutcome, policy_events, sync_conditions
from slurmkube.plan.policy.usage import JobUse, observe_teams, teams_status, workload_gpus
from slurmkube.render.slurmdbd import DatabaseCredentials
from slurmkube.slurm.accounting import accounting_client_config
from slurmkube.topology.fleet import fleet_node
from slurmkube_local.builders import bundle, nvl_fleet
from tests.unit.policy_builders import TeamBuilder, policy, two_teams


def shown(entities: Any) -> tuple[list[dict[str, str]], list[dict[str, str]], list[dict[str, str]]]:
    """What `sacctmgr show qos|account|assoc` prints for these entities (plus root)."""
    qos, accounts = [], [{"Account": "root", "Descr": "default root account", "Org": "root"}]
    assocs = [
        {"Account": "root", "User": "", "Fairshare": "1", "GrpTRES": "", "QOS": "normal",
         "DefaultQOS": ""},
        {"Account": "root", "User": "root", "Fairshare": "1", "GrpTRES": "", "QOS": "normal",
         "DefaultQOS": ""},
    ]  # fmt: skip
    for e in entities:
        a = dict(e.attrs)
        if e.kind == "qos":
            # slurmdbd lists a Preempt list in its own order.
            preempt = ",".join(reversed(a.get("Preempt", "").split(",")))
            qos.append(
                {"Name": e.name, "Priority": a["Priority"], "Preempt": preempt,
                 "GrpTRESMins": a.get("GrpTRESMins", ""), "Flags": a.get("Flags", ""),
                 "Description": a["Description"]}
            )  # fmt: skip
        elif e.kind == "account":
            accounts.append(
                {"Account": e.name, "Descr": a["Description"], "Org": a["Organization"]}
            )
            assocs.append(
                {"Account": e.name, "User": "", "Fairshare": a["Fairshare"],
                 "GrpTRES": a["GrpTRES"], "QOS": a["QOS"], "DefaultQOS": a["DefaultQOS"]}
            )  # fmt: skip
        else:
            assocs.append(
                {"Account": e.account, "User": e.name, "Fairshare": "1", "GrpTRES": "",
                 "QOS": "", "DefaultQOS": ""}
            )  # fmt: skip
    return qos, accounts, assocs


def test_what_slurmdbd_shows_of_an_applied_policy_diffs_to_nothing() -> None:
    desired = compile_slurm(two_teams()).entities
    assert diff_slurm(desired, observed_entities(*shown(desired))) == ()


def test_root_and_its_users_are_never_compared() -> None:
    keys = {e.key for e in observed_entities(*shown(()))}
    assert keys == set()


def test_the_user_root_in_a_teams_account_is_the_teams() -> None:
    """A team may list root (commands in its pods run as root): that association is
    seen, so it is not added again on every sync ("Nothing added")."""
    desired = compile_slurm(
        policy(TeamBuilder("team-a").gpus(8).users("alice", "root").namespaces("team-a").obj())
    ).entities
    assert any(e.kind == "user" and e.name == "root" for e in desired)
    assert diff_slurm(desired, observed_entities(*shown(desired))) == ()


def workload(namespace: str, gpus: int, count: int = 1, **conditions: bool) -> dict[str, Any]:
    return {
        "metadata": {"name": f"w{gpus}", "namespace": namespace},
        "spec": {
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "template": {
                        "spec": {
                            "containers": [{"resources": {"limits": {"nvidia.com/gpu": gpus}}}]
                        }
                    },
                }
            ]
        },
        "status": {
            "conditions": [
                {"type": k, "status": "True" if v else "False"} for k, v in conditions.items()
            ]
        },
    }


def test_workload_gpus_count_every_pod_of_every_pod_set() -> None:
    assert workload_gpus(workload("team-a", 2, count=3)) == 6


@pytest.mark.parametrize(
    ("jobs", "workloads", "expected"),
    [
        pytest.param(
            [
                JobUse("team-a", True, 4),
                JobUse("team-a", False, 2),
                JobUse("team-a", False, 3),
                JobUse("physics", True, 8),
            ],
            [],
            {"team-a": Observation(slurm_gpus=4, slurm_pending_gpus=5, slurm_smallest_pending=2)},
            id="slurm jobs by account, others ignored",
        ),
        pytest.param(
            None,
            [
                workload("team-a", 2, QuotaReserved=True),
                workload("team-a", 1),
                workload("team-a", 8, QuotaReserved=True, Finished=True),
                workload("elsewhere", 8, QuotaReserved=True),
            ],
            {"team-a": Observation(kueue_gpus=2, kueue_pending_gpus=1, kueue_smallest_pending=1)},
            id="kueue workloads by namespace, finished ones count for nothing",
        ),
    ],
)
def test_usage_is_counted_per_team_on_each_scheduler(
    jobs: list[JobUse] | None, workloads: list[dict[str, Any]], expected: dict[str, Observation]
) -> None:
    observed = observe_teams(two_teams(), jobs, workloads)
    assert {k: v for k, v in observed.items() if v != Observation()} == expected


def test_team_status_is_what_the_crd_describes() -> None:
    p = two_teams()
    obs = {"team-a": Observation(slurm_gpus=3, kueue_gpus=2)}
    ledgers = {"team-a": TeamUsage(period_gpu_seconds=3600 * 4500)}
    gates = plan_all_gates(p, obs, ledgers)
    teams = [TeamStatus.model_validate(t) for t in teams_status(p, obs, ledgers, gates)]
    a = next(t for t in teams if t.name == "team-a")
    assert (a.gpus, a.headroom, a.usage.slurm_gpus, a.usage.kueue_gpus) == (8, 3, 3, 2)
    assert a.budget_level == "NOTIFY" and "allocation team-a" in a.reason
    assert a.gates.slurm_grp_tres + a.gates.kueue_nominal_quota == 8


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (SyncOutcome(teams=2), {"SourceReachable": True, "Synced": True}),
        (
            SyncOutcome(source_error=("Unreachable", "spec.http.url: refused")),
            {"SourceReachable": False, "Synced": False},
        ),
        (SyncOutcome(slurm_error="boom"), {"SourceReachable": True, "Synced": False}),
    ],
)
def test_conditions_say_whether_the_source_was_read_and_both_schedulers_hold_it(
    outcome: SyncOutcome, expected: dict[str, bool]
) -> None:
    conditions = sync_conditions(outcome)
    assert {c.type: c.status for c in conditions} == expected
    if outcome.source_error:
        assert "spec.http.url" in conditions[0].message


def test_an_event_when_a_budget_threshold_is_crossed_not_while_it_stays() -> None:
    p = two_teams()
    used = {"team-a": TeamUsage(period_gpu_seconds=3600 * 5100)}
    gates = plan_all_gates(p, {}, used)
    (event,) = policy_events({}, gates, ())
    assert event.reason == "BudgetUsedUp" and "team-a" in event.message
    assert policy_events({"team-a": BudgetLevel.LOWER_TIER}, gates, ()) == []


def test_drift_put_back_is_an_event() -> None:
    entity = compile_slurm(two_teams()).entities[0]
    events = policy_events({}, {}, (SlurmChange("modify", entity, drift=True),))
    assert [e.reason for e in events] == ["DriftReverted"]


@given(st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,250}[a-z0-9])?", fullmatch=True))
def test_the_source_label_is_a_label_value(name: str) -> None:
    value = source_label("slurmkube", name)
    assert len(value) <= 63 and value[-1].isalnum()


def test_a_removed_teams_queues_are_stale_and_others_stay() -> None:
    label = source_label("slurmkube", "fleet")
    before = owned_by(compile_kueue(two_teams()), label)
    after = owned_by(compile_kueue(policy(TeamBuilder("team-b").namespaces("team-b").obj())), label)
    assert all(o["metadata"]["labels"][SOURCE_LABEL] == label for o in after)
    assert stale(after, before) == [
        ("ClusterQueue", "team-a", None),
        ("LocalQueue", "team-a", "team-a"),
    ]


ACCOUNTING = {
    "enabled": True,
    "database": {"host": "10.250.0.1", "port": 23306, "secretName": "db-login"},
}


def slurm_conf(accounting: bool, extra: list[str] | None = None) -> str:
    b = bundle(
        block_size=2,
        extra={"accounting": ACCOUNTING if accounting else {"enabled": False}}
        | ({"extraConfig": extra} if extra else {}),
    )
    b = dataclasses.replace(
        b, policy_keys=slurm_config_keys(48), policy_source="AllocationSource fleet"
    )
    p = plan_cluster(
        Observed(
            bundle=b,
            fleet=[fleet_node(n) for n in nvl_fleet(2, 2)],
            pods=[],
            slurm_nodes=None,
            database=DatabaseCredentials("slurm", "pw") if accounting else None,
        )
    )
    if p.rendered is None:
        raise InvalidValue("plan", "", p.conditions[0].message)
    return p.rendered.files["slurm.conf"]


def test_the_policy_keys_reach_slurm_conf_with_accounting_only() -> None:
    conf = slurm_conf(accounting=True)
    for line in (
        "PriorityDecayHalfLife=2-00:00:00",
        "AccountingStorageEnforce=associations,limits,qos,safe",
        "AccountingStorageTRES=gres/gpu",
        "PreemptType=preempt/qos",
    ):
        assert f"\n{line}\n" in conf
    assert conf.count("PriorityType=") == 1
    assert "PreemptType" not in slurm_conf(accounting=False)


def test_extra_config_may_not_set_a_policy_key() -> None:
    with pytest.raises(InvalidValue, match=r"spec.extraConfig\[0\].*AllocationSource fleet"):
        slurm_conf(accounting=True, extra=["PreemptType=preempt/none"])


@pytest.mark.parametrize("host", ["db\nAuthType=none", "db host", "db#x"])
def test_the_accounting_client_config_refuses_an_injected_line(host: str) -> None:
    with pytest.raises(InvalidValue):
        accounting_client_config("local", host, 6819)


def test_a_source_read_back_from_the_api_server_with_its_status_still_loads() -> None:
    from slurmkube.plan.policy.sources import load_allocation_source
    from tests.unit.policy_builders import source

    obj = source(TeamBuilder("team-a").obj()) | {"status": {"teams": 1, "conditions": []}}
    assert load_allocation_source(obj, "test").metadata.name == "fleet"


def test_policy_status_prints_each_team_and_the_conditions() -> None:
    from slurmkube.plan.conditions import metav1_conditions
    from slurmkube.plan.policy.output import status_text

    p = two_teams()
    used = {"team-a": TeamUsage(period_gpu_seconds=3600 * 5100)}
    gates = plan_all_gates(p, {}, used)
    obj = {
        "metadata": {"name": "fleet", "namespace": "slurmkube"},
        "status": {
            "teams": 2,
            "allocations": teams_status(p, {}, used, gates),
            "conditions": metav1_conditions([], sync_conditions(SyncOutcome(teams=2)), 1, "t"),
        },
    }
    text = status_text(obj)
    assert "Synced=True Applied" in text
    assert "budget used up: new work runs at tier normal" in text
    assert any(line.split()[:2] == ["team-b", "4"] for line in text.splitlines())


def test_ledgers_sum_both_schedulers_and_restart_at_a_new_period() -> None:
    import datetime as dt

    from slurmkube.plan.policy.usage import Ledgers, advance_ledgers

    p = two_teams()  # team-a's period: 91 days from 2026-10-01
    obs = {"team-a": Observation(slurm_gpus=2, kueue_gpus=3)}
    inside = dt.datetime(2026, 10, 2, tzinfo=dt.UTC)
    ledgers = advance_ledgers(p, Ledgers({}, {}), obs, 3600, inside)
    a = ledgers.usage["team-a"]
    assert (a.slurm_period_gpu_seconds, a.kueue_period_gpu_seconds) == (7200, 10800)
    assert a.period_gpu_seconds == 18000
    next_period = inside + dt.timedelta(days=91)
    after = advance_ledgers(p, ledgers, {}, 0, next_period).usage["team-a"]
    assert after.period_gpu_seconds == 0
    assert after.decayed_gpu_seconds == pytest.approx(a.decayed_gpu_seconds)


@given(st.floats(min_value=0, max_value=1e9), st.floats(min_value=0, max_value=1e9))
def test_the_status_gives_back_the_ledger_it_reported(period_s: float, decayed_s: float) -> None:
    from slurmkube.plan.policy.usage import ledgers_from_status

    p = two_teams()
    usage = {"team-a": TeamUsage(decayed_gpu_seconds=decayed_s, period_gpu_seconds=period_s)}
    gates = plan_all_gates(p, {}, usage)
    reported = teams_status(p, {}, usage, gates)
    back, levels = ledgers_from_status(reported)
    # The status rounds GPU-hours to 3 decimals: within 1.8 GPU-seconds.
    assert back["team-a"].period_gpu_seconds == pytest.approx(period_s, abs=2)
    assert levels["team-a"] == gates["team-a"].level
