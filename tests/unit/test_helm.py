"""The Helm chart (helm/slurmkube): lint, render, and assert on the rendered objects.

Runs the real `helm` binary that `make cluster-build` installs into the cache.
Every RBAC verb the chart grants has a caller below (a file and the text at
the call), and every caller's text is checked to still be in the code: a rule
without a caller, or a caller the code no longer has, fails.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf
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
OPERATOR = ROOT / "operator" / "slurmkube"


@dataclass(frozen=True)
class Caller:
    """Where the operator makes a request: a file (under operator/slurmkube, or
    `kopf/...` in the installed kopf) and text that file holds at the call."""

    where: str
    needle: str

    def source(self) -> str:
        if self.where.startswith("kopf/"):
            return (Path(kopf.__file__).parent / self.where.removeprefix("kopf/")).read_text()
        return (OPERATOR / self.where).read_text()


def kopf_watch(where: str, needle: str) -> dict[str, Caller]:
    """A kopf handler or index: kopf lists, then watches, the kind."""
    return {"list": Caller(where, needle), "watch": Caller(where, needle)}


def applied(where: str, needle: str) -> dict[str, Caller]:
    """Server-side apply (kube/client.py Kube.apply): a PATCH, and create when the
    object does not exist yet."""
    return {"create": Caller(where, needle), "patch": Caller(where, needle)}


HANDLERS = "controllers/handlers.py"
CACHES = "controllers/caches.py"
LENDING = "controllers/lending.py"
APPLY = "controllers/apply.py"
DELETION = "controllers/deletion.py"
POLICY = "controllers/policy.py"
POLICY_APPLY = "controllers/policy_apply.py"
UPGRADE_OBSERVE = "controllers/upgrade_observe.py"

# (apiGroup, resource) -> verb -> its caller, for every namespaced kind: in the
# ClusterRole when the operator watches every namespace, else in watchNamespace's Role.
NAMESPACED_CALLERS: dict[tuple[str, str], dict[str, Caller]] = {
    ("slurmkube.io", "allocationsources"): {
        "get": Caller(POLICY, 'kube.get(wk.API_VERSION, "AllocationSource"'),
        "list": Caller(POLICY, 'kube.list(wk.API_VERSION, "AllocationSource"'),
        "watch": Caller(POLICY, '@kopf.on.event(GROUP, VERSION, "allocationsources")'),
        # kopf's finalizer, which an on.delete handler needs.
        "patch": Caller(POLICY, '@kopf.on.delete(GROUP, VERSION, "allocationsources")'),
    },
    ("slurmkube.io", "allocationsources/status"): {
        "patch": Caller(POLICY_APPLY, 'kube.patch_status(wk.API_VERSION, "AllocationSource"'),
    },
    ("slurmkube.io", "slurmclusters"): {
        "get": Caller("controllers/observe.py", 'kube.get(API, "SlurmCluster"'),
        **kopf_watch(HANDLERS, '@kopf.on.event(GROUP, VERSION, "slurmclusters")'),
        # kopf's finalizer, which an on.delete handler needs.
        "patch": Caller(HANDLERS, '@kopf.on.delete(GROUP, VERSION, "slurmclusters")'),
    },
    ("slurmkube.io", "nodesets"): {
        "list": Caller(CACHES, '@kopf.index(wk.GROUP, "v1alpha1", "nodesets")'),
        "watch": Caller(HANDLERS, '@kopf.on.event(GROUP, VERSION, "nodesets")'),
        "patch": Caller(HANDLERS, '@kopf.on.delete(GROUP, VERSION, "nodesets")'),
    },
    ("slurmkube.io", "slurmclusters/status"): {
        "patch": Caller("controllers/status.py", 'kube.patch_status(API, "SlurmCluster"'),
    },
    ("slurmkube.io", "nodesets/status"): {
        "patch": Caller("controllers/status.py", 'kube.patch_status(API, "NodeSet"'),
    },
    # OwnerReferencesPermissionEnforcement: an owner reference with
    # blockOwnerDeletion needs update on the owner's finalizers.
    ("slurmkube.io", "slurmclusters/finalizers"): {
        "update": Caller(APPLY, "kube.apply(obj, owner=owner)"),
    },
    ("slurmkube.io", "nodesets/finalizers"): {
        "update": Caller(APPLY, "kube.apply(pod, owner=snap.node_set_objs[node_set])"),
    },
    ("", "pods"): {
        "get": Caller("controllers/settings.py", 'kube.get("v1", "Pod", names.controller_pod'),
        "list": Caller(HANDLERS, '_kube().list("v1", "Pod", namespace, selector)'),
        "watch": Caller(LENDING, 'kopf.on.event("", "v1", "pods"'),
        **applied(APPLY, "kube.apply(pod, owner=snap.node_set_objs[node_set])"),
        "delete": Caller(APPLY, 'kube.delete("v1", "Pod", name, namespace)'),
    },
    ("", "pods/status"): {"patch": Caller("kube/client.py", "patch_namespaced_pod_status")},
    ("", "services"): {
        **applied("build/pod.py", '"kind": "Service"'),
        "delete": Caller("plan/cluster.py", '("v1", "Service", names.slurmdbd)'),
    },
    ("", "configmaps"): {
        "get": Caller("controllers/topology_moves.py", 'kube.get("v1", "ConfigMap"'),
        **applied(APPLY, "kube.apply(config_map, owner=snap.cluster_obj)"),
    },
    ("policy", "poddisruptionbudgets"): applied(APPLY, "kube.apply(budget, owner=cluster_obj)"),
    ("", "events"): {"create": Caller("kube/client.py", "create_namespaced_event")},
    ("apps", "statefulsets"): {
        "get": Caller(UPGRADE_OBSERVE, 'kube.get("apps/v1", kind, name, namespace)'),
        **applied("build/slurmctld.py", '"kind": "StatefulSet"'),
    },
    ("apps", "deployments"): {
        "get": Caller(UPGRADE_OBSERVE, 'kube.get("apps/v1", kind, name, namespace)'),
        **applied("build/pod.py", '"kind": "Deployment"'),
        "delete": Caller("plan/cluster.py", '("apps/v1", "Deployment", names.slurmdbd)'),
    },
}
KUEUE_NAMESPACED_CALLERS: dict[tuple[str, str], dict[str, Caller]] = {
    ("slurmkube.io", "allocationsources"): {
        "get": Caller(POLICY, 'kube.get(wk.API_VERSION, "AllocationSource"'),
        "list": Caller(POLICY, 'kube.list(wk.API_VERSION, "AllocationSource"'),
        "watch": Caller(POLICY, '@kopf.on.event(GROUP, VERSION, "allocationsources")'),
        # kopf's finalizer, which an on.delete handler needs.
        "patch": Caller(POLICY, '@kopf.on.delete(GROUP, VERSION, "allocationsources")'),
    },
    ("slurmkube.io", "allocationsources/status"): {
        "patch": Caller(POLICY_APPLY, 'kube.patch_status(wk.API_VERSION, "AllocationSource"'),
    },
    ("kueue.x-k8s.io", "workloads"): {
        "list": Caller(CACHES, '@kopf.index("kueue.x-k8s.io", "v1beta2", "workloads")'),
        "watch": Caller(LENDING, 'kopf.on.event("kueue.x-k8s.io", "v1beta2", "workloads")'),
        "patch": Caller(POLICY_APPLY, '"Workload",\n                label.workload'),
    },
    **{
        (group, kind): {
            "patch": Caller(POLICY_APPLY, "{PRIORITY_CLASS_LABEL: label.priority_class}")
        }
        for group, kind in (("batch", "jobs"), ("jobset.x-k8s.io", "jobsets"))
    },
    ("kueue.x-k8s.io", "workloads/status"): {
        "patch": Caller("controllers/lending_apply.py", '"kind": "Workload",'),
    },
}
# Secrets by name only: never list or watch.
SECRET_CALLERS: dict[tuple[str, str], dict[str, Caller]] = {
    ("", "secrets"): {
        "get": Caller("kube/client.py", "read_namespaced_secret(name, namespace)"),
        "create": Caller(APPLY, "kube.create_if_absent(secret"),
        "patch": Caller("build/slurmdbd.py", '"kind": "Secret"'),
        "delete": Caller("plan/cluster.py", '("v1", "Secret", names.slurmdbd_config)'),
    },
}
# Cluster-scoped kinds: only a ClusterRole can grant them.
CLUSTER_CALLERS: dict[tuple[str, str], dict[str, Caller]] = {
    ("", "nodes"): {
        "get": Caller("controllers/health_apply.py", 'kube.get("v1", "Node", node, None)'),
        "list": Caller("kube/informer.py", "k8s.CoreV1Api(api).list_node"),
        "watch": Caller("kube/informer.py", "watch=True,"),
        "patch": Caller("kube/client.py", 'self._resource("v1", "Node").patch('),
    },
    ("apiextensions.k8s.io", "customresourcedefinitions"): kopf_watch(
        "kopf/_core/reactor/observation.py", "references.CRDS"
    ),
}
KUEUE_CLUSTER_CALLERS: dict[tuple[str, str], dict[str, Caller]] = {
    ("slurmkube.io", "slurmreservationchecks"): {
        "get": Caller("controllers/lending_observe.py", "wk.CHECK_PARAMETERS_KIND"),
        **kopf_watch(LENDING, 'kopf.on.event(wk.GROUP, "v1alpha1", "slurmreservationchecks")'),
    },
    ("kueue.x-k8s.io", "admissionchecks"): {
        "list": Caller(LENDING, 'kube.list(KUEUE, "AdmissionCheck", None)'),
        "watch": Caller(LENDING, 'kopf.on.event("kueue.x-k8s.io", "v1beta2", "admissionchecks")'),
    },
    ("kueue.x-k8s.io", "admissionchecks/status"): {
        "patch": Caller("controllers/lending_apply.py", '"kind": "AdmissionCheck",'),
    },
    **{
        ("kueue.x-k8s.io", kind): {
            **applied(APPLY, "for obj in plan.kueue_objects:"),
            "list": Caller(DELETION, 'kube.list("kueue.x-k8s.io/v1beta2", kind, None, selector)'),
            "delete": Caller(DELETION, 'kube.delete("kueue.x-k8s.io/v1beta2", kind'),
        }
        for kind in ("resourceflavors", "topologies")
    },
    **{
        ("kueue.x-k8s.io", kind): {
            **applied(POLICY_APPLY, "kube.apply(obj)"),
            "list": Caller(POLICY_APPLY, "kube.list(KUEUE_API, kind, None,"),
            "delete": Caller(POLICY_APPLY, "kube.delete(KUEUE_API, kind, name, namespace)"),
        }
        for kind in ("cohorts", "clusterqueues", "localqueues", "workloadpriorityclasses")
    },
}
# kopf lists and watches namespaces when it serves named namespaces.
NAMESPACE_MODE_CALLERS: dict[tuple[str, str], dict[str, Caller]] = {
    ("", "namespaces"): kopf_watch("kopf/_core/reactor/observation.py", "references.NAMESPACES"),
}
# (apiGroup, resource, resourceName or "") in the release namespace.
RELEASE_CALLERS: dict[tuple[str, str, str], dict[str, Caller]] = {
    ("coordination.k8s.io", "leases", ""): {
        "create": Caller("kube/lease.py", "create_namespaced_lease"),
    },
    ("coordination.k8s.io", "leases", "slurmkube-operator"): {
        "get": Caller("kube/lease.py", "read_namespaced_lease"),
        "update": Caller("kube/lease.py", "replace_namespaced_lease"),
    },
    # kopf posts Events about cluster-scoped objects in its own namespace.
    ("", "events", ""): {"create": Caller("kopf/_cogs/clients/events.py", "get_default_namespace")},
}
EVERY_CALLER_TABLE = (
    NAMESPACED_CALLERS,
    KUEUE_NAMESPACED_CALLERS,
    SECRET_CALLERS,
    CLUSTER_CALLERS,
    KUEUE_CLUSTER_CALLERS,
    NAMESPACE_MODE_CALLERS,
    RELEASE_CALLERS,
)


def verbs(*tables: Mapping[Any, Mapping[str, Caller]]) -> dict[Any, set[str]]:
    return {key: set(by_verb) for table in tables for key, by_verb in table.items()}


KNOWN_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete"}

# The chart has no default image: every render names one (`make images`' local names).
IMAGE = ["--set", "image.registry=slurmkube"]

# Value sets every structural test runs against.
VALUE_SETS: dict[str, list[str]] = {
    "defaults": [],
    "namespaced": ["--set", "watchNamespace=slurm", "--set", "replicaCount=1"],
    "cluster-namespaces": ["--set", "clusterNamespaces={slurm,team-b}"],
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


def template_without_image(helm: Path, *values: str) -> subprocess.CompletedProcess[str]:
    return run_helm(
        helm, "template", "slurmkube", str(CHART), "--kube-version", KUBE_VERSION, *values
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
        *IMAGE,
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
@pytest.mark.parametrize("name", ["defaults", "namespaced", "no-kueue", "cluster-namespaces"])
def test_chart_lints_strictly(helm: Path, name: str) -> None:
    result = run_helm(helm, "lint", "--strict", str(CHART), *IMAGE, *VALUE_SETS[name])
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


def by_name(objects: list[Obj], kind: str) -> dict[tuple[str | None, str], Obj]:
    return {
        (o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in of_kind(objects, kind)
    }


def operator_cluster_role(objects: list[Obj]) -> Obj:
    """The ClusterRole of everything but Secrets (those may have one of their own)."""
    (role,) = [r for r in of_kind(objects, "ClusterRole") if ("", "nodes") in rules_of(r)]
    return role


def secret_readers(objects: list[Obj]) -> list[Obj]:
    return [
        r
        for r in of_kind(objects, "ClusterRole") + of_kind(objects, "Role")
        if ("", "secrets") in rules_of(r)
    ]


@pytest.mark.parametrize(
    ("table", "key"),
    [(table, key) for table in EVERY_CALLER_TABLE for key in table],
    ids=lambda v: "/".join(v) if isinstance(v, tuple) else "",
)
def test_every_granted_verb_has_its_caller_in_the_code(
    table: Mapping[Any, Mapping[str, Caller]], key: tuple[str, ...]
) -> None:
    for verb, caller in table[key].items():
        assert caller.needle in caller.source(), (
            f"{key} {verb}: {caller.where} no longer has {caller.needle!r}; "
            "drop the rule from the chart if nothing else calls it"
        )


def test_all_namespaces_rbac_is_exactly_what_the_code_calls(helm: Path) -> None:
    objects = render(helm)
    assert rules_of(operator_cluster_role(objects)) == verbs(
        CLUSTER_CALLERS, KUEUE_CLUSTER_CALLERS, NAMESPACED_CALLERS, KUEUE_NAMESPACED_CALLERS
    )
    assert "--all-namespaces" in operator_container(objects)["args"]


def test_watch_namespace_moves_namespaced_rules_and_secrets_into_a_role(helm: Path) -> None:
    objects = render(helm, *VALUE_SETS["namespaced"])
    assert rules_of(operator_cluster_role(objects)) == verbs(
        CLUSTER_CALLERS, KUEUE_CLUSTER_CALLERS, NAMESPACE_MODE_CALLERS
    )
    (watched,) = [r for r in of_kind(objects, "Role") if r["metadata"]["namespace"] == "slurm"]
    assert rules_of(watched) == verbs(NAMESPACED_CALLERS, KUEUE_NAMESPACED_CALLERS, SECRET_CALLERS)
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
    assert secret_readers(objects) == [watched]


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_no_pods_exec_and_no_secret_list_or_watch_anywhere(helm: Path, name: str) -> None:
    objects = render(helm, *VALUE_SETS[name])
    for role in of_kind(objects, "ClusterRole") + of_kind(objects, "Role"):
        granted = rules_of(role)
        assert ("", "pods/exec") not in granted
        assert not granted.get(("", "secrets"), set()) & {"list", "watch"}


def test_secrets_are_a_role_in_each_cluster_namespace(helm: Path) -> None:
    objects = render(helm, *VALUE_SETS["cluster-namespaces"])
    readers = secret_readers(objects)
    assert {(r["kind"], r["metadata"].get("namespace")) for r in readers} == {
        ("Role", "slurm"),
        ("Role", "team-b"),
    }
    for reader in readers:
        assert rules_of(reader) == verbs(SECRET_CALLERS)
    bindings = by_name(objects, "RoleBinding")
    for reader in readers:
        binding = bindings[(reader["metadata"]["namespace"], reader["metadata"]["name"])]
        assert binding["roleRef"]["name"] == reader["metadata"]["name"]
        assert binding["subjects"][0]["namespace"] == RELEASE_NAMESPACE


def test_without_cluster_namespaces_secrets_are_get_by_name_cluster_wide(helm: Path) -> None:
    objects = render(helm)
    (reader,) = secret_readers(objects)
    assert reader["kind"] == "ClusterRole"
    assert rules_of(reader) == verbs(SECRET_CALLERS)
    (binding,) = [
        b
        for b in of_kind(objects, "ClusterRoleBinding")
        if b["roleRef"]["name"] == reader["metadata"]["name"]
    ]
    assert binding["subjects"][0]["namespace"] == RELEASE_NAMESPACE


def test_kueue_rules_are_dropped_when_kueue_is_off(helm: Path) -> None:
    granted = rules_of(operator_cluster_role(render(helm, *VALUE_SETS["no-kueue"])))
    assert not [key for key in granted if key[0] == "kueue.x-k8s.io"]
    assert ("slurmkube.io", "slurmreservationchecks") not in granted
    assert ("", "pods") in granted


def test_release_namespace_role_is_the_lease_by_name_and_kopf_events(helm: Path) -> None:
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
    assert granted == verbs(RELEASE_CALLERS)
    bindings = [
        b
        for b in of_kind(objects, "RoleBinding")
        if b["metadata"]["namespace"] == RELEASE_NAMESPACE
    ]
    assert {b["roleRef"]["name"] for b in bindings} == {role["metadata"]["name"]}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_rbac_rule_says_why(helm: Path, name: str) -> None:
    result = template_without_image(helm, *IMAGE, *VALUE_SETS[name])
    lines = result.stdout.splitlines()
    verb_lines = [i for i, line in enumerate(lines) if line.strip().startswith("verbs:")]
    assert len(verb_lines) >= len(NAMESPACED_CALLERS) // 2
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


@pytest.mark.parametrize("values", [[], ["--set", "image.tag=0.1.0"], ["--set", "replicaCount=0"]])
def test_chart_without_an_image_source_fails_closed(helm: Path, values: list[str]) -> None:
    result = template_without_image(helm, *values)
    assert result.returncode != 0
    assert "image.registry is required" in result.stderr


DIGEST = "sha256:" + "b" * 64


@pytest.mark.parametrize(
    ("values", "image"),
    [
        (["--set", "image.registry=mirror/hpc"], "mirror/hpc/operator:0.1.0"),
        (["--set", "image.registry=mirror/hpc/"], "mirror/hpc/operator:0.1.0"),
        (["--set", "image.repository=team/op"], "team/op:0.1.0"),
        (["--set", "image.registry=a", "--set", "image.repository=b/op"], "b/op:0.1.0"),
        (["--set", f"image.digest={DIGEST}"], f"slurmkube/operator@{DIGEST}"),
        (["--set", "image.registry=r", "--set", f"image.digest={DIGEST}"], f"r/operator@{DIGEST}"),
    ],
)
def test_operator_image_comes_only_from_explicit_values(
    helm: Path, values: list[str], image: str
) -> None:
    result = template_without_image(helm, *values)
    assert result.returncode == 0, result.stderr
    objects = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    assert operator_container(objects)["image"] == image


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
    result = template_without_image(helm, *IMAGE, "--set", "metrics.serviceMonitor.enabled=true")
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
        ["--set", "clusterNamespaces={Not_A_Namespace}"],
        ["--set", "image.registry=Has Spaces"],
    ],
)
def test_schema_rejects_bad_values(helm: Path, bad: list[str]) -> None:
    result = template_without_image(helm, *IMAGE, *bad)
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
