"""Login pods and where their users come from (SlurmCluster `spec.login`).

Users log in to a login pod over ssh as themselves: sssd resolves and
authenticates them against LDAP, sshd becomes them, and sackd signs their Slurm
credentials for the uid the socket's peer has (docs/security.md, "Login pods").
Every value here ends up in sssd.conf, whose parser is line based like
slurm.conf's: a newline would start a directive or a section of its own
(`[domain/...]`, an `ldap_tls_reqcert = never`). So each field is held to a
grammar with no room for one, in the CRD schema (the API server refuses it) and
here (the operator and `slurmkube render` refuse it, naming the field).
"""

from __future__ import annotations

import re
from typing import Final, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from slurmkube.api.meta import Resources, StrictModel

# ldap:// or ldaps://, a host name or IPv4 address, an optional port; nothing
# after it (sssd-ldap(5) ldap_uri takes a list, one server is enough here).
LDAP_URI_PATTERN: Final = (
    r"^ldaps?://([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*"
    r"|[0-9]{1,3}(\.[0-9]{1,3}){3})(:[0-9]{1,5})?$"
)
# RFC 4514 distinguished names, restricted: `attr=value` pairs separated by `,`;
# values of letters, digits, space, `.`, `_`, `-` (no escapes, no `+`).
DN_PATTERN: Final = (
    r"^[A-Za-z][A-Za-z0-9-]{0,30}=[A-Za-z0-9._-]([A-Za-z0-9 ._-]{0,62}[A-Za-z0-9._-])?"
    r"(,[A-Za-z][A-Za-z0-9-]{0,30}=[A-Za-z0-9._-]([A-Za-z0-9 ._-]{0,62}[A-Za-z0-9._-])?){0,15}$"
)
# A Kubernetes object name (RFC 1123 subdomain) for the ConfigMap and Secret references.
OBJECT_NAME_PATTERN: Final = (
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
)
# Below this, ids belong to the system (root 0, SlurmUser 401, slurmrestd 402,
# Debian's system accounts): LDAP may not name them (sssd.conf(5) min_id).
MIN_USER_ID: Final = 1000


def _check(pattern: str, value: str, accepted: str) -> str:
    if re.fullmatch(pattern, value) is None:
        raise ValueError(f"{value!r} is not valid; expected {accepted}")
    return value


def ldap_uri(value: str) -> str:
    """One LDAP server URI, nothing after host and port (also AllocationSource's directory)."""
    return _check(LDAP_URI_PATTERN, value, "ldap://HOST[:PORT] or ldaps://HOST[:PORT]")


def distinguished_name(value: str | None) -> str | None:
    accepted = "a DN of attr=value pairs joined by ',' (values of [A-Za-z0-9 ._-])"
    return None if value is None else _check(DN_PATTERN, value, accepted)


class LdapSpec(StrictModel):
    """The LDAP directory the login pods' users come from (sssd-ldap(5))."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.uri.startsWith('ldaps://') || "
                    "(has(self.startTLS) && self.startTLS)",
                    "message": "ldap:// without startTLS would send users' passwords in clear: "
                    "use ldaps:// or set startTLS: true",
                },
                {
                    "rule": "has(self.bindDN) == has(self.bindPasswordSecret)",
                    "message": "set bindDN and bindPasswordSecret together (or neither: "
                    "anonymous searches)",
                },
            ]
        }
    )

    uri: str = Field(max_length=270, json_schema_extra={"pattern": LDAP_URI_PATTERN})
    """`ldaps://host[:port]` or `ldap://host[:port]` with `startTLS` (sssd-ldap(5) ldap_uri)."""
    base_dn: str = Field(alias="baseDN", max_length=1040, json_schema_extra={"pattern": DN_PATTERN})
    """Where users and groups are searched (ldap_search_base), e.g. `dc=example,dc=org`."""
    start_tls: bool = Field(False, alias="startTLS")
    """StartTLS on an ldap:// URI (ldap_id_use_start_tls)."""
    ca_config_map: str | None = Field(
        None,
        alias="caConfigMap",
        max_length=253,
        json_schema_extra={"pattern": OBJECT_NAME_PATTERN},
    )
    """ConfigMap (in the cluster's namespace) whose key `ca.crt` holds the CA
    certificates the server's must chain to (ldap_tls_cacert). Unset: the image's
    system CAs. The server's certificate is always verified (ldap_tls_reqcert = demand)."""
    bind_dn: str | None = Field(
        None, alias="bindDN", max_length=1040, json_schema_extra={"pattern": DN_PATTERN}
    )
    """The DN sssd binds as to search (ldap_default_bind_dn). Unset: anonymous searches."""
    bind_password_secret: str | None = Field(
        None,
        alias="bindPasswordSecret",
        max_length=253,
        json_schema_extra={"pattern": OBJECT_NAME_PATTERN},
    )
    """Secret whose key `password` is bindDN's password; one line. It reaches only
    the sssd container, never the operator."""
    schema_: Literal["rfc2307", "rfc2307bis"] = Field("rfc2307", alias="schema")
    """How groups name members (ldap_schema): rfc2307 `memberUid`, rfc2307bis `member` DNs."""
    min_id: int = Field(10000, alias="minID", ge=MIN_USER_ID, le=2_147_483_647)
    """The smallest uid and gid taken from LDAP (min_id); at least 1000, so no entry
    can be root, SlurmUser or another system account."""

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        return ldap_uri(v)

    @field_validator("base_dn", "bind_dn")
    @classmethod
    def _dn(cls, v: str | None) -> str | None:
        return distinguished_name(v)

    @field_validator("ca_config_map", "bind_password_secret")
    @classmethod
    def _object_name(cls, v: str | None) -> str | None:
        accepted = "a Kubernetes object name (lowercase RFC 1123 subdomain)"
        return None if v is None else _check(OBJECT_NAME_PATTERN, v, accepted)

    @model_validator(mode="after")
    def _encrypted_and_complete(self) -> LdapSpec:
        if self.uri.startswith("ldap://") and not self.start_tls:
            raise ValueError(
                f"uri {self.uri!r}: ldap:// without startTLS would send users' passwords "
                "in clear; use ldaps:// or set startTLS: true"
            )
        if (self.bind_dn is None) != (self.bind_password_secret is None):
            raise ValueError("set bindDN and bindPasswordSecret together (or neither)")
        return self


class LoginSpec(StrictModel):
    replicas: int = Field(0, ge=0, le=64)
    """Login pods. Without `ldap`, a place for `kubectl exec` as an unprivileged uid
    (65534) that submits jobs as that uid; with it, users log in over ssh as themselves."""
    resources: Resources = Field(default_factory=Resources)
    """Requests and limits of the container the users' commands run in (`sshd` with
    `ldap`, else `login`)."""
    ldap: LdapSpec | None = None
    """Users from LDAP through sssd; sshd on port 22 (Service `<cluster>-login`)."""
