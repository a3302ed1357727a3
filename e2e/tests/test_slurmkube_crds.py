"""slurmkube's own CRDs on the real API server: the sample is accepted, bad input is
rejected at admission with a message that names the field, /scale works."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import DynamicApiError

from slurmkube_e2e.kube import Kube
from slurmkube_e2e.waiting import has_condition, wait_for

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
API = "slurmkube.io/v1alpha1"


@pytest.fixture(scope="module")
def slurmkube_crds(kube: Kube) -> None:
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        kube.apply(crd)
        wait_for(
            kube,
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            crd["metadata"]["name"],
            lambda obj: has_condition(obj, "Established"),
            timeout=60,
        )
    # The discovery cache of the dynamic client must see the new kinds.
    kube._dynamic.resources.invalidate_cache()


def sample() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((ROOT / "examples" / "cluster.yaml").read_text()))


def rejected(kube: Kube, obj: dict[str, Any], namespace: str) -> str:
    obj["metadata"]["namespace"] = namespace
    with pytest.raises((ApiException, DynamicApiError)) as err:
        kube.create(obj, namespace=namespace, dry_run="All")
    body = str(getattr(err.value, "body", "") or err.value)
    return body


def test_sample_cluster_and_node_sets_are_accepted(
    kube: Kube, slurmkube_crds: None, namespace: str
) -> None:
    for doc in sample():
        doc["metadata"]["namespace"] = namespace
        created = kube.create(doc, namespace=namespace)
        assert created["kind"] == doc["kind"]
    cluster = kube.get(API, "SlurmCluster", "fleet", namespace=namespace)
    assert cluster is not None
    # Defaults from the models are applied by the API server.
    assert cluster["spec"]["image"] == "localhost/slurmkube/slurm:24.11.5"
    assert cluster["spec"]["partitions"][0]["priorityTier"] == 1


def _cluster_with(**spec: Any) -> dict[str, Any]:
    doc = copy.deepcopy(sample()[0])
    doc["spec"].update(spec)
    return doc


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"extraConfig": ["KillWait=30\nInclude=/etc/shadow"]}, "spec.extraConfig[0]"),
        (
            {"extraConfig": ["SlurmctldHost=evil"]},
            "extraConfig may not set a key slurmkube manages",
        ),
        ({"extraConfig": ["KillWait=30 #x"]}, "spec.extraConfig[0]"),
        # An allow-list: program keys and keys slurmkube renders are refused.
        (
            {"extraConfig": ["KillWait=30", "HealthCheckProgram=/tmp/x"]},
            "extraConfig may not set a key slurmkube manages",
        ),
        (
            {"extraConfig": ["SlurmctldParameters=idle_on_node_suspend"]},
            "extraConfig may not set a key slurmkube manages",
        ),
        (
            {"partitions": [{"name": "DEFAULT", "nodeSets": ["a"]}]},
            "DEFAULT is a slurm.conf keyword",
        ),
        ({"partitions": [{"name": "bad name", "nodeSets": ["a"]}]}, "spec.partitions[0].name"),
        ({"partitions": [{"name": "a"}]}, "set nodeSets or nodeSelector"),
        (
            {
                "partitions": [
                    {"name": "a", "nodeSets": ["x"], "default": True},
                    {"name": "b", "nodeSets": ["x"], "default": True},
                ]
            },
            "at most one partition may be default",
        ),
        (
            {"partitions": [{"name": "a", "nodeSets": ["x"]}, {"name": "a", "nodeSets": ["y"]}]},
            'Duplicate value: {\\"name\\":\\"a\\"}',
        ),
        ({"partitions": [{"name": "a", "nodeSets": ["x"], "maxTime": "2 days"}]}, "maxTime"),
        ({"accounting": {"enabled": True}}, "accounting.enabled needs accounting.database"),
    ],
)
def test_invalid_cluster_is_rejected_naming_the_field(
    kube: Kube, slurmkube_crds: None, namespace: str, spec: dict[str, Any], message: str
) -> None:
    assert message in rejected(kube, _cluster_with(**spec), namespace)


def test_invalid_node_set_feature_is_rejected(
    kube: Kube, slurmkube_crds: None, namespace: str
) -> None:
    doc = copy.deepcopy(sample()[1])
    doc["spec"]["features"] = ["nvl72,evil"]
    assert "spec.features[0]" in rejected(kube, doc, namespace)


def test_node_set_scale_subresource(kube: Kube, slurmkube_crds: None, namespace: str) -> None:
    doc = copy.deepcopy(sample()[1])
    doc["metadata"]["namespace"] = namespace
    doc["spec"]["replicas"] = 2
    kube.create(doc, namespace=namespace)
    scale = kube.resource(API, "NodeSet").subresources["scale"]
    scale.patch(
        body={"spec": {"replicas": 5}},
        name=doc["metadata"]["name"],
        namespace=namespace,
        content_type="application/merge-patch+json",
    )
    node_set = kube.get(API, "NodeSet", doc["metadata"]["name"], namespace=namespace)
    assert node_set is not None
    assert node_set["spec"]["replicas"] == 5


def _reservation_check(busy_nodes: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "SlurmReservationCheck",
        "metadata": {"name": "e2e-busy-nodes"},
        "spec": {"clusterRef": {"namespace": "slurm", "name": "gpu"}, "busyNodes": busy_nodes},
    }


@pytest.mark.parametrize(
    ("busy_nodes", "field", "message"),
    [
        (
            {"policy": "WaitForIdle", "graceSeconds": 60},
            "spec.busyNodes.policy",
            "graceSeconds and requeueBelowPriority apply only to policy Requeue",
        ),
        (
            {"policy": "Requeue"},
            "spec.busyNodes.requeueBelowPriority",
            "policy Requeue needs requeueBelowPriority",
        ),
        (
            {
                "policy": "Requeue",
                "requeueBelowPriority": 1000,
                "graceSeconds": 600,
                "timeoutSeconds": 600,
            },
            "spec.busyNodes.graceSeconds",
            "graceSeconds must be less than timeoutSeconds",
        ),
        ({"policy": "Preempt"}, "spec.busyNodes.policy", "Unsupported value"),
    ],
)
def test_busy_node_policies_that_cannot_work_are_rejected_naming_the_field(
    kube: Kube, slurmkube_crds: None, busy_nodes: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises((ApiException, DynamicApiError)) as err:
        kube.create(_reservation_check(busy_nodes), dry_run="All")
    body = str(getattr(err.value, "body", "") or err.value)
    assert f"{field}: " in body and message in body, body


def test_a_requeue_policy_is_accepted_with_its_defaults(kube: Kube, slurmkube_crds: None) -> None:
    created = kube.create(
        _reservation_check({"policy": "Requeue", "requeueBelowPriority": 1000}), dry_run="All"
    )
    assert created["spec"]["busyNodes"] == {
        "policy": "Requeue",
        "requeueBelowPriority": 1000,
        "timeoutSeconds": 3600,
    }
