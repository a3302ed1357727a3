"""TLS in front of slurmrestd (build/slurmrestd.py, controllers/certificates.py):
what the pod runs, who holds the certificate's key, when the operator issues one."""

from __future__ import annotations

import datetime as dt
import ssl
from typing import Any

import pytest
from cryptography import x509

from slurmkube.api.documents import DocumentError
from slurmkube.api.models import SlurmCluster
from slurmkube.build.names import ClusterNames, names_of
from slurmkube.build.slurmrestd import (
    SOCKET,
    restapi_deployment,
    restapi_proxy_config_map,
    restapi_service,
    stunnel_conf,
    tls_revision,
    tls_secret_name,
    with_tls_revision,
)
from slurmkube.controllers.certificates import (
    BACKDATE,
    VALIDITY,
    expires_at,
    first_certificate,
    issue_server_certificate,
)
from slurmkube.plan.cluster import plan_cluster
from slurmkube.plan.conditions import unreachable_reason
from slurmkube.plan.model import Observed
from slurmkube.topology.fleet import fleet_node
from slurmkube_local.builders import bundle, nvl_fleet

Manifest = dict[str, Any]


def cluster(tls: dict[str, object] | None = None) -> SlurmCluster:
    extra = {"restApi": {"tls": tls}} if tls is not None else {}
    return bundle(extra=extra).cluster


def containers(obj: Manifest) -> dict[str, Manifest]:
    return {c["name"]: c for c in obj["spec"]["template"]["spec"]["containers"]}


def test_by_default_slurmrestd_listens_on_a_socket_and_stunnel_serves_the_port() -> None:
    obj = restapi_deployment(cluster())
    found = containers(obj)
    assert sorted(found) == ["slurmrestd", "tls"]
    assert found["slurmrestd"]["args"][-1] == f"unix:{SOCKET}"
    assert "ports" not in found["slurmrestd"]
    assert found["slurmrestd"]["readinessProbe"]["exec"]["command"] == ["test", "-S", SOCKET]
    assert found["tls"]["ports"] == [{"name": "https", "containerPort": 6820, "protocol": "TCP"}]
    assert found["tls"]["args"][0] == "stunnel"
    assert restapi_service(cluster())["spec"]["ports"] == [{"name": "https", "port": 6820}]


