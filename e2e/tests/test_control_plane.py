"""The local control plane is the real, pinned Kubernetes with Kueue and a GPU fleet."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurmkube_e2e import fleet
from slurmkube_e2e.kube import Kube, Manifest
from slurmkube_e2e.layout import Layout, read_versions
from slurmkube_e2e.waiting import has_condition

pytestmark = pytest.mark.e2e

KUEUE_KINDS = (
    "AdmissionCheck",
    "ClusterQueue",
    "Cohort",
    "LocalQueue",
    "ResourceFlavor",
    "Topology",
    "Workload",
    "WorkloadPriorityClass",
)


def test_server_reports_a_kubernetes_release_kueue_supports(kube: Kube) -> None:
    version = kube.server_version()
    match = re.fullmatch(r"v1\.(\d+)\.\d+", version)
    assert match, f"server version {version!r} is not a release version"
    assert int(match.group(1)) >= 34, f"Kueue v0.19 needs Kubernetes 1.34+, server is {version}"


def test_local_server_is_the_pinned_release(kube: Kube, kubeconfig: Path) -> None:
    layout = Layout.from_env()
    if kubeconfig.resolve() != layout.kubeconfig.resolve():
        pytest.skip("not the local control plane")
    assert kube.server_version() == read_versions(layout.versions_file)["K8S_VERSION"]


@pytest.mark.parametrize("kind", KUEUE_KINDS)
def test_kueue_v1beta2_kind_is_served(kube: Kube, kind: str) -> None:
    resource = kube.resource("kueue.x-k8s.io/v1beta2", kind)
    assert resource.kind == kind


def test_gpu_nodes_are_ready_with_topology_labels(gpu_nodes: list[Manifest]) -> None:
    clique = re.compile(r"[0-9a-f-]{36}\.\d+")
    for node in gpu_nodes:
        labels: dict[str, str] = node["metadata"]["labels"]
        name = node["metadata"]["name"]
        assert has_condition(node, "Ready"), f"{name} is not Ready"
        assert clique.fullmatch(labels[fleet.CLIQUE_LABEL]), labels[fleet.CLIQUE_LABEL]
        for key in (fleet.PRODUCT_LABEL, fleet.RACK_LABEL, fleet.LEAF_LABEL, fleet.SPINE_LABEL):
            assert labels.get(key), f"{name} lacks {key}"
        allocatable = node["status"]["allocatable"]
        assert allocatable[fleet.GPU_RESOURCE] == labels[fleet.COUNT_LABEL]


def test_rbac_denies_an_unbound_service_account(kube: Kube, namespace: str) -> None:
    review = kube.create(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:{namespace}:default",
                "resourceAttributes": {"verb": "list", "resource": "pods", "namespace": namespace},
            },
        }
    )
    assert review["status"]["allowed"] is False, review["status"]
