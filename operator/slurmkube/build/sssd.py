"""sssd.conf for login pods whose users come from LDAP (pure).

sssd(8) resolves users for sshd, sackd and the users' shells (nss) and checks
their passwords against LDAP (pam). The file is line based (sssd.conf(5)): the
values come from `spec.login.ldap`, whose grammar (api/login.py) admits no
line break, and `sssd_conf` refuses one again before it writes a line. The bind
password is not here: the sssd container's entrypoint appends it from its
Secret (images/slurm/entrypoint.sh), so it never passes through the operator
and this file, in a ConfigMap, holds nothing secret; the domain's section is
therefore the file's last.
"""

from __future__ import annotations

from typing import Final

from slurmkube.api.login import LdapSpec
from slurmkube.api.models import SlurmCluster
from slurmkube.build.names import Manifest, meta, names_of

SSSD_CONF: Final = "sssd.conf"
# Where the login pod mounts the rendered file, the CA and the bind password.
SSSD_CONF_DIR: Final = "/etc/slurmkube/sssd"
LDAP_CA_DIR: Final = "/etc/slurmkube/ldap-ca"
LDAP_CA_KEY: Final = "ca.crt"
LDAP_BIND_DIR: Final = "/etc/slurmkube/ldap-bind"
LDAP_BIND_KEY: Final = "password"
# Never LDAP users, whatever the directory holds (sssd.conf(5) filter_users):
# root, SlurmUser and slurmrestd; min_id keeps their ids out as well.
LOCAL_ONLY: Final = "root, slurm, slurmrestd"
SYSTEM_CA: Final = "/etc/ssl/certs/ca-certificates.crt"


def _line(key: str, value: str) -> str:
    if not value.isprintable():
        raise ValueError(f"sssd.conf {key}: {value!r} holds a line break or control character")
    return f"{key} = {value}"


def sssd_conf(ldap: LdapSpec) -> str:
    """The whole sssd.conf for one LDAP domain, deterministic."""
    ca = f"{LDAP_CA_DIR}/{LDAP_CA_KEY}" if ldap.ca_config_map else SYSTEM_CA
    domain = [
        _line("id_provider", "ldap"),
        _line("auth_provider", "ldap"),
        _line("access_provider", "permit"),
        _line("ldap_uri", ldap.uri),
        _line("ldap_search_base", ldap.base_dn),
        _line("ldap_schema", ldap.schema_),
        _line("ldap_id_use_start_tls", "true" if ldap.start_tls else "false"),
        _line("ldap_tls_reqcert", "demand"),
        _line("ldap_tls_cacert", ca),
        _line("min_id", str(ldap.min_id)),
        # Lookups by name or id only: a directory of a million users is never listed.
        _line("enumerate", "false"),
        _line("cache_credentials", "false"),
    ]
    if ldap.bind_dn:
        domain.append(_line("ldap_default_bind_dn", ldap.bind_dn))
        domain.append(_line("ldap_default_authtok_type", "password"))
    lines = [
        "# Rendered by slurmkube; edits are overwritten. See sssd.conf(5), sssd-ldap(5).",
        "[sssd]",
        _line("services", "nss, pam"),
        _line("domains", "ldap"),
        "",
        "[nss]",
        _line("filter_users", LOCAL_ONLY),
        _line("filter_groups", LOCAL_ONLY),
        "",
        "[pam]",
        "",
        "[domain/ldap]",
        *domain,
    ]
    return "\n".join(lines) + "\n"


def sssd_config_map(cluster: SlurmCluster, ldap: LdapSpec) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(cluster, names_of(cluster).login_sssd, "sackd"),
        "data": {SSSD_CONF: sssd_conf(ldap)},
    }
