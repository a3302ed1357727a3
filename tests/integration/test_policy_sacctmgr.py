"""The planned `sacctmgr -i` commands against a real slurmdbd (24.11, MariaDB),
through the operator's adapter (`slurm.accounting`: sacctmgr authenticated by a
JWT alone) and its reader (`plan.policy.observed`): applied once, nothing is
left to change; a hand edit comes back as drift and is put back; objects
slurmkube does not own are left alone; a token from another key is refused.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from slurmkube.plan.policy import SlurmEntity, compile_slurm, diff_slurm, sacctmgr_commands
from slurmkube.plan.policy.observed import observed_entities
from slurmkube.plan.policy.slurm_diff import SlurmChange
from slurmkube.slurm.accounting import SacctmgrClient, accounting_client_config
from slurmkube.slurm.errors import SlurmError
from slurmkube.slurm.tokens import JwtMinter
from slurmkube_local.local_slurm import slurm_prefix
from slurmkube_local.local_slurmdbd import CLUSTER, HOST, LocalSlurmdbd, start_local_slurmdbd
from tests.unit.policy_builders import TeamBuilder, policy, teams_with_users, two_teams

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def slurmdbd() -> Iterator[LocalSlurmdbd]:
    if not (slurm_prefix() / "sbin" / "slurmdbd").exists():
        pytest.fail(f"no Slurm build at {slurm_prefix()}: run `make slurm`", pytrace=False)
    with start_local_slurmdbd() as dbd:
        yield dbd


@pytest.fixture(scope="module")
def sacctmgr(slurmdbd: LocalSlurmdbd, tmp_path_factory: pytest.TempPathFactory) -> SacctmgrClient:
    """The operator's adapter: its own client config, a JWT from jwt.key, no slurm.key."""
    config = tmp_path_factory.mktemp("sacctmgr") / "slurm.conf"
    config.write_text(accounting_client_config(CLUSTER, HOST, slurmdbd.dbd_port))
    return SacctmgrClient(
        config_path=config,
        jwt=JwtMinter(slurmdbd.jwt_key, "root", lifespan=600),
        bin_dir=slurmdbd.prefix / "bin",
    )


def _rows(client: SacctmgrClient, entity: str, fields: str) -> list[list[str]]:
    return [list(r.values()) for r in client.show(entity, fields.split(","))]


def observe(client: SacctmgrClient) -> tuple[SlurmEntity, ...]:
    return observed_entities(client.show_qos(), client.show_accounts(), client.show_associations())


def apply(client: SacctmgrClient, changes: tuple[SlurmChange, ...]) -> None:
    for argv in sacctmgr_commands(changes):
        client.run(argv)


def test_planned_commands_build_the_policy_and_a_second_plan_is_empty(
    sacctmgr: SacctmgrClient,
) -> None:
    desired = compile_slurm(two_teams()).entities
    apply(sacctmgr, diff_slurm(desired, observe(sacctmgr)))
    assert diff_slurm(desired, observe(sacctmgr)) == ()
    shown = {(r[0], r[1]): r for r in _rows(sacctmgr, "assoc", "Account,User,GrpTRES")}
    assert shown[("team-a", "")][2] == "gres/gpu=8"
    assert ("team-a", "alice") in shown


def test_a_hand_edit_is_drift_and_is_put_back(sacctmgr: SacctmgrClient) -> None:
    desired = compile_slurm(two_teams()).entities
    apply(sacctmgr, diff_slurm(desired, observe(sacctmgr)))
    sacctmgr.run(
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
    (change,) = diff_slurm(desired, observe(sacctmgr), last_applied=desired)
    assert change.drift and change.changed == (("GrpTRES", "gres/gpu=64", "gres/gpu=8"),)
    apply(sacctmgr, (change,))
    assert diff_slurm(desired, observe(sacctmgr)) == ()


def test_a_removed_team_goes_and_foreign_accounts_stay(sacctmgr: SacctmgrClient) -> None:
    apply(sacctmgr, diff_slurm(compile_slurm(two_teams()).entities, observe(sacctmgr)))
    sacctmgr.run(["sacctmgr", "-i", "add", "account", "Name=physics", "Description=dept"])
    sacctmgr.run(["sacctmgr", "-i", "add", "user", "Name=zoe", "Account=physics"])
    after = compile_slurm(policy(TeamBuilder("team-b").gpus(4).users("carol").obj())).entities
    apply(sacctmgr, diff_slurm(after, observe(sacctmgr)))
    observed = {e.key for e in observe(sacctmgr)}
    assert ("account", "team-a", "") not in observed
    assert ("qos", "budget-team-a", "") not in observed
    assert {("account", "physics", ""), ("user", "zoe", "physics")} <= observed
    assert diff_slurm(after, observe(sacctmgr)) == ()


def test_a_token_from_another_key_is_refused(
    slurmdbd: LocalSlurmdbd, tmp_path_factory: pytest.TempPathFactory
) -> None:
    config = tmp_path_factory.mktemp("forged") / "slurm.conf"
    config.write_text(accounting_client_config(CLUSTER, HOST, slurmdbd.dbd_port))
    forged = SacctmgrClient(
        config_path=config,
        jwt=JwtMinter(b"x" * 32, "root", lifespan=600),
        bin_dir=slurmdbd.prefix / "bin",
    )
    with pytest.raises(SlurmError):
        forged.run(["sacctmgr", "-i", "add", "account", "Name=forged", "Description=x"])


def test_a_command_that_is_not_sacctmgr_is_refused(sacctmgr: SacctmgrClient) -> None:
    with pytest.raises(ValueError, match="not a sacctmgr command"):
        sacctmgr.run(["scontrol", "show", "config"])


def test_a_user_in_two_teams_leaves_either_or_both(sacctmgr: SacctmgrClient) -> None:
    """Slurm refuses to delete a user's default account while the user has another
    association; a member of two teams (their groups, say) can still leave either."""

    def users() -> set[tuple[str, str]]:
        return {(r[0], r[1]) for r in _rows(sacctmgr, "assoc", "Account,User") if r[1] == "grace"}

    for a, b, expected in [
        (("grace",), ("grace",), {("team-a", "grace"), ("team-b", "grace")}),
        ((), ("grace",), {("team-b", "grace")}),  # the default account goes first
        (("grace",), ("grace",), {("team-a", "grace"), ("team-b", "grace")}),
        ((), (), set()),
        (("grace",), (), {("team-a", "grace")}),
        ((), ("grace",), {("team-b", "grace")}),  # moves: added, default moved, deleted
        ((), (), set()),
    ]:
        desired = compile_slurm(teams_with_users(a, b)).entities
        defaults = sacctmgr.show_default_accounts()
        apply(sacctmgr, diff_slurm(desired, observe(sacctmgr), None, defaults))
        assert users() == expected
        assert diff_slurm(desired, observe(sacctmgr)) == ()
