"""CRD validation rules written in CEL are enforced by the real API server, with the
rule's own message: slurmkube's CRDs use them to reject bad input at admission."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes.client.exceptions import ApiException

from slurmkube_e2e.kube import Kube
from slurmkube_e2e.waiting import has_condition, wait_for, wait_gone

pytestmark = pytest.mark.e2e

GROUP = "e2e.slurmkube.io"
RULE_MESSAGE = "spec.minNodes must not exceed spec.maxNodes"


def _crd() -> dict[str, object]:
    spec_schema = {
        "type": "object",
        "required": ["minNodes", "maxNodes"],
        "properties": {
            "minNodes": {"type": "integer", "minimum": 0},
            "maxNodes": {"type": "integer", "minimum": 0},
            "partition": {"type": "string", "maxLength": 63},
        },
        "x-kubernetes-validations": [
            {"rule": "self.minNodes <= self.maxNodes", "message": RULE_MESSAGE},
            {
                "rule": "!has(self.partition) || self.partition.matches('^[a-z][a-z0-9_-]*$')",
                "messageExpression": "'partition ' + self.partition + ' is not a Slurm name'",
            },
        ],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"nodepools.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "nodepools", "singular": "nodepool", "kind": "NodePool"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": spec_schema},
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def nodepool_crd(kube: Kube) -> Iterator[str]:
    crd = kube.apply(_crd())
    name = crd["metadata"]["name"]
    wait_for(
        kube,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        name,
        lambda c: has_condition(c, "Established"),
        what="Established",
    )
    yield f"{GROUP}/v1"
    kube.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
    wait_gone(kube, "apiextensions.k8s.io/v1", "CustomResourceDefinition", name)


def _nodepool(name: str, **spec: object) -> dict[str, object]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_cel_rule_accepts_a_valid_object(kube: Kube, namespace: str, nodepool_crd: str) -> None:
    created = kube.create(_nodepool("ok", minNodes=1, maxNodes=4), namespace=namespace)
    assert created["spec"] == {"minNodes": 1, "maxNodes": 4}


def test_cel_rule_rejects_a_bad_object_with_its_message(
    kube: Kube, namespace: str, nodepool_crd: str
) -> None:
    with pytest.raises(ApiException) as rejected:
        kube.create(_nodepool("bad", minNodes=5, maxNodes=2), namespace=namespace)
    assert rejected.value.status == 422
    assert RULE_MESSAGE in str(rejected.value.body)


def test_cel_message_expression_names_the_bad_value(
    kube: Kube, namespace: str, nodepool_crd: str
) -> None:
    with pytest.raises(ApiException) as rejected:
        kube.create(
            _nodepool("bad-name", minNodes=0, maxNodes=1, partition="GPU nodes"),
            namespace=namespace,
        )
    assert rejected.value.status == 422
    assert "partition GPU nodes is not a Slurm name" in str(rejected.value.body)