def test_only_stunnel_mounts_the_certificate_key_as_the_slurmrestd_user_without_caps() -> None:
    obj = restapi_deployment(cluster())
    volumes = {v["name"]: v for v in obj["spec"]["template"]["spec"]["volumes"]}
    tls = volumes["restapi-tls"]["secret"]
    assert tls["secretName"] == "test-restapi-tls" and tls["defaultMode"] == 0o440
    mounting = [
        name
        for name, c in containers(obj).items()
        if any(m["name"] == "restapi-tls" for m in c["volumeMounts"])
    ]
    assert mounting == ["tls"]
    context = containers(obj)["tls"]["securityContext"]
    assert context["runAsUser"] == 402 and context["runAsNonRoot"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["allowPrivilegeEscalation"] is False


def test_tls_off_is_plain_http_on_the_port_with_no_proxy() -> None:
    off = cluster({"enabled": False})
    obj = restapi_deployment(off)
    assert sorted(containers(obj)) == ["slurmrestd"]
    assert containers(obj)["slurmrestd"]["args"][-1] == "0.0.0.0:6820"
    assert restapi_service(off)["spec"]["ports"] == [{"name": "http", "port": 6820}]
    assert tls_secret_name(off) is None


def test_a_named_secret_is_mounted_and_a_new_certificate_rolls_the_pods() -> None:
    own = cluster({"secretName": "restapi-cert"})
    obj = restapi_deployment(own, tls_revision="abc")
    volumes = {v["name"]: v for v in obj["spec"]["template"]["spec"]["volumes"]}
    assert volumes["restapi-tls"]["secret"]["secretName"] == "restapi-cert"
    annotations = obj["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"slurmkube.io/restapi-tls": "abc"}
    assert "annotations" not in restapi_deployment(own)["spec"]["template"]["metadata"]


@pytest.mark.parametrize("bad", ["Upper", "a\nb", "-leading", "x" * 254, "a b"])
def test_a_secret_name_that_is_no_object_name_is_refused_naming_the_field(bad: str) -> None:
    with pytest.raises(DocumentError) as err:
        cluster({"secretName": bad})
    assert "spec.restApi.tls.secretName" in str(err.value)


def test_stunnel_speaks_tls_1_2_or_later_from_the_socket_and_names_no_spec_value() -> None:
    conf = stunnel_conf()
    assert f"connect = {SOCKET}\n" in conf
    assert "sslVersionMin = TLSv1.2\n" in conf
    assert "accept = 0.0.0.0:6820\n" in conf
    config_map = restapi_proxy_config_map(cluster())
    assert config_map["metadata"]["name"] == "test-slurmrestd-tls"
    assert config_map["data"] == {"stunnel.conf": conf}


def test_the_issued_certificate_names_the_service_and_chains_to_its_own_ca() -> None:
    names = names_of(cluster())
    issued = issue_server_certificate(names.restapi_dns_names)
    cert = x509.load_pem_x509_certificate(issued.cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        "test-slurmrestd",
        "test-slurmrestd.default",
        "test-slurmrestd.default.svc",
        "test-slurmrestd.default.svc.cluster.local",
    ]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    ca = x509.load_pem_x509_certificate(issued.ca_pem)
    cert.verify_directly_issued_by(ca)
    # What a client loads: the CA parses as a trust anchor.
    ssl.create_default_context(cadata=issued.ca_pem.decode())
    assert b"PRIVATE KEY" in issued.key_pem and b"PRIVATE KEY" not in issued.ca_pem
    again = issue_server_certificate(names.restapi_dns_names)
    assert again.ca_pem != issued.ca_pem  # each issue has a CA of its own


def observed(
    extra: dict[str, object],
    restapi_tls: str | None,
    expires_in: float | None = None,
) -> Observed:
    now = 1_800_000_000.0
    return Observed(
        bundle=bundle(block_size=2, extra=extra),
        fleet=[fleet_node(n) for n in nvl_fleet(2, 2)],
        pods=[],
        slurm_nodes=None,
        restapi_tls=restapi_tls,
        restapi_tls_expires=None if expires_in is None else now + expires_in,
        now=now,
    )


DAY = 86400.0


@pytest.mark.parametrize(
    ("extra", "expires_in", "renews"),
    [
        ({}, 31 * DAY, False),
        ({}, 29 * DAY, True),
        ({}, -DAY, True),
        ({}, None, False),  # unreadable: not replaced blindly
        ({"restApi": {"tls": {"secretName": "mine"}}}, DAY, False),  # cert-manager's to renew
    ],
)
def test_the_operators_own_certificate_is_renewed_thirty_days_before_it_ends(
    extra: dict[str, object], expires_in: float | None, renews: bool
) -> None:
    assert plan_cluster(observed(extra, "digest", expires_in)).issue_restapi_tls is renews


def test_expiry_and_the_first_certificate_of_a_bundle_are_read_from_pem() -> None:
    now = dt.datetime(2026, 12, 5, tzinfo=dt.UTC)
    one = issue_server_certificate(["a"], now=now)
    two = issue_server_certificate(["a"], now=now)
    expected = (now - BACKDATE + VALIDITY).replace(microsecond=0).timestamp()
    assert expires_at(one.cert_pem) == expected
    assert expires_at(b"garbage") is None
    assert first_certificate(two.ca_pem + one.ca_pem) == two.ca_pem
    assert first_certificate(b"") == b""
    # What a renewal writes as ca.crt: the new CA and the one before it, both trusted.
    context = ssl.create_default_context(cadata=(two.ca_pem + one.ca_pem).decode())
    assert len(context.get_ca_certs()) == 2


@pytest.mark.parametrize(
    ("extra", "present", "issues"),
    [
        ({}, None, True),
        ({}, "digest", False),
        ({"restApi": {"tls": {"secretName": "mine"}}}, None, False),
        ({"restApi": {"tls": {"enabled": False}}}, None, False),
        ({"restApi": {"replicas": 0}}, None, False),
    ],
)
def test_the_operator_issues_a_certificate_only_when_its_own_is_missing(
    extra: dict[str, object], present: str | None, issues: bool
) -> None:
    plan = plan_cluster(observed(extra, present))
    assert plan.issue_restapi_tls is issues


def test_the_plan_carries_the_certificate_digest_and_the_proxy_config() -> None:
    plan = plan_cluster(observed({}, "digest"))
    kinds = {(o["kind"], o["metadata"]["name"]): o for o in plan.objects}
    deployment = kinds[("Deployment", "test-slurmrestd")]
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["slurmkube.io/restapi-tls"] == "digest"
    assert ("ConfigMap", "test-slurmrestd-tls") in kinds
    off = plan_cluster(observed({"restApi": {"tls": {"enabled": False}}}, None))
    assert ("ConfigMap", "test-slurmrestd-tls") not in {
        (o["kind"], o["metadata"]["name"]) for o in off.objects
    }


def test_long_names_fit_a_common_name_and_stay_whole_in_the_sans() -> None:
    names = ClusterNames("c" * 50, "n" * 63)
    issued = issue_server_certificate(names.restapi_dns_names)
    cert = x509.load_pem_x509_certificate(issued.cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == list(names.restapi_dns_names)
    with pytest.raises(ValueError, match="at least one DNS name"):
        issue_server_certificate(())


def test_a_certificate_issued_while_applying_annotates_only_slurmrestds_pods() -> None:
    plan = plan_cluster(observed({}, None))
    annotated = with_tls_revision(plan.objects, tls_revision(b"cert"))
    changed = [
        (o["kind"], o["metadata"]["name"])
        for o, before in zip(annotated, plan.objects, strict=True)
        if o != before
    ]
    assert changed == [("Deployment", "test-slurmrestd")]
    index = [o["metadata"]["name"] for o in plan.objects].index("test-slurmrestd")
    template = annotated[index]["spec"]["template"]["metadata"]
    assert template["annotations"] == {"slurmkube.io/restapi-tls": tls_revision(b"cert")}
    assert "annotations" not in plan.objects[index]["spec"]["template"]["metadata"]


def test_a_named_secret_without_a_certificate_is_named_when_slurmrestd_does_not_answer() -> None:
    own = cluster({"secretName": "restapi-cert"})
    message = unreachable_reason(own, has_certificate=False, error="ConnectError")
    namespace = own.metadata.namespace or "default"
    assert message == (
        f"Secret {namespace}/restapi-cert (spec.restApi.tls.secretName) has no tls.crt, "
        "so slurmrestd's pod cannot start; ConnectError"
    )
    # With its certificate, or the operator's own, the read's error alone.
    assert unreachable_reason(own, has_certificate=True, error="ConnectError") == "ConnectError"
    assert unreachable_reason(cluster(), has_certificate=False, error="timed out") == "timed out"
