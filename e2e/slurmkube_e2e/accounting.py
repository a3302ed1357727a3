"""A SlurmCluster with accounting on the local runtime: slurmdbd over the host's
MariaDB, in a namespace of its own that is deleted afterwards."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from slurmkube_e2e.kube import Kube
from slurmkube_e2e.mariadb import DATABASE, MariaDB
from slurmkube_e2e.namespaces import delete_namespace
from slurmkube_e2e.operator_cluster import docs, ready_cluster
from slurmkube_e2e.waiting import wait_for


def db_login_secret(namespace: str, database: MariaDB) -> dict[str, Any]:
    """The user's Secret with the database login (`db-login`)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db-login", "namespace": namespace},
        "stringData": {"username": database.user, "password": database.password},
    }


def external_database(database: MariaDB) -> dict[str, Any]:
    """`spec.accounting` for slurmdbd over `database`, its login in `db-login`."""
    return {
        "enabled": True,
        "database": {
            "host": database.host,
            "port": database.port,
            "name": DATABASE,
            "secretName": "db-login",
        },
    }


@contextmanager
def accounted_cluster(
    kube: Kube,
    database: MariaDB,
    prefix: str,
    extra: list[dict[str, Any]] | None = None,
    replicas: int = 2,
    *,
    persistence: bool = False,
    spec: dict[str, Any] | None = None,
) -> Iterator[str]:
    """The cluster `local` with accounting in a new namespace, `replicas` slurmd
    pods (slurmctld's state on a claim with `persistence`); `extra` objects are
    applied with it (their namespace set); `spec` fields go on the SlurmCluster's."""
    namespace = f"{prefix}-{secrets.token_hex(2)}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_for(kube, "v1", "ServiceAccount", "default", lambda _: True, namespace=namespace)
    kube.create(db_login_secret(namespace, database))
    accounting = external_database(database)
    try:
        for doc in docs(
            namespace, replicas=replicas, accounting=accounting, persistence=persistence
        ):
            if doc["kind"] == "SlurmCluster":
                doc["spec"].update(spec or {})
            kube.apply(doc)
        for doc in extra or []:
            kube.apply({**doc, "metadata": {**doc["metadata"], "namespace": namespace}})
        ready_cluster(kube, namespace, timeout=240)
        yield namespace
    finally:
        delete_namespace(kube, namespace)


def sacct_state(in_ctld: Callable[..., str], job: str, timeout: float = 120) -> str:
    """The job's state in sacct, polled until COMPLETED or `timeout`: records reach
    slurmdbd asynchronously. `in_ctld(*argv)` runs a command in the slurmctld pod."""
    deadline = time.monotonic() + timeout
    state = "(no record)"
    while True:
        out = in_ctld("sacct", "-n", "-X", "-P", "-j", job, "-o", "JobID,State")
        rows = [line.split("|") for line in out.split() if line]
        state = rows[0][1] if rows else state
        if state == "COMPLETED" or time.monotonic() > deadline:
            return state
        time.sleep(2)
