"""One slurmrestd and scontrol client per cluster, kept across reconciles."""

from __future__ import annotations

from typing import Any, cast

from slurmkube.controllers.certificates import issue_server_certificate
from slurmkube.controllers.clients import MAX_AGE_SECONDS, SlurmClients
from slurmkube.controllers.settings import FixedRestApi, ServiceEndpoints, Settings
from slurmkube.kube.client import Kube
from slurmkube.slurm.models import NodeList
from slurmkube_local.builders import bundle

CA = issue_server_certificate(["slurmrestd.test"]).ca_pem


class Secrets:
    """The one read the clients make of Kubernetes: a key of a Secret."""

    def __init__(self) -> None:
        self.jwt = b"k" * 32
        self.ca: bytes | None = CA

    def secret_value(self, namespace: str, name: str, key: str) -> bytes | None:
        return {"jwt.key": self.jwt, "ca.crt": self.ca}.get(key)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _clients(clock: Clock) -> SlurmClients:
    endpoints = FixedRestApi("http://slurmrestd.test:6820", ServiceEndpoints())
    return SlurmClients(Settings(endpoints=endpoints), clock=clock)


def test_a_cluster_keeps_its_client_and_what_it_learnt_for_a_while() -> None:
    clock, kube = Clock(), cast(Kube, Secrets())
    clients, cluster = _clients(clock), bundle().cluster
    first = clients.rest(kube, cluster)
    assert first is not None
    first._data_parser = "v0.0.41"  # as if learnt from /openapi/v3
    clock.now += MAX_AGE_SECONDS - 1
    assert clients.rest(kube, cluster) is first
    clock.now += 2  # slurmrestd may have been upgraded: ask again
    again = clients.rest(kube, cluster)
    assert again is not first and again is not None
    assert again._data_parser is None


def test_a_new_key_makes_a_new_client() -> None:
    clock, secrets = Clock(), Secrets()
    kube = cast(Kube, secrets)
    clients, cluster = _clients(clock), bundle().cluster
    first = clients.rest(kube, cluster)
    secrets.jwt = b"n" * 32
    assert clients.rest(kube, cluster) is not first


def test_a_deleted_cluster_closes_its_client() -> None:
    clock, kube = Clock(), cast(Kube, Secrets())
    clients, cluster = _clients(clock), bundle().cluster
    first = clients.rest(kube, cluster)
    assert first is not None
    clients.close(cluster.metadata.namespace or "default", cluster.metadata.name)
    http: Any = first._http
    assert http.is_closed
    assert clients.rest(kube, cluster) is not first


def test_a_client_made_again_asks_with_the_clusters_last_lists() -> None:
    """The lists' times are slurmctld's: a new client (a new key, the refresh) keeps
    them, so it reads the fleet in full only after a change; a deleted cluster's go."""
    clock, kube = Clock(), cast(Kube, Secrets())
    clients, cluster = _clients(clock), bundle().cluster
    first = clients.rest(kube, cluster)
    assert first is not None
    first._lists.nodes.keep(NodeList((), 1796352974))
    clock.now += MAX_AGE_SECONDS
    again = clients.rest(kube, cluster)
    assert again is not None and again is not first
    assert again._lists is first._lists
    clients.close(cluster.metadata.namespace or "default", cluster.metadata.name)
    after = clients.rest(kube, cluster)
    assert after is not None and after._lists.nodes.kept is None


def test_without_a_key_there_is_no_client() -> None:
    secrets = Secrets()
    secrets.jwt = b""
    assert _clients(Clock()).rest(cast(Kube, secrets), bundle().cluster) is None


def test_settings_come_from_the_environment_once() -> None:
    settings = Settings.from_environment(
        {
            "SLURMKUBE_POD_IP_ENDPOINTS": "1",
            "SLURMKUBE_SLURMRESTD_URL": "http://127.0.0.1:1",
            "SLURMKUBE_CONFIG_PROPAGATION_SECONDS": "12",
            "SLURMKUBE_FAILPOINT": "lease-labelled:2",
            "SLURMKUBE_OPERATOR_IDENTITY": "op-0",
        }
    )
    assert settings.propagation_seconds == 12.0
    assert settings.failpoint == "lease-labelled:2"
    assert settings.identity == "op-0"
    assert isinstance(settings.endpoints, FixedRestApi)
    assert settings.endpoints.url == "http://127.0.0.1:1"


def test_a_new_ca_makes_a_new_client_and_one_that_is_no_certificate_none() -> None:
    clock, secrets = Clock(), Secrets()
    kube = cast(Kube, secrets)
    clients, cluster = _clients(clock), bundle().cluster
    first = clients.rest(kube, cluster)
    secrets.ca = issue_server_certificate(["slurmrestd.test"]).ca_pem
    second = clients.rest(kube, cluster)
    assert second is not None and second is not first
    secrets.ca = b"not a certificate"
    assert clients.rest(kube, cluster) is None
