"""Accounting: the operator runs slurmdbd against an external MariaDB (mariadbd on
the host, reached over the pod network), slurmctld registers the cluster there,
and `sacct` shows a finished job. The database password lives in the user's
Secret and the operator's slurmdbd Secret, nowhere else.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator

import pytest

from slurmkube_e2e.accounting import accounted_cluster
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.mariadb import MariaDB
from slurmkube_e2e.operator_cluster import API, in_ctld, wait_job

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def accounted(kube: Kube, operator: None, database: MariaDB) -> Iterator[str]:
    with accounted_cluster(kube, database, "e2e-accounting") as namespace:
        yield namespace


def sacct_state(namespace: str, job: str, timeout: float = 90) -> str:
    """Job records reach slurmdbd asynchronously: poll until sacct has this one."""
    deadline = time.monotonic() + timeout
    while True:
        out = in_ctld(namespace, "sacct", "-n", "-X", "-P", "-j", job, "-o", "JobID,State")
        rows = [line.split("|") for line in out.split() if line]
        if (rows and rows[0][1] == "COMPLETED") or time.monotonic() > deadline:
            return rows[0][1] if rows else "(no record)"
        time.sleep(2)


def test_slurmctld_registers_with_slurmdbd_and_sacct_shows_the_finished_job(
    kube: Kube, accounted: str
) -> None:
    clusters = in_ctld(accounted, "sacctmgr", "-n", "-P", "show", "cluster", "format=Cluster")
    assert "local" in clusters.split()
    job = in_ctld(accounted, "sbatch", "--parsable", "-N2", "--wrap", "srun true").strip()
    wait_job(accounted, job, {"COMPLETED"})
    assert sacct_state(accounted, job) == "COMPLETED"


def test_the_database_password_is_only_in_secrets(
    kube: Kube, accounted: str, database: MariaDB
) -> None:
    config_map = kube.get("v1", "ConfigMap", "local-slurm-config", namespace=accounted)
    assert config_map is not None
    assert all(database.password not in text for text in config_map["data"].values())
    secret = kube.get("v1", "Secret", "local-slurmdbd-config", namespace=accounted)
    assert secret is not None
    conf = base64.b64decode(secret["data"]["slurmdbd.conf"]).decode()
    assert f"StoragePass={database.password}\n" in conf
    cluster = kube.get(API, "SlurmCluster", "local", namespace=accounted)
    assert cluster is not None and database.password not in str(cluster.get("status"))
