"""The Helm chart (helm/slurmkube): lint, render, and assert on the rendered objects.

Runs the real `helm` binary that `make cluster-build` installs into the cache.
The RBAC table below is the chart's contract: a rule added or widened in the
chart must be added here too, on purpose.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmkube.api.documents import parse_cluster

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "slurmkube"
CACHE = Path(os.environ.get("SLURMKUBE_CACHE", Path.home() / ".cache" / "slurmkube"))
HELM = CACHE / "bin" / "helm"
RELEASE_NAMESPACE = "slurmkube-system"
# The go-installed helm reports Kubernetes v1.20 unless told; the chart needs 1.34+.
KUBE_VERSION = "1.34.0"

Obj = dict[str, Any]

# (apiGroup, resource) -> verbs, for every namespaced kind the operator touches.
NAMESPACED_RULES: dict[tuple[str, str], set[str]] = {
    ("slurmkube.io", "slurmclusters"): {"get", "list", "watch", "patch"},
    ("slurmkube.io", "nodesets"): {"get", "list", "watch", "patch"},
    ("slurmkube.io", "slurmclusters/status"): {"get", "patch"},
    ("slurmkube.io", "nodesets/status"): {"get", "patch"},
    ("slurmkube.io", "nodesets/scale"): {"get"},
    ("slurmkube.io", "slurmclusters/finalizers"): {"update"},
    ("slurmkube.io", "nodesets/finalizers"): {"update"},
    ("slurmkube.io", "allocationsources"): {"get", "list", "watch", "patch"},
    ("slurmkube.io", "allocationsources/status"): {"get", "patch"},
    ("", "pods"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "pods/status"): {"patch"},
    ("", "pods/exec"): {"create", "get"},
    ("", "services"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "configmaps"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "secrets"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "persistentvolumeclaims"): {"get", "list", "watch"},
    ("", "events"): {"create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
    ("apps", "statefulsets"): {"get", "list", "watch", "create", "patch", "delete"},
    ("apps", "deployments"): {"get", "list", "watch", "create", "patch", "delete"},
    ("kueue.x-k8s.io", "workloads"): {"get", "list", "watch", "patch"},
    ("kueue.x-k8s.io", "workloads/status"): {"get", "patch"},
}
# Cluster-scoped kinds: only a ClusterRole can grant them.
CLUSTER_RULES: dict[tuple[str, str], set[str]] = {
    ("", "nodes"): {"get", "list", "watch", "patch"},
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
    ("slurmkube.io", "slurmreservationchecks"): {"get", "list", "watch"},
    ("kueue.x-k8s.io", "admissionchecks"): {"get", "list", "watch"},
    ("kueue.x-k8s.io", "admissionchecks/status"): {"get", "patch"},
    ("kueue.x-k8s.io", "resourceflavors"): {"get", "list", "watch", "create", "patch", "delete"},
    ("kueue.x-k8s.io", "topologies"): {"get", "list", "watch", "create", "patch", "delete"},
    **{
        ("kueue.x-k8s.io", kind): {"get", "list", "create", "patch", "delete"}
        for kind in ("cohorts", "clusterqueues", "localqueues", "workloadpriorityclasses")
    },
}
LEASE_RULES: dict[tuple[str, str, str], set[str]] = {
    ("coordination.k8s.io", "leases", ""): {"create"},
    ("coordination.k8s.io", "leases", "slurmkube-operator"): {"get", "update"},
}
KNOWN_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete"}

# Value sets every structural test runs against.
VALUE_SETS: dict[str, list[str]] = {
    "defaults": [],
    "namespaced": ["--set", "watchNamespace=slurm", "--set", "replicaCount=1"],
    "no-kueue": ["--set", "rbac.kueue=false", "--set", "replicaCount=3"],
    "monitored": [
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--api-versions",
        "monitoring.coreos.com/v1/ServiceMonitor",
    ],
}


@pytest.fixture(scope="module")
def helm() -> Path:
    if not os.access(HELM, os.X_OK):
        pytest.fail(f"helm not found at {HELM}: run `make cluster-build` (it installs helm)")
    return HELM


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), *args], capture_output=True, text=True, timeout=120, check=False
    )


def render(helm: Path, *args: str) -> list[Obj]:
    result = run_helm(
        helm,
        "template",
        "slurmkube",
        str(CHART),
        "--namespace",
        RELEASE_NAMESPACE,
        "--kube-version",
        KUBE_VERSION,
        *args,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def of_kind(objects: list[Obj], kind: str) -> list[Obj]:
    return [obj for obj in objects if obj["kind"] == kind]


def one(objects: list[Obj], kind: str) -> Obj:
    found = of_kind(objects, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def rules_of(role: Obj) -> dict[tuple[str, str], set[str]]:
    """Verbs per (apiGroup, resource), leases aside (they are checked by name)."""
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def load_documents(path: Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def operator_container(objects: list[Obj]) -> Obj:
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    container: Obj = pod["containers"][0]
    return container


# `helm lint` has no --api-versions, so the ServiceMonitor set is rendered, not linted.
@pytest.mark.parametrize("name", ["defaults", "namespaced", "no-kueue"])
def test_chart_lints_strictly(helm: Path, name: str) -> None:
    result = run_helm(helm, "lint", "--strict", str(CHART), *VALUE_SETS[name])
    assert result.returncode == 0, result.stdout + result.stderr


def test_chart_crds_are_the_generated_crds() -> None:
    generated = {p.name: p.read_text() for p in (ROOT / "crds").glob("*.yaml")}
    shipped = {p.name: p.read_text() for p in (CHART / "crds").glob("*.yaml")}
    assert generated, "crds/ is empty: run `.venv/bin/slurmkube crds`"
    assert shipped == generated, "helm/slurmkube/crds is stale: run `make helm-crds`"


def test_include_crds_renders_every_crd(helm: Path) -> None:
    crds = of_kind(render(helm, "--include-crds"), "CustomResourceDefinition")
    assert {c["metadata"]["name"] for c in crds} == {
        "slurmclusters.slurmkube.io",
        "nodesets.slurmkube.io",
        "slurmreservationchecks.slurmkube.io",
        "allocationsources.slurmkube.io",
    }


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rbac_has_no_wildcards_and_only_known_verbs(helm: Path, name: str) -> None:
    objects = render(helm, *VALUE_SETS[name])
    roles = of_kind(objects, "ClusterRole") + of_kind(objects, "Role")
    assert roles
    for role in roles:
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), (role["metadata"]["name"], rule)
            assert set(rule["verbs"]) <= KNOWN_VERBS, rule
            assert "nonResourceURLs" not in rule


def test_all_namespaces_rbac_is_exactly_the_table(helm: Path) -> None:
    objects = render(helm)
    cluster_role = one(objects, "ClusterRole")
    assert rules_of(cluster_role) == {**CLUSTER_RULES, **NAMESPACED_RULES}
    container = operator_container(objects)
    assert "--all-namespaces" in container["args"]


def test_watch_namespace_moves_namespaced_rules_into_a_role(helm: Path) -> None:
    objects = render(helm, *VALUE_SETS["namespaced"])
    assert rules_of(one(objects, "ClusterRole")) == CLUSTER_RULES
    (watched,) = [r for r in of_kind(objects, "Role") if r["metadata"]["namespace"] == "slurm"]
    assert rules_of(watched) == NAMESPACED_RULES
    (binding,) = [
        b for b in of_kind(objects, "RoleBinding") if b["metadata"]["namespace"] == "slurm"
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": watched["metadata"]["name"],
    }
    assert binding["subjects"][0]["namespace"] == RELEASE_NAMESPACE
    assert "--namespace=slurm" in operator_container(objects)["args"]


def test_kueue_rules_are_dropped_when_kueue_is_off(helm: Path) -> None:
    granted = rules_of(one(render(helm, *VALUE_SETS["no-kueue"]), "ClusterRole"))
    assert not [key for key in granted if key[0] == "kueue.x-k8s.io"]
    assert ("", "pods") in granted


def test_leader_election_lease_is_granted_by_name_in_the_release_namespace(helm: Path) -> None:
    objects = render(helm)
    (role,) = [
        r for r in of_kind(objects, "Role") if r["metadata"]["name"].endswith("-leader-election")
    ]
    assert role["metadata"]["namespace"] == RELEASE_NAMESPACE
    granted = {
        (group, resource, name): set(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for name in rule.get("resourceNames", [""])
    }
    assert granted == LEASE_RULES
    bindings = [b for b in of_kind(objects, "RoleBinding") if b["roleRef"]["kind"] == "Role"]
    assert {b["roleRef"]["name"] for b in bindings} == {role["metadata"]["name"]}


def test_every_rbac_rule_says_why(helm: Path) -> None:
    result = run_helm(helm, "template", "slurmkube", str(CHART), "--kube-version", KUBE_VERSION)
    lines = result.stdout.splitlines()
    verb_lines = [i for i, line in enumerate(lines) if line.strip().startswith("verbs:")]
    assert len(verb_lines) >= len(NAMESPACED_RULES) // 2
    for i in verb_lines:
        assert lines[i - 1].strip().startswith("#"), (
            f"rule without a reason: {lines[i - 3 : i + 1]}"
        )


def test_operator_pod_is_locked_down(helm: Path) -> None:
    objects = render(helm)
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = operator_container(objects)
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["serviceAccountName"] == one(objects, "ServiceAccount")["metadata"]["name"]


def test_operator_container_speaks_the_cli_contract(helm: Path) -> None:
    container = operator_container(render(helm))
    assert container["image"] == "slurmkube/operator:0.1.0"
    assert container["args"] == ["--all-namespaces", "--metrics-port=9090", "--health-port=8080"]
    env = {e["name"]: e for e in container["env"]}
    assert env["SLURMKUBE_OPERATOR_NAMESPACE"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.namespace"}
    }
    assert env["SLURMKUBE_LOG_LEVEL"]["value"] == "info"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 9090, "health": 8080}


def test_image_digest_wins_over_tag(helm: Path) -> None:
    digest = "sha256:" + "a" * 64
    container = operator_container(render(helm, "--set", f"image.digest={digest}"))
    assert container["image"] == f"slurmkube/operator@{digest}"


@pytest.mark.parametrize(
    ("values", "replicas", "pdb"),
    [
        ([], 2, True),
        (["--set", "replicaCount=1"], 1, False),
        (["--set", "replicaCount=3"], 3, True),
    ],
)
def test_replicas_and_disruption_budget(
    helm: Path, values: list[str], replicas: int, pdb: bool
) -> None:
    objects = render(helm, *values)
    assert one(objects, "Deployment")["spec"]["replicas"] == replicas
    budgets = of_kind(objects, "PodDisruptionBudget")
    assert len(budgets) == int(pdb)
    if pdb:
        assert budgets[0]["spec"]["minAvailable"] == 1


def test_metrics_service_selects_the_operator_pods(helm: Path) -> None:
    objects = render(helm)
    service = one(objects, "Service")
    pod_labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}
    ]


def test_service_monitor_is_off_by_default(helm: Path) -> None:
    assert not of_kind(render(helm), "ServiceMonitor")


def test_service_monitor_needs_the_prometheus_operator_api(helm: Path) -> None:
    result = run_helm(
        helm,
        "template",
        "slurmkube",
        str(CHART),
        "--kube-version",
        KUBE_VERSION,
        "--set",
        "metrics.serviceMonitor.enabled=true",
    )
    assert result.returncode != 0
    assert "monitoring.coreos.com/v1" in result.stderr


def test_service_monitor_scrapes_the_metrics_port(helm: Path) -> None:
    objects = render(helm, *VALUE_SETS["monitored"])
    monitor = one(objects, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= (
        one(objects, "Service")["metadata"]["labels"].items()
    )


@pytest.mark.parametrize(
    "bad",
    [
        ["--set", "replicaCount=-1"],
        ["--set", "image.tag=latest"],
        ["--set", "watchNamespace=Not_A_Namespace"],
        ["--set", "logLevel=chatty"],
        ["--set", "replicas=2"],
    ],
)
def test_schema_rejects_bad_values(helm: Path, bad: list[str]) -> None:
    result = run_helm(
        helm, "template", "slurmkube", str(CHART), "--kube-version", KUBE_VERSION, *bad
    )
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr


def _leaf_paths(values: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from _leaf_paths(value, f"{path}.")
        else:
            yield path


def _schema_has(schema: Mapping[str, Any], path: str) -> bool:
    node: Mapping[str, Any] = schema
    for part in path.split("."):
        props = node.get("properties")
        if props is None:
            return True  # a free-form object (e.g. resources) is validated by Kubernetes
        if part not in props:
            return False
        node = props[part]
        ref = node.get("$ref")
        if isinstance(ref, str):
            node = schema["definitions"][ref.rsplit("/", 1)[1]]
    return True


def test_schema_describes_every_value() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    missing = [path for path in _leaf_paths(values) if not _schema_has(schema, path)]
    assert not missing, f"values.schema.json lacks {missing}"


def test_every_top_level_value_group_is_commented() -> None:
    """Blocks of top-level keys (split by blank lines) start with a comment."""
    blocks = (CHART / "values.yaml").read_text().split("\n\n")
    for block in blocks[1:]:
        first = block.strip().splitlines()[0]
        assert first.startswith("#"), f"values.yaml: undocumented block starting {first!r}"


def test_example_cluster_is_the_repo_example_and_valid() -> None:
    shipped = load_documents(CHART / "examples" / "cluster.yaml")
    repo = load_documents(ROOT / "examples" / "cluster.yaml")
    assert shipped == repo, "helm/slurmkube/examples/cluster.yaml drifted from examples/"
    assert {d["metadata"]["namespace"] for d in shipped} == {"slurm"}
    bundle = parse_cluster(shipped)
    assert bundle.cluster.metadata.name == "fleet"
    assert {n.metadata.name for n in bundle.node_sets} == {"gb200", "hgx", "cpu"}
