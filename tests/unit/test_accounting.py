"""Accounting: slurmdbd with an external MariaDB, its password in a Secret only."""

from __future__ import annotations

import base64

import pytest

from slurmkube.plan.cluster import plan_cluster
from slurmkube.plan.model import Observed
from slurmkube.render.slurmdbd import DatabaseCredentials
from slurmkube.topology.fleet import fleet_node
from slurmkube_local.builders import bundle, nvl_fleet

DATABASE = {"host": "10.250.0.1", "port": 23306, "secretName": "db-login"}
LOGIN = DatabaseCredentials("slurm", "s3cr!t")


def plan(
    enabled: bool = True,
    credentials: DatabaseCredentials | None = LOGIN,
    database: dict[str, object] | None = None,
):  # type: ignore[no-untyped-def]
    accounting = {"enabled": enabled, "database": database or DATABASE}
    b = bundle(block_size=2, extra={"accounting": accounting})
    return plan_cluster(
        Observed(
            bundle=b,
            fleet=[fleet_node(n) for n in nvl_fleet(2, 2)],
            pods=[],
            slurm_nodes=None,
            database=credentials if enabled else None,
        )
    )


def by_kind(p, kind: str) -> dict[str, dict[str, object]]:  # type: ignore[no-untyped-def]
    every = [p.config_map, *p.objects] if p.config_map else p.objects
    return {o["metadata"]["name"]: o for o in every if o["kind"] == kind}


def test_accounting_points_slurmctld_at_slurmdbd_and_weighs_fair_share() -> None:
    conf = plan().rendered.files["slurm.conf"]
    assert "AccountingStorageType=accounting_storage/slurmdbd\n" in conf
    assert "AccountingStorageHost=test-slurmdbd.default.svc.cluster.local\n" in conf
    assert "PriorityWeightFairshare=" in conf


def test_the_password_is_only_in_a_secret_never_in_the_config_map() -> None:
    p = plan()
    config_map = by_kind(p, "ConfigMap")["test-slurm-config"]
    assert all("s3cr!t" not in text for text in config_map["data"].values())
    secret = by_kind(p, "Secret")["test-slurmdbd-config"]
    conf = base64.b64decode(secret["data"]["slurmdbd.conf"]).decode()
    assert "StoragePass=s3cr!t\n" in conf
    assert "StorageHost=10.250.0.1\nStoragePort=23306\n" in conf
    assert "StorageUser=slurm\n" in conf


def test_slurmdbd_gets_its_config_copied_as_slurm_user_with_mode_0600() -> None:
    deployment = by_kind(plan(), "Deployment")["test-slurmdbd"]
    pod = deployment["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"][:3] == ["install", "-m", "0600"]
    assert init["securityContext"]["runAsUser"] == 401
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert "test-slurmdbd" in by_kind(plan(), "Service")


def test_a_new_password_restarts_slurmdbd() -> None:
    def conf_hash(password: str) -> str:
        p = plan(credentials=DatabaseCredentials("slurm", password))
        template = by_kind(p, "Deployment")["test-slurmdbd"]["spec"]["template"]
        return str(template["metadata"]["annotations"]["slurmkube.io/slurmdbd-config-hash"])

    assert conf_hash("one") != conf_hash("two")


@pytest.mark.parametrize("password", ["a b", "a\nPluginDir=/tmp", "a#b", 'a"b', "a\\b"])
def test_a_password_that_could_end_the_value_is_refused_without_echoing_it(
    password: str,
) -> None:
    p = plan(credentials=DatabaseCredentials("slurm", password))
    assert p.rendered is None and p.objects == ()
    (condition,) = p.conditions
    assert "Secret db-login key password" in condition.message
    assert password not in condition.message


def test_a_missing_database_secret_names_the_field_and_applies_nothing() -> None:
    p = plan(credentials=None)
    assert p.rendered is None and p.objects == ()
    assert "spec.accounting.database.secretName" in p.conditions[0].message


def test_accounting_off_removes_slurmdbd_objects() -> None:
    p = plan(enabled=False)
    assert "AccountingStorageType" not in p.rendered.files["slurm.conf"]
    assert ("v1", "Secret", "test-slurmdbd-config") in p.prune
    assert "test-slurmdbd" not in by_kind(p, "Deployment")


def test_credentials_never_show_the_password_in_a_repr() -> None:
    assert "s3cr!t" not in repr(DatabaseCredentials("slurm", "s3cr!t"))
