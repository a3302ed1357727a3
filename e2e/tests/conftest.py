"""pytest fixtures for slurmkube's e2e suite: one cluster per session, a namespace per test.

The cluster is whatever KUBECONFIG points at (the local control plane's
.run/kubeconfig by default, a kind cluster under `make e2e-kind`), so the same
tests judge both flavors. Tests only create namespaced objects in their own
namespace, and cluster-scoped ones with names derived from it, so they can run
in any order and leave nothing behind.
"""

from __future__ import annotations

import os
import re
import secrets
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurmkube_e2e import fleet
from slurmkube_e2e.kube import Kube, Manifest
from slurmkube_e2e.layout import Layout
from slurmkube_e2e.mariadb import MariaDB, running_mariadb
from slurmkube_e2e.operator import OperatorProcess, host_operator_env, running_operator
from slurmkube_e2e.operator_identity import operator_kubeconfig
from slurmkube_e2e.realnode_config import RealNode
from slurmkube_e2e.realnodes import RealNodes
from slurmkube_e2e.replicas import LEASE_ENV, Replica
from slurmkube_e2e.waiting import wait_for

TEST_LABEL = "e2e.slurmkube.io/test"
# When this session started: the RBAC audit reads the API server's audit log from here on.
SESSION_STARTED = pytest.StashKey[datetime]()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[SESSION_STARTED] = datetime.now(UTC)


@pytest.fixture(scope="session")
def session_started(request: pytest.FixtureRequest) -> datetime:
    return request.config.stash[SESSION_STARTED]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `after_all_others` judge what the whole session did (the
    operator's requests in the audit log): they run last, whatever their file."""
    items.sort(key=lambda item: item.get_closest_marker("after_all_others") is not None)


@pytest.fixture(scope="session")
def kubeconfig() -> Path:
    path = Path(os.environ.get("KUBECONFIG") or Layout.from_env().kubeconfig)
    if not path.exists():
        pytest.fail(f"no kubeconfig at {path}: start a cluster with `make cluster-up`")
    return path


@pytest.fixture(scope="session")
def kube(kubeconfig: Path) -> Kube:
    client = Kube(kubeconfig)
    try:
        client.server_version()
    except Exception as err:  # any connection or TLS error: say which cluster we tried
        pytest.fail(f"cluster of {kubeconfig} is not reachable ({err}); run `make cluster-up`")
    return client


@pytest.fixture(scope="session")
def gpu_nodes(kube: Kube) -> list[Manifest]:
    """The simulated GPU nodes (any fleet), at least one."""
    nodes = kube.list("v1", "Node", label_selector=fleet.CLIQUE_LABEL)
    if not nodes:
        pytest.fail("cluster has no GPU nodes: `slurmkube-e2e fleet` (make cluster-up makes some)")
    return nodes


@pytest.fixture(scope="session")
def real_nodes() -> list[RealNode]:
    """The real kubelet nodes `make e2e-local` (or `make real-nodes`) started."""
    nodes = RealNodes(Layout.from_env()).saved()
    if not nodes:
        pytest.skip("no real nodes started: `make real-nodes` (or cluster-up REAL_NODES=4)")
    return nodes


def _namespace_name(test_name: str) -> str:
    stem = re.sub(r"[^a-z0-9-]+", "-", test_name.lower().removeprefix("test_")).strip("-")
    return f"e2e-{stem[:40].rstrip('-')}-{secrets.token_hex(2)}"


@pytest.fixture
def namespace(kube: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, deleted (with everything in it) afterwards."""
    name = _namespace_name(request.node.name)
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {TEST_LABEL: "true"}},
        }
    )
    # Pods are rejected until the ServiceAccount controller made "default"; with the
    # namespace controller still removing earlier test namespaces, that took over 30 s
    # once in CI (session 16).
    wait_for(kube, "v1", "ServiceAccount", "default", lambda _: True, namespace=name, timeout=90)
    yield name
    kube.delete("v1", "Namespace", name)


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def operator(
    kube: Kube, kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """One operator for the session; tests that need it down or killed use its handle."""
    with running_operator(kube, kubeconfig, tmp_path_factory.mktemp("operator")) as process:
        yield process


@pytest.fixture
def replicas(
    operator: OperatorProcess, kubeconfig: Path, namespace: str, tmp_path: Path
) -> Iterator[list[Replica]]:
    """Two operators whose Lease is in the test namespace; the session's operator
    is stopped meanwhile (it would act on the same SlurmCluster)."""
    operator.stop()
    pair = []
    identity = operator_kubeconfig(kubeconfig, namespace, tmp_path)
    for name in ("ha-a", "ha-b"):
        env = {**os.environ, **host_operator_env(identity, name, namespace), **LEASE_ENV}
        pair.append(Replica(name, env, tmp_path / f"{name}.log"))
    for replica in pair:
        replica.process.start()
    try:
        yield pair
    finally:
        for replica in pair:
            replica.process.stop()
        operator.start()


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDB]:
    """A MariaDB on the host for a module's slurmdbd (test_accounting, test_policy)."""
    with running_mariadb(Path(tmp_path_factory.mktemp("mariadb"))) as db:
        yield db
