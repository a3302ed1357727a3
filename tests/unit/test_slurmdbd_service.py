"""slurmdbd's Service is headless, so slurmdbd sees slurmctld's own address (its
pushes of association changes go there), and an existing ClusterIP Service is
replaced rather than refused (controllers/apply.py `apply_object`)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from kubernetes.client import ApiException
from kubernetes.dynamic.exceptions import UnprocessibleEntityError

from slurmkube.build.slurmdbd import slurmdbd_service
from slurmkube.controllers.apply import apply_object
from slurmkube.kube.client import Kube
from slurmkube_local.builders import bundle


def test_slurmdbd_service_is_headless_and_publishes_a_starting_pod() -> None:
    spec = slurmdbd_service(bundle().cluster)["spec"]
    assert spec["clusterIP"] == "None"
    assert spec["publishNotReadyAddresses"] is True
    assert spec["ports"] == [{"name": "slurmdbd", "port": 6819}]


def _refusal(message: str) -> UnprocessibleEntityError:
    err = UnprocessibleEntityError(ApiException(status=422, reason="Unprocessable Entity"))
    err.body = f'{{"kind":"Status","message":"{message}"}}'
    return err


class FakeKube:
    def __init__(self, refusal: str | None) -> None:
        self.refusal = refusal
        self.calls: list[tuple[str, str]] = []

    def apply(self, obj: dict[str, Any], owner: dict[str, Any] | None = None) -> dict[str, Any]:
        self.calls.append(("apply", obj["metadata"]["name"]))
        if self.refusal is not None:
            message, self.refusal = self.refusal, None
            raise _refusal(message)
        return obj

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None) -> None:
        self.calls.append(("delete", name))


SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "c-db", "namespace": "n"}}
IMMUTABLE = "spec.clusterIPs[0]: Invalid value: None: may not change once set"


def test_a_service_whose_cluster_ip_cannot_change_is_replaced() -> None:
    kube = FakeKube(IMMUTABLE)
    apply_object(cast(Kube, kube), SERVICE, {"metadata": {"name": "c"}})
    assert kube.calls == [("apply", "c-db"), ("delete", "c-db"), ("apply", "c-db")]


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (SERVICE, "spec.ports[0].port: Invalid value: 0"),
        ({**SERVICE, "kind": "ConfigMap"}, IMMUTABLE),
    ],
)
def test_any_other_refusal_is_raised_and_nothing_is_deleted(
    obj: dict[str, Any], message: str
) -> None:
    kube = FakeKube(message)
    with pytest.raises(UnprocessibleEntityError):
        apply_object(cast(Kube, kube), obj, {"metadata": {"name": "c"}})
    assert kube.calls == [("apply", "c-db")]
