"""Reading the API server's audit log and judging the e2e operators' requests
against a chart's grants (e2e/slurmkube_e2e/audit.py)."""

from __future__ import annotations

import base64
import json
import subprocess
from datetime import UTC, datetime, timedelta
from itertools import count
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmkube_e2e.audit import (
    AUDITED_GROUP,
    AuditedRequest,
    audit_policy,
    judge,
    operator_user,
    read_events,
)
from slurmkube_e2e.operator_identity import operator_kubeconfig
from slurmkube_e2e.rbac import Request, User, grants

STARTED = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
IDS = count()


def event(
    verb: str,
    resource: str = "",
    *,
    namespace: str = "",
    name: str = "",
    subresource: str = "",
    group: str = "",
    uri: str = "",
    code: int = 200,
    stage: str = "ResponseComplete",
    audit_id: str | None = None,
    at: datetime = STARTED + timedelta(seconds=1),
    user: str = operator_user("default"),
    groups: tuple[str, ...] = ("system:masters", AUDITED_GROUP, "system:authenticated"),
) -> str:
    """One audit.k8s.io/v1 Event line, at Metadata level."""
    out: dict[str, Any] = {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "auditID": audit_id or f"id-{next(IDS)}",
        "stage": stage,
        "requestURI": uri or f"/api/v1/{resource}?watch=true",
        "verb": verb,
        "user": {"username": user, "groups": list(groups)},
        "userAgent": "kopf/1.45",
        "responseStatus": {"metadata": {}, "code": code},
        "requestReceivedTimestamp": at.isoformat().replace("+00:00", "Z"),
    }
    if resource:
        ref = {"resource": resource, "namespace": namespace, "name": name, "apiVersion": "v1"}
        ref |= {"subresource": subresource} if subresource else {}
        ref |= {"apiGroup": group} if group else {}
        out["objectRef"] = {k: v for k, v in ref.items() if v}
    return json.dumps(out)


def test_the_policy_logs_the_e2e_operators_only_and_no_bodies() -> None:
    rules = audit_policy()["rules"]
    assert rules == [
        {"level": "Metadata", "userGroups": [AUDITED_GROUP]},
        {"level": "None"},
    ]
    assert audit_policy()["omitStages"] == ["RequestReceived"]


def test_a_request_logged_at_two_stages_counts_once() -> None:
    lines = [
        event("watch", "pods", stage="ResponseStarted", audit_id="w"),
        event("watch", "pods", stage="ResponseComplete", audit_id="w"),
    ]
    assert [r.request for r in read_events(lines, STARTED)] == [Request("watch", resource="pods")]


def test_requests_of_others_and_of_earlier_sessions_are_left_out() -> None:
    lines = [
        event("get", "pods", namespace="t", name="p", user="someone", groups=("system:masters",)),
        event("get", "pods", namespace="t", name="old", at=STARTED - timedelta(seconds=1)),
        event("get", "pods", namespace="t", name="new"),
        "",
    ]
    assert [r.request.name for r in read_events(lines, STARTED)] == ["new"]


def test_an_apply_that_made_the_object_was_also_a_create() -> None:
    lines = [
        event("patch", "configmaps", namespace="t", name="c", code=201),
        event("patch", "configmaps", namespace="t", name="c", code=200),
    ]
    verbs = [r.request.verb for r in read_events(lines, STARTED)]
    assert verbs == ["patch", "create", "patch"]


def test_a_non_resource_request_is_its_path_without_the_query() -> None:
    lines = [event("get", uri="/apis/kueue.x-k8s.io/v1beta2?timeout=32s")]
    (found,) = read_events(lines, STARTED)
    assert found.request == Request("get", path="/apis/kueue.x-k8s.io/v1beta2")
    assert (found.release_namespace, found.user_agent) == ("default", "kopf/1.45")


def test_the_release_namespace_is_the_users_suffix() -> None:
    lines = [event("get", "leases", group="coordination.k8s.io", user=operator_user("e2e-ha-1"))]
    assert read_events(lines, STARTED)[0].release_namespace == "e2e-ha-1"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 1 is not JSON"),
        (event("get", "pods", user="mallory"), "user 'mallory' of group slurmkube:e2e-operators"),
    ],
)
def test_a_log_line_that_cannot_be_read_is_an_error_naming_it(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        read_events([line], STARTED)


# A small chart: pods read anywhere and deleted, a lease by name in the release namespace.
def chart(namespace: str) -> list[dict[str, Any]]:
    sa = {"kind": "ServiceAccount", "name": "op", "namespace": namespace}
    ref = "rbac.authorization.k8s.io"
    return [
        {
            "kind": "ClusterRole",
            "metadata": {"name": "op"},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]},
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
            ],
        },
        {
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "op"},
            "roleRef": {"apiGroup": ref, "kind": "ClusterRole", "name": "op"},
            "subjects": [sa],
        },
        {
            "kind": "Role",
            "metadata": {"name": "lease", "namespace": namespace},
            "rules": [
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "resourceNames": ["lock"],
                    "verbs": ["get", "update"],
                }
            ],
        },
        {
            "kind": "RoleBinding",
            "metadata": {"name": "lease", "namespace": namespace},
            "roleRef": {"apiGroup": ref, "kind": "Role", "name": "lease"},
            "subjects": [sa],
        },
    ]


DISCOVERY = [
    {
        "kind": "ClusterRole",
        "metadata": {"name": "system:discovery"},
        "rules": [{"nonResourceURLs": ["/api", "/api/*", "/version"], "verbs": ["get"]}],
    },
    {
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "system:discovery"},
        "roleRef": {"apiGroup": "", "kind": "ClusterRole", "name": "system:discovery"},
        "subjects": [{"kind": "Group", "name": "system:authenticated"}],
    },
]


