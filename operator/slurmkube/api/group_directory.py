"""Where an AllocationSource looks up its teams' `members.groups` (`spec.directory`).

An LDAP directory, read by the operator: a group's `memberUid` values and its
`member`/`uniqueMember` DNs (groups in it expanded too) become Slurm users of
the team. The operator binds with its own DN and Secret; the login pods' sssd
bind (SlurmCluster `spec.login.ldap`) never reaches it. The same grammar as the
login pods' directory holds: no value can add a filter term or a second URI.
"""

from __future__ import annotations

import re
from typing import Final

from pydantic import ConfigDict, Field, field_validator, model_validator

from slurmkube.api.login import DN_PATTERN, LDAP_URI_PATTERN, distinguished_name, ldap_uri
from slurmkube.api.meta import SecretKeyRef, StrictModel

# POSIX group names and the `cn` of a groupOfNames: letters, digits, `.`, `_`,
# `-`, `@` and inner spaces. The filter escapes them too; this keeps the names
# readable in errors and Events.
GROUP_NAME_PATTERN: Final = r"^[A-Za-z0-9_]([A-Za-z0-9 ._@-]{0,254}[A-Za-z0-9._@-])?$"


def group_name(value: str, where: str) -> str:
    if re.fullmatch(GROUP_NAME_PATTERN, value) is None:
        raise ValueError(
            f"{where}: {value!r} is not a group name (letters, digits, '.', '_', '-', '@' "
            "and inner spaces, at most 256)"
        )
    return value


class GroupDirectory(StrictModel):
    """An LDAP directory whose groups name team members (RFC 2307 and 2307bis)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.uri.startsWith('ldaps://') || "
                    "(has(self.startTLS) && self.startTLS)",
                    "message": "ldap:// without startTLS would send the bind password in "
                    "clear: use ldaps:// or set startTLS: true",
                },
                {
                    "rule": "has(self.bindDN) == has(self.bindPasswordSecretRef)",
                    "message": "set bindDN and bindPasswordSecretRef together (or neither: "
                    "anonymous searches)",
                },
            ]
        }
    )

    uri: str = Field(max_length=270, json_schema_extra={"pattern": LDAP_URI_PATTERN})
    """`ldaps://host[:port]`, or `ldap://host[:port]` with `startTLS`."""
    base_dn: str = Field(alias="baseDN", max_length=1040, json_schema_extra={"pattern": DN_PATTERN})
    """Where groups are searched (subtree), e.g. `ou=groups,dc=example,dc=org`."""
    start_tls: bool = Field(False, alias="startTLS")
    ca_secret_ref: SecretKeyRef | None = Field(None, alias="caSecretRef")
    """PEM bundle the server's certificate must chain to; unset: the system's trust
    store. The certificate and its host name are always verified."""
    bind_dn: str | None = Field(
        None, alias="bindDN", max_length=1040, json_schema_extra={"pattern": DN_PATTERN}
    )
    """The DN the operator binds as; unset: anonymous searches."""
    bind_password_secret_ref: SecretKeyRef | None = Field(None, alias="bindPasswordSecretRef")
    """Secret key holding bindDN's password."""
    poll_seconds: int = Field(60, alias="pollSeconds", ge=5, le=86_400)
    """How often the groups are read again (a member added or removed reaches both
    schedulers within this plus one sync)."""

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        return ldap_uri(v)

    @field_validator("base_dn", "bind_dn")
    @classmethod
    def _dn(cls, v: str | None) -> str | None:
        return distinguished_name(v)

    @model_validator(mode="after")
    def _encrypted_and_complete(self) -> GroupDirectory:
        if self.uri.startswith("ldap://") and not self.start_tls:
            raise ValueError(
                f"uri {self.uri!r}: ldap:// without startTLS would send the bind password "
                "in clear; use ldaps:// or set startTLS: true"
            )
        if (self.bind_dn is None) != (self.bind_password_secret_ref is None):
            raise ValueError("set bindDN and bindPasswordSecretRef together (or neither)")
        return self
