"""The planned `sacctmgr -i` commands against a real slurmdbd (24.11, MariaDB).

The reader below turns `sacctmgr -P show` back into `SlurmEntity`s so the diff
can be checked on what slurmdbd really stores: applied once, nothing is left
to change; a hand edit comes back as drift and is put back; objects slurmkube
does not own are left alone.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from slurmkube.plan.policy import SlurmEntity, compile_slurm, diff_slurm, sacctmgr_commands
from slurmkube.plan.policy.slurm_diff import SlurmChange
from slurmkube_local.local_slurm import slurm_prefix
from slurmkube_local.local_slurmdbd import LocalSlurmdbd, start_local_slurmdbd
from tests.unit.policy_builders import TeamBuilder, policy, two_teams

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def slurmdbd() -> Iterator[LocalSlurmdbd]:
    if not (slurm_prefix() / "sbin" / "slurmdbd").exists():
        pytest.fail(f"no Slurm build at {slurm_prefix()}: run `make slurm`", pytrace=False)
    with start_local_slurmdbd() as dbd:
        yield dbd


def _rows(dbd: LocalSlurmdbd, *argv: str) -> list[list[str]]:
    out = dbd.sacctmgr(["sacctmgr", "-P", "-n", "show", *argv]).stdout
    return [line.split("|") for line in out.splitlines() if line]


def _sorted_list(value: str) -> str:
    return ",".join(sorted(filter(None, value.split(","))))


def observe(dbd: LocalSlurmdbd) -> tuple[SlurmEntity, ...]:
    entities = [
        SlurmEntity(
            "qos",
            name,
            "",
            tuple(
                sorted(
                    {
                        "Description": descr,
                        "Flags": flags,
                        "GrpTRESMins": mins,
                        "Preempt": _sorted_list(preempt),
                        "Priority": priority,
                    }.items()
                )
            ),
        )
        for name, priority, preempt, mins, flags, descr in _rows(
            dbd, "qos", "format=Name,Priority,Preempt,GrpTRESMins,Flags,Description"
        )
    ]
    accounts = {a: (d, o) for a, d, o in _rows(dbd, "account", "format=Account,Descr,Org")}
    for account, user, share, grptres, qos, default in _rows(
        dbd, "assoc", "format=Account,User,Fairshare,GrpTRES,QOS,DefaultQOS"
    ):
        if user:
            entities.append(SlurmEntity("user", user, account))
            continue
        descr, org = accounts[account]
        attrs = {
            "DefaultQOS": default,
            "Description": descr,
            "Fairshare": share,
            "GrpTRES": grptres,
            "Organization": org,
            "QOS": _sorted_list(qos),
        }
        entities.append(SlurmEntity("account", account, "", tuple(sorted(attrs.items()))))
    return tuple(e for e in entities if e.name != "root" and e.account != "root")


def apply(dbd: LocalSlurmdbd, changes: tuple[SlurmChange, ...]) -> None:
    for argv in sacctmgr_commands(changes):
        dbd.sacctmgr(argv)


def test_planned_commands_build_the_policy_and_a_second_plan_is_empty(
    slurmdbd: LocalSlurmdbd,
) -> None:
    desired = compile_slurm(two_teams()).entities
    apply(slurmdbd, diff_slurm(desired, observe(slurmdbd)))
    assert diff_slurm(desired, observe(slurmdbd)) == ()
    shown = {(r[0], r[1]): r for r in _rows(slurmdbd, "assoc", "format=Account,User,GrpTRES")}
    assert shown[("team-a", "")][2] == "gres/gpu=8"
    assert ("team-a", "alice") in shown


def test_a_hand_edit_is_drift_and_is_put_back(slurmdbd: LocalSlurmdbd) -> None:
    desired = compile_slurm(two_teams()).entities
    apply(slurmdbd, diff_slurm(desired, observe(slurmdbd)))
    slurmdbd.sacctmgr(
        [
            "sacctmgr",
            "-i",
            "modify",
            "account",
            "where",
            "Name=team-a",
            "set",
            "GrpTRES=gres/gpu=64",
        ]
    )
    (change,) = diff_slurm(desired, observe(slurmdbd), last_applied=desired)
    assert change.drift and change.changed == (("GrpTRES", "gres/gpu=64", "gres/gpu=8"),)
    apply(slurmdbd, (change,))
    assert diff_slurm(desired, observe(slurmdbd)) == ()


def test_a_removed_team_goes_and_foreign_accounts_stay(slurmdbd: LocalSlurmdbd) -> None:
    apply(slurmdbd, diff_slurm(compile_slurm(two_teams()).entities, observe(slurmdbd)))
    slurmdbd.sacctmgr(["sacctmgr", "-i", "add", "account", "Name=physics", "Description=dept"])
    slurmdbd.sacctmgr(["sacctmgr", "-i", "add", "user", "Name=zoe", "Account=physics"])
    after = compile_slurm(policy(TeamBuilder("team-b").gpus(4).users("carol").obj())).entities
    apply(slurmdbd, diff_slurm(after, observe(slurmdbd)))
    observed = {e.key for e in observe(slurmdbd)}
    assert ("account", "team-a", "") not in observed
    assert ("qos", "budget-team-a", "") not in observed
    assert {("account", "physics", ""), ("user", "zoe", "physics")} <= observed
    assert diff_slurm(after, observe(slurmdbd)) == ()