def audited(request: Request, namespace: str = "default") -> AuditedRequest:
    return AuditedRequest(request, namespace, "kopf/1.45", 200)


def judged(*requests: AuditedRequest) -> Any:
    namespaces = {r.release_namespace for r in requests} | {"default"}
    users = {ns: User.service_account(ns, "op") for ns in namespaces}
    return judge(
        requests,
        {ns: grants(chart(ns), users[ns]) for ns in namespaces},
        {ns: grants(DISCOVERY, users[ns]) for ns in namespaces},
    )


LEASE = Request("get", "coordination.k8s.io", "leases", namespace="default", name="lock")


def test_allowed_requests_mark_the_verbs_they_used_and_leave_the_rest_unused() -> None:
    report = judged(
        audited(Request("get", resource="pods", namespace="t", name="p")),
        audited(Request("list", resource="pods")),
        audited(LEASE),
        audited(Request("get", path="/version")),
    )
    assert report.denied == []
    assert report.must_not_need == []
    assert report.unused == [
        "ClusterRole/op rule 0: get,list,delete pods [core]: delete pods [core]",
        "ClusterRole/op rule 1: get secrets [core]: get secrets [core]",
        "Role/lease rule 0: get,update leases [coordination.k8s.io] named lock: "
        "update leases [coordination.k8s.io] named lock",
    ]
    assert report.defaults_used == {"ClusterRole/system:discovery: get /api,/api/*,/version": 1}
    assert report.requests == 4


def test_a_request_no_rule_allows_is_denied_once_per_kind_with_its_count() -> None:
    report = judged(
        audited(Request("patch", resource="pods", namespace="a", name="p")),
        audited(Request("patch", resource="pods", namespace="b", name="q")),
        audited(Request("get", path="/metrics")),
    )
    assert [(f.kind, f.count, f.example) for f in report.denied] == [
        ("get /metrics", 1, "get /metrics"),
        ("patch pods (namespaced)", 2, "patch pods p in a"),
    ]


def test_each_operator_is_judged_by_the_chart_of_its_own_namespace() -> None:
    elsewhere = Request("get", "coordination.k8s.io", "leases", namespace="ha", name="lock")
    report = judged(audited(elsewhere, "ha"), audited(elsewhere, "default"))
    assert [(f.example, f.count) for f in report.denied] == [
        ("get leases.coordination.k8s.io lock in ha", 1)
    ]


@pytest.mark.parametrize(
    "request_",
    [
        Request("create", resource="pods", subresource="exec", namespace="t", name="p"),
        Request("get", resource="pods", subresource="exec", namespace="t", name="p"),
        Request("list", resource="secrets"),
        Request("watch", resource="secrets", namespace="t"),
    ],
)
def test_requests_the_operator_must_never_make_are_named_even_if_allowed(
    request_: Request,
) -> None:
    report = judged(audited(request_))
    assert [f.count for f in report.must_not_need] == [1]


def test_the_report_is_json() -> None:
    report = judged(audited(Request("delete", resource="nodes", name="n")), audited(LEASE))
    data = json.loads(json.dumps(report.as_json()))
    assert data["denied"][0]["kind"] == "delete nodes (cluster-wide)"
    assert data["denied"][0]["user_agents"] == ["kopf/1.45"]
    assert "update leases [coordination.k8s.io] named lock" in data["chart_rules"][2]["unused"]


def test_an_e2e_operators_certificate_names_its_user_and_groups_and_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    (run / "pki").mkdir(parents=True)
    ca_key, ca_crt = run / "pki" / "ca.key", run / "pki" / "ca.crt"
    subprocess.run(
        ["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(ca_key)],
        check=True,
    )
    ca = ["req", "-x509", "-new", "-key", str(ca_key), "-subj", "/CN=test-ca", "-days", "1"]
    subprocess.run(["openssl", *ca, "-out", str(ca_crt)], check=True)
    admin = {"clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}]}
    (run / "kubeconfig").write_text(yaml.safe_dump(admin))
    monkeypatch.setenv("SLURMKUBE_RUN", str(run))

    path = operator_kubeconfig(run / "kubeconfig", "e2e-ha-1", tmp_path / "op")

    config = yaml.safe_load(path.read_text())
    assert config["clusters"][0]["cluster"] == admin["clusters"][0]["cluster"]
    (user,) = config["users"]
    assert user["name"] == "slurmkube-e2e:e2e-ha-1"
    crt = tmp_path / "op.crt"
    crt.write_bytes(base64.b64decode(user["user"]["client-certificate-data"]))
    subject = subprocess.run(
        ["openssl", "x509", "-in", str(crt), "-noout", "-subject", "-ext", "extendedKeyUsage"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "O = system:masters, O = slurmkube:e2e-operators" in subject
    assert "CN = slurmkube-e2e:e2e-ha-1" in subject
    assert "TLS Web Client Authentication" in subject
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", str(ca_crt), str(crt)], capture_output=True, check=False
    )
    assert verified.returncode == 0, verified.stderr
    assert path.stat().st_mode & 0o077 == 0


def test_an_operator_on_a_cluster_this_checkout_did_not_start_keeps_its_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURMKUBE_RUN", str(tmp_path / "run"))
    kind = tmp_path / "kind.kubeconfig"
    assert operator_kubeconfig(kind, "default", tmp_path / "op") == kind


def test_every_e2e_test_namespace_fits_in_an_operators_certificate() -> None:
    assert len(operator_user("e2e-" + "x" * 40 + "-abcd")) <= 64
    with pytest.raises(ValueError, match="too long for an e2e operator's certificate"):
        operator_user("x" * 51)
