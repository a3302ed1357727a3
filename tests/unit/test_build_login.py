"""Login pods: only sackd holds the key, `kubectl exec` lands unprivileged, LDAP users
through sssd and sshd, and no `spec.login.ldap` value can add a line to sssd.conf."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkube.api.documents import DocumentError, parse_cluster
from slurmkube.api.login import DN_PATTERN, LDAP_URI_PATTERN, LdapSpec
from slurmkube.api.models import SlurmCluster
from slurmkube.build.login import LOGIN_UID, login_deployment
from slurmkube.build.names import SLURM_GID, deployment_context
from slurmkube.build.sssd import sssd_conf
from slurmkube.plan.cluster import plan_cluster
from slurmkube.render.config import plan_config
from slurmkube.render.files import render_slurm_conf
from slurmkube_local.builders import bundle, cluster_docs, nvl_fleet
from tests.unit.test_cluster_plan import observed

Manifest = dict[str, Any]
LDAP = {
    "uri": "ldaps://ldap.example.org:636",
    "baseDN": "dc=example,dc=org",
    "caConfigMap": "ldap-ca",
    "bindDN": "cn=sssd,ou=services,dc=example,dc=org",
    "bindPasswordSecret": "ldap-bind",
}


def cluster(ldap: dict[str, Any] | None = None) -> SlurmCluster:
    login: dict[str, Any] = {"replicas": 1, **({"ldap": ldap} if ldap else {})}
    return bundle(extra={"login": login}).cluster


def containers(c: SlurmCluster) -> dict[str, Manifest]:
    pod = login_deployment(c)["spec"]["template"]["spec"]
    return {container["name"]: container for container in pod["containers"]}


def mounts(container: Manifest) -> dict[str, Manifest]:
    return {m["name"]: m for m in container.get("volumeMounts", [])}


@pytest.mark.parametrize(
    ("ldap", "names"),
    [
        (None, ["login", "sackd"]),
        (LDAP, ["login", "sshd", "sssd", "sackd"]),
    ],
    ids=["kubectl exec only", "ldap users over ssh"],
)
def test_only_sackd_mounts_the_key_and_exec_lands_as_an_unprivileged_uid(
    ldap: dict[str, Any] | None, names: list[str]
) -> None:
    c = cluster(ldap)
    made = containers(c)
    assert list(made) == names
    assert [n for n, container in made.items() if "slurm-etc" in mounts(container)] == ["sackd"]
    template = login_deployment(c)["spec"]["template"]
    assert template["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] == (
        "login"
    )
    login = made["login"]["securityContext"]
    assert login["runAsUser"] == LOGIN_UID not in (0, SLURM_GID)
    assert login["runAsNonRoot"] and not login["allowPrivilegeEscalation"]
    assert login["capabilities"] == {"drop": ["ALL"]}
    assert made["login"]["args"] == ["sleep", "infinity"]


@pytest.mark.parametrize("ldap", [None, LDAP], ids=["plain", "ldap"])
def test_only_sackd_may_write_its_socket_directory(ldap: dict[str, Any] | None) -> None:
    made = containers(cluster(ldap))
    socket = {n: mounts(c)["run-slurm"] for n, c in made.items() if "run-slurm" in mounts(c)}
    assert [n for n, m in socket.items() if not m.get("readOnly")] == ["sackd"]
    assert set(socket) == set(made) - {"sssd"}


def test_sshd_is_root_with_only_the_capabilities_a_login_takes() -> None:
    context = containers(cluster(LDAP))["sshd"]["securityContext"]
    assert context["runAsUser"] == 0
    assert context["capabilities"]["drop"] == ["ALL"]
    assert not {"DAC_OVERRIDE", "SYS_ADMIN", "SYS_PTRACE", "FOWNER"} & set(
        context["capabilities"]["add"]
    )


def test_ldap_volumes_reach_only_the_containers_that_read_them() -> None:
    made = containers(cluster(LDAP))
    assert set(mounts(made["sssd"])) == {"sssd-conf", "ldap-ca", "ldap-bind", "sss-pipes", "sss-mc"}
    # sshd and sackd resolve users through sssd's sockets; only sssd sees its config,
    # the CA and the bind password.
    for name in ("login", "sshd", "sackd"):
        assert {"sss-pipes", "sss-mc"} <= set(mounts(made[name]))
        assert not {"sssd-conf", "ldap-ca", "ldap-bind"} & set(mounts(made[name]))
    assert made["sshd"]["ports"] == [{"name": "ssh", "containerPort": 22, "protocol": "TCP"}]
    env = {e["name"]: e["value"] for e in made["sssd"]["env"]}
    assert env["SLURMKUBE_LDAP_BIND_PASSWORD_FILE"] == "/etc/slurmkube/ldap-bind/password"
    pod = login_deployment(cluster(LDAP))["spec"]["template"]["spec"]
    bind = next(v for v in pod["volumes"] if v["name"] == "ldap-bind")
    assert bind["secret"]["secretName"] == "ldap-bind" and bind["secret"]["defaultMode"] == 0o400


def test_ldap_adds_the_sssd_config_map_and_the_ssh_service_and_plain_prunes_the_service() -> None:
    plan = plan_cluster(observed(extra={"login": {"replicas": 1, "ldap": LDAP}}))
    made = {(o["kind"], o["metadata"]["name"]) for o in plan.objects}
    assert {("ConfigMap", "test-login-sssd"), ("Service", "test-login")} <= made
    plain = plan_cluster(observed(extra={"login": {"replicas": 1}}))
    assert ("v1", "Service", "test-login") in plain.prune
    assert ("ConfigMap", "test-login-sssd") not in {
        (o["kind"], o["metadata"]["name"]) for o in plain.objects
    }


@pytest.mark.parametrize(("ldap", "present"), [(None, False), (LDAP, True)])
def test_slurm_conf_trusts_client_ids_only_with_ldap_users(
    ldap: dict[str, Any] | None, present: bool
) -> None:
    b = bundle(extra={"login": {"replicas": 1, **({"ldap": ldap} if ldap else {})}})
    text = render_slurm_conf(plan_config(b, nvl_fleet(1, 2), deployment_context(b.cluster)))
    assert ("\nAuthInfo=use_client_ids\n" in text) is present


def test_sssd_conf_verifies_the_server_and_keeps_system_accounts_local() -> None:
    text = sssd_conf(LdapSpec.model_validate(LDAP))
    lines = text.splitlines()
    assert lines[lines.index("[domain/ldap]") :] == [
        "[domain/ldap]",
        "id_provider = ldap",
        "auth_provider = ldap",
        "access_provider = permit",
        "ldap_uri = ldaps://ldap.example.org:636",
        "ldap_search_base = dc=example,dc=org",
        "ldap_schema = rfc2307",
        "ldap_id_use_start_tls = false",
        "ldap_tls_reqcert = demand",
        "ldap_tls_cacert = /etc/slurmkube/ldap-ca/ca.crt",
        "min_id = 10000",
        "enumerate = false",
        "cache_credentials = false",
        "ldap_default_bind_dn = cn=sssd,ou=services,dc=example,dc=org",
        "ldap_default_authtok_type = password",
    ]
    assert "filter_users = root, slurm, slurmrestd" in lines
    # No CA named: the image's system bundle, still verified.
    plain = sssd_conf(LdapSpec.model_validate({"uri": "ldaps://ldap", "baseDN": "dc=x"}))
    assert "ldap_tls_cacert = /etc/ssl/certs/ca-certificates.crt" in plain


BAD: dict[str, tuple[dict[str, Any], str]] = {
    "a second line in baseDN": (
        {"baseDN": "dc=x\n[domain/evil]"},
        "spec.login.ldap.baseDN",
    ),
    "a line break in the uri": ({"uri": "ldaps://h\nldap_tls_reqcert = never"}, "ldap.uri"),
    "not an ldap uri": ({"uri": "http://ldap.example.org"}, "spec.login.ldap.uri"),
    "a path after the host": ({"uri": "ldaps://h/dc=x"}, "spec.login.ldap.uri"),
    "ldap:// in clear": ({"uri": "ldap://h"}, "without startTLS"),
    "a bindDN with no password": (
        {"bindPasswordSecret": None},
        "bindDN and bindPasswordSecret together",
    ),
    "a bad Secret name": ({"bindPasswordSecret": "Bad_Name"}, "bindPasswordSecret"),
    "LDAP naming system ids": ({"minID": 401}, "spec.login.ldap.minID"),
    "a section in bindDN": ({"bindDN": "cn=a]\n[sssd"}, "spec.login.ldap.bindDN"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_ldap_field_is_refused_naming_the_object_and_the_field(case: str) -> None:
    change, expected = BAD[case]
    ldap = {k: v for k, v in {**LDAP, **change}.items() if v is not None}
    with pytest.raises(DocumentError) as err:
        parse_cluster(cluster_docs(extra={"login": {"replicas": 1, "ldap": ldap}}))
    assert "SlurmCluster test" in str(err.value)
    assert expected in str(err.value)


@pytest.mark.parametrize(
    ("pattern", "value"),
    [
        (LDAP_URI_PATTERN, "ldaps://h\n"),
        (LDAP_URI_PATTERN, "ldaps://h:636/x"),
        (DN_PATTERN, "dc=x\n"),
        (DN_PATTERN, "dc=x,[domain/y]"),
        (DN_PATTERN, " dc=x"),
    ],
)
def test_the_crd_patterns_refuse_what_the_model_refuses(pattern: str, value: str) -> None:
    import re

    assert re.fullmatch(pattern, value) is None


@given(st.text(max_size=40))
def test_no_accepted_base_dn_adds_a_line_or_a_section_to_sssd_conf(value: str) -> None:
    try:
        spec = LdapSpec.model_validate({"uri": "ldaps://h", "baseDN": value})
    except ValueError:
        return
    text = sssd_conf(spec)
    base = sssd_conf(LdapSpec.model_validate({"uri": "ldaps://h", "baseDN": "dc=x"}))
    assert len(text.splitlines()) == len(base.splitlines())
    assert [line for line in text.splitlines() if line.startswith("[")] == [
        "[sssd]",
        "[nss]",
        "[pam]",
        "[domain/ldap]",
    ]
