"""The chart's NetworkPolicies, evaluated against the pods the operator builds.

Each rule is checked the way a policy engine reads it (pod and namespace
selectors, ports) against the labels of the real builder output, so a label
renamed in build/names.py fails here. Enforcement by a CNI is not tested.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slurmkube.build.login import login_deployment
from slurmkube.build.slurmctld import controller_statefulset
from slurmkube.build.slurmd import slurmd_pod
from slurmkube.build.slurmdbd import slurmdbd_deployment
from slurmkube.build.slurmrestd import restapi_deployment
from slurmkube_local.builders import bundle
from tests.unit.test_helm import RELEASE_NAMESPACE, helm, of_kind, render  # noqa: F401

Obj = dict[str, Any]
SLURM_NAMESPACE = "slurm"
EPHEMERAL = 40123  # a step's or an MPI rank's port


def slurm_pods() -> dict[str, Obj]:
    """Pod labels of every component, from the builders."""
    b = bundle(
        extra={"accounting": {"enabled": True, "database": {"host": "db", "secretName": "s"}}}
    )
    c = b.cluster
    built = {
        "slurmctld": controller_statefulset(c),
        "slurmrestd": restapi_deployment(c),
        "slurmdbd": slurmdbd_deployment(c, "h"),
        "login": login_deployment(c),
    }
    labels = {k: o["spec"]["template"]["metadata"]["labels"] for k, o in built.items()}
    labels["slurmd"] = slurmd_pod(c, b.node_sets[0], "gpu-0001", 4, "h")["metadata"]["labels"]
    return labels


def matches(selector: Obj, labels: Obj) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        assert expr["operator"] == "In", expr
        if labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def peer_admits(peer: Obj, policy_ns: str, source: tuple[str, Obj]) -> bool:
    namespace, labels = source
    if "namespaceSelector" in peer:
        ns_labels = {"kubernetes.io/metadata.name": namespace}
        if not matches(peer["namespaceSelector"], ns_labels):
            return False
    elif namespace != policy_ns:
        return False
    return matches(peer.get("podSelector") or {}, labels)


def admitted(
    policies: list[Obj], target: tuple[str, Obj], port: int, source: tuple[str, Obj]
) -> bool:
    """Would traffic from `source` to `target`'s `port` pass (no policy selecting it: yes)?"""
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == target[0] and matches(p["spec"]["podSelector"], target[1])
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            ports = {p["port"] for p in rule.get("ports") or []}
            if ports and port not in ports:
                continue
            peers = rule.get("from")
            if not peers or any(peer_admits(p, target[0], source) for p in peers):
                return True
    return False


@pytest.fixture(scope="module")
def policies(helm: Path) -> tuple[list[Obj], Obj]:  # noqa: F811 - the imported fixture
    objects = render(
        helm,
        "--set",
        f"clusterNamespaces={{{SLURM_NAMESPACE}}}",
        "--set-json",
        'networkPolicy.restApiClients=[{"podSelector":{"matchLabels":{"app":"portal"}}}]',
        "--set-json",
        'networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":'
        '{"kubernetes.io/metadata.name":"monitoring"}}}]',
    )
    operator = of_kind(objects, "Deployment")[0]["spec"]["template"]["metadata"]["labels"]
    return of_kind(objects, "NetworkPolicy"), operator


# target component, port -> the sources that may reach it
EXPECTED: dict[tuple[str, int], set[str]] = {
    ("slurmctld", 6817): {"slurmd", "login", "slurmrestd", "slurmdbd", "slurmctld", "operator"},
    ("slurmd", 6818): {"slurmctld", "login", "slurmd"},
    ("slurmd", EPHEMERAL): {"slurmd"},
    ("slurmdbd", 6819): {"slurmctld", "slurmrestd"},
    ("slurmrestd", 6820): {"operator", "portal"},
}


@pytest.mark.parametrize(("target", "port"), sorted(EXPECTED))
def test_each_slurm_port_admits_only_its_peers(
    policies: tuple[list[Obj], Obj], target: str, port: int
) -> None:
    rendered, operator = policies
    pods = slurm_pods()
    sources: dict[str, tuple[str, Obj]] = {
        **{name: (SLURM_NAMESPACE, labels) for name, labels in pods.items()},
        "operator": (RELEASE_NAMESPACE, operator),
        "portal": (SLURM_NAMESPACE, {"app": "portal"}),
        "stranger": (SLURM_NAMESPACE, {"app": "other"}),
        "other-namespace-slurmd": ("elsewhere", pods["slurmd"]),
    }
    allowed = {
        name
        for name, source in sources.items()
        if admitted(rendered, (SLURM_NAMESPACE, pods[target]), port, source)
    }
    assert allowed == EXPECTED[(target, port)]


def test_every_slurm_component_but_login_is_selected_by_a_policy(
    policies: tuple[list[Obj], Obj],
) -> None:
    rendered, _ = policies
    selected = {
        name
        for name, labels in slurm_pods().items()
        if any(matches(p["spec"]["podSelector"], labels) for p in rendered)
    }
    assert selected == {"slurmctld", "slurmd", "slurmdbd", "slurmrestd"}


@pytest.mark.parametrize(
    ("port", "source_ns", "expected"),
    [(9090, "monitoring", True), (9090, "slurm", False), (8080, "anywhere", True)],
)
def test_operator_metrics_only_to_the_configured_scrapers(
    policies: tuple[list[Obj], Obj], port: int, source_ns: str, expected: bool
) -> None:
    rendered, operator = policies
    target = (RELEASE_NAMESPACE, operator)
    assert admitted(rendered, target, port, (source_ns, {"app": "prometheus"})) is expected


def test_policies_are_on_by_default_and_can_be_switched_off(helm: Path) -> None:  # noqa: F811
    on = of_kind(render(helm, "--set", "watchNamespace=slurm"), "NetworkPolicy")
    assert {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in on} == {
        ("slurm", "slurmkube-slurmctld"),
        ("slurm", "slurmkube-slurmd"),
        ("slurm", "slurmkube-slurmdbd"),
        ("slurm", "slurmkube-slurmrestd"),
        (RELEASE_NAMESPACE, "slurmkube-operator"),
    }
    off = render(helm, "--set", "watchNamespace=slurm", "--set", "networkPolicy.enabled=false")
    assert not of_kind(off, "NetworkPolicy")


def test_without_cluster_namespaces_only_the_operator_policy_renders(helm: Path) -> None:  # noqa: F811
    rendered = of_kind(render(helm), "NetworkPolicy")
    assert [p["metadata"]["name"] for p in rendered] == ["slurmkube-operator"]
