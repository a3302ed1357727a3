"""Every Kubernetes API request the e2e operators made this session, from the
API server's audit log, is one the chart's RBAC allows.

Runs after every other test (conftest.py orders it by its marker). The
operators authenticate as their own user (slurmkube_e2e/operator_identity.py)
in system:masters, so nothing was refused while the suite ran; here each
request is judged against the chart rendered with the values `make demo`
installs it with, for the namespace that operator's chart would be in, bound
to the chart's ServiceAccount, plus the cluster's default bindings every
ServiceAccount has (discovery). A request the chart would deny fails, and so
does any request the operator must never need (pods/exec, Secret list/watch).
Rules no request used are printed and written to .run/rbac-audit.json; they
fail nothing (server-side apply's create shows as a patch answered 201,
which counts; an admission plugin's check, like update on */finalizers for
blockOwnerDeletion, is no request of its own).
"""

from __future__ import annotations

import json
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmkube_e2e.audit import AuditedRequest, Report, judge, read_events
from slurmkube_e2e.demo import CHART_VALUES, RELEASE
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.layout import Layout
from slurmkube_e2e.operator import OperatorProcess
from slurmkube_e2e.operator_identity import is_local_cluster
from slurmkube_e2e.rbac import Grant, User, grants

pytestmark = [pytest.mark.e2e, pytest.mark.after_all_others]

RBAC_KINDS = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
DEFAULTS_LABEL = "kubernetes.io/bootstrapping=rbac-defaults"
# make e2e-local leaves this one out (it needs real nodes, `make test-real-nodes`).
NOT_IN_THE_SUITE = {"test_real_nodes.py"}


def audited_requests(layout: Layout, since: datetime) -> list[AuditedRequest]:
    """From the log and its rotated backups (kube-apiserver-<time>.log), oldest first."""
    log = layout.audit_log
    files = [*sorted(log.parent.glob(f"{log.stem}-*{log.suffix}")), log]
    found: list[AuditedRequest] = []
    for path in files:
        if path.exists():
            lines = path.read_text().splitlines(keepends=True)
            # The API server may be writing the last line right now.
            complete = [line for line in lines if line.endswith("\n")]
            found.extend(read_events(complete, since))
    return found


def chart_rbac(layout: Layout, namespace: str, kube_version: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [
            str(layout.bin / "helm"),
            "template",
            RELEASE,
            str(layout.root / "helm" / "slurmkube"),
            "--namespace",
            namespace,
            "--kube-version",
            kube_version,
            *CHART_VALUES,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"helm template failed: {done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] in RBAC_KINDS]


def cluster_defaults(kube: Kube) -> list[dict[str, Any]]:
    """The API server's bootstrap roles and bindings (discovery, /version, ...)."""
    rbac = "rbac.authorization.k8s.io/v1"
    return [
        *kube.list(rbac, "ClusterRole", label_selector=DEFAULTS_LABEL),
        *kube.list(rbac, "ClusterRoleBinding", label_selector=DEFAULTS_LABEL),
    ]


def ran_the_whole_suite(session: pytest.Session) -> bool:
    """Every module of e2e/tests collected and nothing deselected by -k, -m or --deselect."""
    options = session.config.option
    if options.keyword or options.markexpr or options.deselect:
        return False
    here = Path(__file__).parent
    modules = {p.name for p in here.glob("test_*.py")} - NOT_IN_THE_SUITE
    collected = {Path(str(item.fspath)).name for item in session.items}
    return modules <= collected


def wait_for_requests(layout: Layout, since: datetime, timeout: float = 60) -> None:
    """The session's operator has made requests (it may have started just now)."""
    deadline = time.monotonic() + timeout
    while not any(r.release_namespace == "default" for r in audited_requests(layout, since)):
        assert time.monotonic() < deadline, (
            f"no request of the e2e operator in {layout.audit_log} after {timeout:.0f}s: the "
            "API server runs without the audit policy (restart it: make cluster-down cluster-up)"
        )
        time.sleep(1)


def summary(report: Report) -> str:
    lines = [f"{report.requests} requests of the e2e operators"]
    for use in report.chart_rules:
        lines.append(f"  {use.rule}: {use.requests} requests")
        lines.extend(f"    unused: {atom}" for atom in sorted(use.unused))
    lines.extend(f"  cluster default {rule}: {n}" for rule, n in report.defaults_used.items())
    return "\n".join(lines)


def test_every_request_of_the_operator_is_one_the_charts_rbac_allows(
    kube: Kube,
    kubeconfig: Path,
    operator: OperatorProcess,
    session_started: datetime,
    request: pytest.FixtureRequest,
) -> None:
    layout = Layout.from_env()
    if not is_local_cluster(kubeconfig, layout):
        pytest.skip("the audit log is the local control plane's (not kind's)")
    since = session_started
    wait_for_requests(layout, since)
    requests = audited_requests(layout, since)
    kube_version = kube.server_version()
    defaults = cluster_defaults(kube)
    chart: dict[str, list[Grant]] = {}
    default: dict[str, list[Grant]] = {}
    for namespace in sorted({r.release_namespace for r in requests}):
        user = User.service_account(namespace, RELEASE)
        chart[namespace] = grants(chart_rbac(layout, namespace, kube_version), user)
        default[namespace] = grants(defaults, user)
        assert chart[namespace], f"the chart rendered for {namespace} grants {user.name} nothing"
    report = judge(requests, chart, default)

    full = ran_the_whole_suite(request.session)
    out = layout.run / "rbac-audit.json"
    out.write_text(
        json.dumps({"full_suite": full, "since": since.isoformat(), **report.as_json()}, indent=2)
    )
    print(f"\n{summary(report)}\nwritten to {out} (full suite: {full})")

    assert report.must_not_need == [], "requests the operator must never make:\n" + "\n".join(
        f"  {f.count}x {f.kind} ({f.why}), e.g. {f.example}, by {f.user_agents}"
        for f in report.must_not_need
    )
    assert report.denied == [], "requests the chart's RBAC would deny:\n" + "\n".join(
        f"  {f.count}x {f.kind}, e.g. {f.example}, by {f.user_agents}" for f in report.denied
    )
