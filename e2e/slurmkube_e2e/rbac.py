"""Kubernetes RBAC, evaluated: is a request allowed by a set of Roles,
ClusterRoles and their bindings, and by which rule.

Pure: manifests in, decisions out, so the chart's rules can be judged against
the requests an operator really made (the API server's audit log) without a
cluster that enforces them. The semantics are the RBAC authorizer's
(kubernetes plugin/pkg/auth/authorizer/rbac/rbac.go and
pkg/apis/rbac/v1/evaluation_helpers.go): a ClusterRoleBinding grants its
ClusterRole everywhere, cluster-scoped kinds and non-resource URLs included; a
RoleBinding grants its Role or ClusterRole only in the binding's namespace and
never a non-resource URL; a rule with resourceNames matches only requests that
name one of them (so never a create or an unnamed list).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

ALL = "*"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


class RbacError(ValueError):
    """A binding or role the evaluator cannot read; the message names the object."""


@dataclass(frozen=True)
class Request:
    """The attributes the authorizer decides on (k8s.io/apiserver authorizer.Attributes).

    A resource request has a resource; a non-resource request has only a path."""

    verb: str
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    @property
    def is_resource(self) -> bool:
        return bool(self.resource)

    def describe(self) -> str:
        if not self.is_resource:
            return f"{self.verb} {self.path}"
        what = self.resource + (f"/{self.subresource}" if self.subresource else "")
        group = f".{self.api_group}" if self.api_group else ""
        where = f" in {self.namespace}" if self.namespace else " (cluster-wide)"
        named = f" {self.name}" if self.name else ""
        return f"{self.verb} {what}{group}{named}{where}"


@dataclass(frozen=True)
class User:
    """Who asks: a user name and its groups, as the authenticator reports them."""

    name: str
    groups: tuple[str, ...] = ()

    @classmethod
    def service_account(cls, namespace: str, name: str) -> User:
        """A ServiceAccount's token user, with the groups every such token carries."""
        return cls(
            f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}",
            (
                "system:serviceaccounts",
                f"system:serviceaccounts:{namespace}",
                "system:authenticated",
            ),
        )


@dataclass(frozen=True)
class PolicyRule:
    verbs: tuple[str, ...]
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    @classmethod
    def from_manifest(cls, rule: dict[str, Any], where: str) -> PolicyRule:
        if not rule.get("verbs"):
            raise RbacError(f"{where}: a rule without verbs")

        def strings(key: str) -> tuple[str, ...]:
            value = rule.get(key) or []
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise RbacError(f"{where}: {key} must be a list of strings, got {value!r}")
            return tuple(value)

        return cls(
            verbs=strings("verbs"),
            api_groups=strings("apiGroups"),
            resources=strings("resources"),
            resource_names=strings("resourceNames"),
            non_resource_urls=strings("nonResourceURLs"),
        )

    def allows(self, request: Request) -> bool:
        if not _matches(self.verbs, request.verb):
            return False
        if not request.is_resource:
            return any(_url_matches(url, request.path) for url in self.non_resource_urls)
        return (
            _matches(self.api_groups, request.api_group)
            and self._resource_matches(request)
            and (not self.resource_names or request.name in self.resource_names)
        )

    def _resource_matches(self, request: Request) -> bool:
        combined = (
            f"{request.resource}/{request.subresource}" if request.subresource else request.resource
        )
        for resource in self.resources:
            if resource in (ALL, combined):
                return True
            if request.subresource and resource == f"*/{request.subresource}":
                return True
        return False

    def describe(self) -> str:
        if self.non_resource_urls:
            return f"{','.join(self.verbs)} {','.join(self.non_resource_urls)}"
        groups = ",".join(g or "core" for g in self.api_groups)
        named = f" named {','.join(self.resource_names)}" if self.resource_names else ""
        return f"{','.join(self.verbs)} {','.join(self.resources)} [{groups}]{named}"


def _matches(allowed: Sequence[str], value: str) -> bool:
    return ALL in allowed or value in allowed


def _url_matches(rule_url: str, path: str) -> bool:
    if rule_url in (ALL, path):
        return True
    return rule_url.endswith(ALL) and path.startswith(rule_url[:-1])


@dataclass(frozen=True)
class Grant:
    """One rule of one role, as a binding grants it: everywhere (namespace None)
    or in one namespace."""

    role: str  # "ClusterRole/<name>" or "Role/<namespace>/<name>"
    index: int  # the rule's position in the role
    rule: PolicyRule
    binding: str
    namespace: str | None

    def allows(self, request: Request) -> bool:
        if self.namespace is not None and (
            not request.is_resource or request.namespace != self.namespace
        ):
            return False
        return self.rule.allows(request)

    def describe(self) -> str:
        scope = "everywhere" if self.namespace is None else f"in {self.namespace}"
        return f"{self.role} rule {self.index} ({scope}): {self.rule.describe()}"


def _binds(binding: dict[str, Any], user: User, where: str) -> bool:
    for subject in binding.get("subjects") or []:
        kind, name = subject.get("kind"), subject.get("name")
        if kind == "User" and name == user.name:
            return True
        if kind == "Group" and name in user.groups:
            return True
        if kind == "ServiceAccount":
            namespace = subject.get("namespace") or binding["metadata"].get("namespace")
            if not namespace:
                raise RbacError(f"{where}: ServiceAccount subject {name} has no namespace")
            if user.name == f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}":
                return True
    return False


def grants(objects: Iterable[dict[str, Any]], user: User) -> list[Grant]:
    """Every rule the bindings among `objects` grant `user`, with its scope.

    A binding whose role is not among `objects` is an error (the API server
    would grant nothing; here it means the manifests are incomplete)."""
    objects = list(objects)
    roles: dict[str, list[PolicyRule]] = {}
    for obj in objects:
        kind, meta = obj.get("kind"), obj.get("metadata") or {}
        if kind == "ClusterRole":
            key = f"ClusterRole/{meta['name']}"
        elif kind == "Role":
            key = f"Role/{meta.get('namespace', '')}/{meta['name']}"
        else:
            continue
        roles[key] = [
            PolicyRule.from_manifest(rule, f"{key} rules[{i}]")
            for i, rule in enumerate(obj.get("rules") or [])
        ]
    found: list[Grant] = []
    for obj in objects:
        kind, meta = obj.get("kind"), obj.get("metadata") or {}
        if kind not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        namespace = meta.get("namespace") if kind == "RoleBinding" else None
        where = f"{kind}/{namespace + '/' if namespace else ''}{meta['name']}"
        if kind == "RoleBinding" and not namespace:
            raise RbacError(f"{where}: a RoleBinding without metadata.namespace")
        if not _binds(obj, user, where):
            continue
        ref = obj["roleRef"]
        if ref["kind"] == "ClusterRole":
            role = f"ClusterRole/{ref['name']}"
        elif ref["kind"] == "Role" and kind == "RoleBinding":
            role = f"Role/{namespace}/{ref['name']}"
        else:
            raise RbacError(f"{where}: roleRef kind {ref['kind']!r} cannot be bound here")
        if role not in roles:
            raise RbacError(f"{where}: roleRef {role} is not among the manifests")
        found.extend(Grant(role, i, rule, where, namespace) for i, rule in enumerate(roles[role]))
    return found


def allowing(granted: Iterable[Grant], request: Request) -> list[Grant]:
    """The grants that allow the request; empty means the authorizer denies it."""
    return [grant for grant in granted if grant.allows(request)]
