"""The e2e operator's Kubernetes API requests, from the API server's audit log,
judged against the chart's RBAC.

The local control plane logs, at Metadata level, every request of the group
`slurmkube:e2e-operators` and nothing else (`audit_policy`). Each operator an
e2e test starts authenticates as `slurmkube-e2e:<namespace>`, the
namespace its chart would be installed in (where its Lease and kopf's Events
go), so each request is judged against the chart rendered for that namespace,
bound to the chart's ServiceAccount there, plus the cluster's default bindings
every authenticated ServiceAccount has (discovery, /version). The judging here
is pure; reading the log and rendering the chart are the caller's.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from slurmkube_e2e.rbac import Grant, PolicyRule, Request, allowing

AUDITED_GROUP = "slurmkube:e2e-operators"
USER_PREFIX = "slurmkube-e2e:"
# A certificate's common name (the user) holds at most 64 characters (RFC 5280
# ub-common-name); e2e test namespaces have at most 49 (conftest.py).
MAX_USER = 64


def operator_user(namespace: str) -> str:
    """The user an e2e operator whose chart is in `namespace` authenticates as."""
    user = f"{USER_PREFIX}{namespace}"
    if len(user) > MAX_USER:
        raise ValueError(
            f"namespace {namespace!r} is too long for an e2e operator's certificate: "
            f"{user!r} has {len(user)} characters, a common name at most {MAX_USER}"
        )
    return user


def audit_policy() -> dict[str, Any]:
    """Metadata (who, what, which object, the answer; no bodies) for the e2e
    operators, nothing for anyone else; RequestReceived is omitted, each request
    is logged when its response starts or completes (audit.k8s.io/v1 Policy)."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "Metadata", "userGroups": [AUDITED_GROUP]},
            {"level": "None"},
        ],
    }


@dataclass(frozen=True)
class AuditedRequest:
    """One request of an e2e operator: what it asked and whose chart judges it."""

    request: Request
    release_namespace: str
    user_agent: str
    code: int


def _timestamp(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def read_events(lines: Iterable[str], since: datetime) -> list[AuditedRequest]:
    """The e2e operators' requests received at or after `since` (timezone-aware),
    once each (a request logged at ResponseStarted and ResponseComplete counts once).

    A patch or update answered 201 Created made the object, which the API server
    authorizes as a create too: that is a request of its own here."""
    seen: set[str] = set()
    found: list[AuditedRequest] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError as err:
            raise ValueError(f"audit log line {number} is not JSON: {err}") from err
        user = event.get("user") or {}
        username = str(user.get("username", ""))
        if AUDITED_GROUP not in (user.get("groups") or []) or event["auditID"] in seen:
            continue
        if _timestamp(event["requestReceivedTimestamp"]) < since:
            continue
        if not username.startswith(USER_PREFIX):
            raise ValueError(
                f"audit log line {number}: user {username!r} of group {AUDITED_GROUP} "
                f"is not named {USER_PREFIX}<namespace>"
            )
        seen.add(event["auditID"])
        code = int((event.get("responseStatus") or {}).get("code", 0))
        request = _request_of(event)
        audited = AuditedRequest(
            request, username.removeprefix(USER_PREFIX), event.get("userAgent", ""), code
        )
        found.append(audited)
        if request.verb in ("patch", "update") and code == 201:
            found.append(replace(audited, request=replace(request, verb="create")))
    return found


def _request_of(event: Mapping[str, Any]) -> Request:
    ref = event.get("objectRef")
    if not ref:
        return Request(verb=event["verb"], path=event["requestURI"].split("?", 1)[0])
    return Request(
        verb=event["verb"],
        api_group=ref.get("apiGroup", ""),
        resource=ref.get("resource", ""),
        subresource=ref.get("subresource", ""),
        namespace=ref.get("namespace", ""),
        name=ref.get("name", ""),
    )


def must_not_need(request: Request) -> str | None:
    """Why the operator must never make this request, or None (docs/security.md)."""
    if request.api_group == "" and request.resource == "pods" and request.subresource == "exec":
        return "pods/exec: scontrol authenticates with a JWT over the network"
    if (
        request.api_group == ""
        and request.resource == "secrets"
        and request.verb
        in (
            "list",
            "watch",
        )
    ):
        return "Secrets are read by name only: a list or watch reads every key"
    return None


@dataclass(frozen=True)
class RuleKey:
    """A chart rule, the same whatever namespace the chart was rendered for."""

    role: str  # ClusterRole/<name> or Role/<name>
    index: int

    @classmethod
    def of(cls, grant: Grant) -> RuleKey:
        kind, *_, name = grant.role.split("/")
        return cls(f"{kind}/{name}", grant.index)


def _atoms(rule: PolicyRule) -> list[PolicyRule]:
    """The rule split into one verb on one resource (or URL) each."""
    if rule.non_resource_urls:
        return [
            PolicyRule(verbs=(verb,), non_resource_urls=(url,))
            for verb in rule.verbs
            for url in rule.non_resource_urls
        ]
    return [
        PolicyRule((verb,), (group,), (resource,), rule.resource_names)
        for group in rule.api_groups
        for resource in rule.resources
        for verb in rule.verbs
    ]


@dataclass
class RuleUse:
    rule: str
    requests: int = 0
    used: set[str] = field(default_factory=set)
    unused: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Finding:
    """Requests alike (verb, kind, scope) with one example and who made them."""

    kind: str
    example: str
    count: int
    why: str
    user_agents: tuple[str, ...]


@dataclass(frozen=True)
class Report:
    requests: int
    denied: list[Finding]
    must_not_need: list[Finding]
    chart_rules: list[RuleUse]
    defaults_used: dict[str, int]

    @property
    def unused(self) -> list[str]:
        return [f"{use.rule}: {atom}" for use in self.chart_rules for atom in sorted(use.unused)]

    def as_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "denied": [vars(f) | {"user_agents": list(f.user_agents)} for f in self.denied],
            "must_not_need": [
                vars(f) | {"user_agents": list(f.user_agents)} for f in self.must_not_need
            ],
            "chart_rules": [
                {
                    "rule": use.rule,
                    "requests": use.requests,
                    "used": sorted(use.used),
                    "unused": sorted(use.unused),
                }
                for use in self.chart_rules
            ],
            "unused": self.unused,
            "cluster_defaults_used": self.defaults_used,
        }


