"""The RBAC evaluator (e2e/slurmkube_e2e/rbac.py) decides as the API server's
RBAC authorizer does: rules, bindings and their scope, then the chart's own
rules for the requests its operator makes and must never make."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkube_e2e.rbac import PolicyRule, RbacError, Request, User, allowing, grants
from tests.unit.test_helm import RELEASE_NAMESPACE, helm, render  # noqa: F401

Obj = dict[str, Any]
OPERATOR = User.service_account(RELEASE_NAMESPACE, "slurmkube")


def rule(
    verbs: list[str],
    groups: list[str] | None = None,
    resources: list[str] | None = None,
    names: list[str] | None = None,
    urls: list[str] | None = None,
) -> Obj:
    out: Obj = {"verbs": verbs}
    if urls is not None:
        out["nonResourceURLs"] = urls
    else:
        out["apiGroups"] = groups if groups is not None else [""]
        out["resources"] = resources or []
    if names:
        out["resourceNames"] = names
    return out


def role(name: str, rules: list[Obj], namespace: str | None = None) -> Obj:
    meta: Obj = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"kind": "Role" if namespace else "ClusterRole", "metadata": meta, "rules": rules}


def binding(
    name: str,
    role_ref: tuple[str, str],
    subjects: list[Obj],
    namespace: str | None = None,
) -> Obj:
    meta: Obj = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {
        "kind": "RoleBinding" if namespace else "ClusterRoleBinding",
        "metadata": meta,
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role_ref[0],
            "name": role_ref[1],
        },
        "subjects": subjects,
    }


def service_account(name: str = "op", namespace: str = "ops") -> Obj:
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


def get(resource: str, namespace: str = "", name: str = "", **more: str) -> Request:
    return Request(verb="get", resource=resource, namespace=namespace, name=name, **more)


# name -> (rule, request, allowed)
RULES: dict[str, tuple[Obj, Request, bool]] = {
    "same verb, group and resource": (rule(["get"], resources=["pods"]), get("pods"), True),
    "another verb": (rule(["get"], resources=["pods"]), Request("list", resource="pods"), False),
    "another group": (
        rule(["get"], ["apps"], ["pods"]),
        get("pods"),
        False,
    ),
    "verb *": (rule(["*"], resources=["pods"]), Request("delete", resource="pods"), True),
    "group *": (
        rule(["get"], ["*"], ["deployments"]),
        get("deployments", api_group="apps"),
        True,
    ),
    "resource * covers subresources": (
        rule(["patch"], resources=["*"]),
        Request("patch", resource="pods", subresource="status"),
        True,
    ),
    "a resource does not cover its subresource": (
        rule(["patch"], resources=["pods"]),
        Request("patch", resource="pods", subresource="status"),
        False,
    ),
    "pods/status": (
        rule(["patch"], resources=["pods/status"]),
        Request("patch", resource="pods", subresource="status"),
        True,
    ),
    "a subresource does not cover its resource": (
        rule(["patch"], resources=["pods/status"]),
        Request("patch", resource="pods"),
        False,
    ),
    "pods/exec is not pods/status": (
        rule(["create"], resources=["pods/status"]),
        Request("create", resource="pods", subresource="exec"),
        False,
    ),
    "*/status covers every status": (
        rule(["patch"], ["slurmkube.io"], ["*/status"]),
        Request("patch", "slurmkube.io", "nodesets", "status"),
        True,
    ),
    "*/status is not */scale": (
        rule(["patch"], ["slurmkube.io"], ["*/status"]),
        Request("patch", "slurmkube.io", "nodesets", "scale"),
        False,
    ),
    "resourceNames: the named object": (
        rule(["get"], ["coordination.k8s.io"], ["leases"], names=["lock"]),
        get("leases", "ns", "lock", api_group="coordination.k8s.io"),
        True,
    ),
    "resourceNames: another object": (
        rule(["get"], ["coordination.k8s.io"], ["leases"], names=["lock"]),
        get("leases", "ns", "other", api_group="coordination.k8s.io"),
        False,
    ),
    "resourceNames never cover a create (no name yet)": (
        rule(["create"], ["coordination.k8s.io"], ["leases"], names=["lock"]),
        Request("create", "coordination.k8s.io", "leases", namespace="ns"),
        False,
    ),
    "resourceNames never cover an unnamed list": (
        rule(["list"], resources=["secrets"], names=["keys"]),
        Request("list", resource="secrets", namespace="ns"),
        False,
    ),
    "nonResourceURL, exact": (
        rule(["get"], urls=["/version"]),
        Request("get", path="/version"),
        True,
    ),
    "nonResourceURL, exact, not a longer path": (
        rule(["get"], urls=["/version"]),
        Request("get", path="/version/"),
        False,
    ),
    "nonResourceURL prefix": (
        rule(["get"], urls=["/apis/*"]),
        Request("get", path="/apis/apps/v1"),
        True,
    ),
    "nonResourceURL prefix needs its slash": (
        rule(["get"], urls=["/apis/*"]),
        Request("get", path="/apis"),
        False,
    ),
    "nonResourceURL *": (rule(["get"], urls=["*"]), Request("get", path="/metrics"), True),
    "a URL rule never covers a resource": (rule(["get"], urls=["*"]), get("pods"), False),
    "a resource rule never covers a URL": (
        rule(["get"], ["*"], ["*"]),
        Request("get", path="/version"),
        False,
    ),
}


@pytest.mark.parametrize(("given_rule", "request_", "allowed"), RULES.values(), ids=RULES.keys())
def test_a_rule_matches_as_the_rbac_authorizer_does(
    given_rule: Obj, request_: Request, allowed: bool
) -> None:
    assert PolicyRule.from_manifest(given_rule, "test").allows(request_) is allowed


def granted_to(user: User, *objects: Obj) -> list[Any]:
    return grants(list(objects), user)


SA = User.service_account("ops", "op")
READ_PODS = [rule(["get", "list"], resources=["pods", "nodes"]), rule(["get"], urls=["/healthz"])]

# name -> (objects, request, allowed) for the ServiceAccount ops/op
BINDINGS: dict[str, tuple[list[Obj], Request, bool]] = {
    "a ClusterRoleBinding grants every namespace": (
        [role("r", READ_PODS), binding("b", ("ClusterRole", "r"), [service_account()])],
        get("pods", "anywhere"),
        True,
    ),
    "a ClusterRoleBinding grants a cluster-wide list": (
        [role("r", READ_PODS), binding("b", ("ClusterRole", "r"), [service_account()])],
        Request("list", resource="pods"),
        True,
    ),
    "a ClusterRoleBinding grants cluster-scoped kinds": (
        [role("r", READ_PODS), binding("b", ("ClusterRole", "r"), [service_account()])],
        get("nodes", name="n1"),
        True,
    ),
    "a ClusterRoleBinding grants URLs": (
        [role("r", READ_PODS), binding("b", ("ClusterRole", "r"), [service_account()])],
        Request("get", path="/healthz"),
        True,
    ),
    "a RoleBinding grants its Role in its namespace": (
        [role("r", READ_PODS, "team"), binding("b", ("Role", "r"), [service_account()], "team")],
        get("pods", "team"),
        True,
    ),
    "a RoleBinding grants nothing in another namespace": (
        [role("r", READ_PODS, "team"), binding("b", ("Role", "r"), [service_account()], "team")],
        get("pods", "other"),
        False,
    ),
    "a RoleBinding grants no cluster-wide list": (
        [role("r", READ_PODS, "team"), binding("b", ("Role", "r"), [service_account()], "team")],
        Request("list", resource="pods"),
        False,
    ),
    "a RoleBinding to a ClusterRole grants it in the binding's namespace only": (
        [role("r", READ_PODS), binding("b", ("ClusterRole", "r"), [service_account()], "team")],
        get("pods", "other"),
        False,
    ),
    "a RoleBinding never grants cluster-scoped kinds": (
        [role("r", READ_PODS), binding("b", ("ClusterRole", "r"), [service_account()], "team")],
        get("nodes", name="n1"),
        False,
    ),
    "a RoleBinding never grants URLs": (
        [role("r", READ_PODS), binding("b", ("ClusterRole", "r"), [service_account()], "team")],
        Request("get", path="/healthz"),
        False,
    ),
    "a binding to another ServiceAccount grants nothing": (
        [role("r", READ_PODS), binding("b", ("ClusterRole", "r"), [service_account("other")])],
        get("pods", "team"),
        False,
    ),
    "the same name in another namespace is another ServiceAccount": (
        [role("r", READ_PODS), binding("b", ("ClusterRole", "r"), [service_account("op", "x")])],
        get("pods", "team"),
        False,
    ),
    "a subject without namespace is the RoleBinding's": (
        [
            role("r", READ_PODS, "ops"),
            binding("b", ("Role", "r"), [{"kind": "ServiceAccount", "name": "op"}], "ops"),
        ],
        get("pods", "ops"),
        True,
    ),
    "a group every ServiceAccount has": (
        [
            role("r", READ_PODS),
            binding("b", ("ClusterRole", "r"), [{"kind": "Group", "name": "system:authenticated"}]),
        ],
        Request("get", path="/healthz"),
        True,
    ),
    "the ServiceAccounts of its namespace": (
        [
            role("r", READ_PODS),
            binding(
                "b", ("ClusterRole", "r"), [{"kind": "Group", "name": "system:serviceaccounts:x"}]
            ),
        ],
        get("pods", "team"),
        False,
    ),
    "a user by name": (
        [
            role("r", READ_PODS),
            binding("b", ("ClusterRole", "r"), [{"kind": "User", "name": SA.name}]),
        ],
        get("pods", "team"),
        True,
    ),
}


@pytest.mark.parametrize(("objects", "request_", "allowed"), BINDINGS.values(), ids=BINDINGS.keys())
def test_a_binding_grants_its_role_where_the_rbac_authorizer_does(
    objects: list[Obj], request_: Request, allowed: bool
) -> None:
    assert bool(allowing(grants(objects, SA), request_)) is allowed


def test_a_binding_whose_role_is_missing_is_an_error_naming_it() -> None:
    with pytest.raises(RbacError, match="RoleBinding/team/b: roleRef Role/team/gone"):
        grants([binding("b", ("Role", "gone"), [service_account()], "team")], SA)


def test_a_cluster_role_binding_to_a_role_is_an_error() -> None:
    with pytest.raises(RbacError, match="ClusterRoleBinding/b: roleRef kind 'Role'"):
        grants([role("r", READ_PODS, "t"), binding("b", ("Role", "r"), [service_account()])], SA)


def test_a_rule_without_verbs_is_an_error_naming_it() -> None:
    with pytest.raises(RbacError, match=r"ClusterRole/r rules\[1\]: a rule without verbs"):
        grants([role("r", [READ_PODS[0], {"apiGroups": [""], "resources": ["pods"]}])], SA)


NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12)


@given(namespace=NAMES, other=NAMES, resource=NAMES, verb=NAMES)
def test_a_role_binding_with_every_verb_grants_nothing_outside_its_namespace(
    namespace: str, other: str, resource: str, verb: str
) -> None:
    objects = [
        role("all", [rule(["*"], ["*"], ["*"])]),
        binding("b", ("ClusterRole", "all"), [service_account()], namespace),
    ]
    granted = grants(objects, SA)
    assert allowing(granted, Request(verb, resource=resource, namespace=namespace))
    if other != namespace:
        assert not allowing(granted, Request(verb, resource=resource, namespace=other))
    assert not allowing(granted, Request(verb, resource=resource))


@given(group=NAMES, resource=NAMES, sub=NAMES, name=NAMES, verb=NAMES)
def test_resource_names_only_ever_narrow_a_rule(
    group: str, resource: str, sub: str, name: str, verb: str
) -> None:
    request = Request(verb, group, resource, sub, "ns", name)
    broad = PolicyRule.from_manifest(rule([verb], [group], [f"{resource}/{sub}"]), "t")
    named = PolicyRule.from_manifest(rule([verb], [group], [f"{resource}/{sub}"], ["x"]), "t")
    assert broad.allows(request)
    assert named.allows(request) is (name == "x")


# The chart as the e2e (and `make demo`) installs it: name -> (request, allowed).
CHART: dict[str, tuple[Request, bool]] = {
    "slurmd pods are created anywhere": (Request("create", resource="pods", namespace="t"), True),
    "the SlurmNode condition on a pod": (
        Request("patch", resource="pods", subresource="status", namespace="t", name="p"),
        True,
    ),
    "no pods/exec": (
        Request("create", resource="pods", subresource="exec", namespace="t", name="p"),
        False,
    ),
    "a Secret by name, anywhere": (get("secrets", "t", "c-auth"), True),
    "no Secret list in a namespace": (Request("list", resource="secrets", namespace="t"), False),
    "no Secret watch cluster-wide": (Request("watch", resource="secrets"), False),
    "the lease by name in the release namespace": (
        get("leases", RELEASE_NAMESPACE, "slurmkube-operator", api_group="coordination.k8s.io"),
        True,
    ),
    "another lease in the release namespace": (
        get("leases", RELEASE_NAMESPACE, "other", api_group="coordination.k8s.io"),
        False,
    ),
    "the lease name in another namespace": (
        get("leases", "t", "slurmkube-operator", api_group="coordination.k8s.io"),
        False,
    ),
    "nodes are patched (the lease label)": (Request("patch", resource="nodes", name="n"), True),
    "nodes are never deleted": (Request("delete", resource="nodes", name="n"), False),
    "NodeSet status": (
        Request("patch", "slurmkube.io", "nodesets", "status", "t", "gpu"),
        True,
    ),
}


@pytest.mark.parametrize(("request_", "allowed"), CHART.values(), ids=CHART.keys())
def test_the_charts_rbac_for_its_service_account(
    helm: Path,  # noqa: F811
    request_: Request,
    allowed: bool,
) -> None:
    granted = grants(render(helm), OPERATOR)
    assert bool(allowing(granted, request_)) is allowed


def test_a_watch_namespace_install_grants_pods_there_only(helm: Path) -> None:  # noqa: F811
    granted = grants(render(helm, "--set", "watchNamespace=slurm"), OPERATOR)
    assert allowing(granted, Request("create", resource="pods", namespace="slurm"))
    assert not allowing(granted, Request("create", resource="pods", namespace="other"))
    assert not allowing(granted, get("secrets", "other", "c-auth"))