def _kind(request: Request) -> str:
    """A request without its object's name and namespace: how findings are grouped."""
    scope = "namespaced" if request.namespace else "cluster-wide"
    if not request.is_resource:
        return request.describe()
    generic = replace(request, namespace="", name="").describe().removesuffix(" (cluster-wide)")
    return f"{generic} ({scope})"


def _findings(hits: Sequence[tuple[AuditedRequest, str]]) -> list[Finding]:
    grouped: dict[str, list[tuple[AuditedRequest, str]]] = {}
    for audited, why in hits:
        grouped.setdefault(_kind(audited.request), []).append((audited, why))
    return [
        Finding(
            kind=kind,
            example=group[0][0].request.describe(),
            count=len(group),
            why=group[0][1],
            user_agents=tuple(sorted({a.user_agent for a, _ in group})),
        )
        for kind, group in sorted(grouped.items())
    ]


def judge(
    requests: Sequence[AuditedRequest],
    chart_grants: Mapping[str, Sequence[Grant]],
    default_grants: Mapping[str, Sequence[Grant]],
) -> Report:
    """Each request against the chart's grants for its release namespace and the
    cluster's default grants for the same ServiceAccount (both keyed by namespace)."""
    uses: dict[RuleKey, RuleUse] = {}
    atoms: dict[RuleKey, list[tuple[str, PolicyRule]]] = {}
    for granted in chart_grants.values():
        for grant in granted:
            key = RuleKey.of(grant)
            if key not in uses:
                uses[key] = RuleUse(f"{key.role} rule {key.index}: {grant.rule.describe()}")
                atoms[key] = [(atom.describe(), atom) for atom in _atoms(grant.rule)]
    denied: list[tuple[AuditedRequest, str]] = []
    forbidden: list[tuple[AuditedRequest, str]] = []
    defaults: Counter[str] = Counter()
    for audited in requests:
        request, namespace = audited.request, audited.release_namespace
        if namespace not in chart_grants:
            raise KeyError(f"no chart rendered for release namespace {namespace!r}")
        why = must_not_need(request)
        if why is not None:
            forbidden.append((audited, why))
        by_chart = allowing(chart_grants[namespace], request)
        for grant in by_chart:
            key = RuleKey.of(grant)
            uses[key].requests += 1
            for text, atom in atoms[key]:
                if atom.allows(request):
                    uses[key].used.add(text)
        if by_chart:
            continue
        by_default = allowing(default_grants.get(namespace, ()), request)
        for grant in by_default:
            defaults[f"{grant.role}: {grant.rule.describe()}"] += 1
        if not by_default:
            denied.append((audited, "no rule of the chart or of the cluster's defaults"))
    for key, use in uses.items():
        use.unused = {text for text, _ in atoms[key]} - use.used
    return Report(
        requests=len(requests),
        denied=_findings(denied),
        must_not_need=_findings(forbidden),
        chart_rules=[uses[key] for key in sorted(uses, key=lambda k: (k.role, k.index))],
        defaults_used=dict(sorted(defaults.items())),
    )
