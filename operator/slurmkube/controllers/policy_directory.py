"""Reading an AllocationSource's directory groups (`spec.directory`) over LDAP.

Only reads: one bind, one subtree search per group under the base DN, one base
read per member DN that does not carry its uid. The answer is kept per
AllocationSource for `pollSeconds`, so a 10 s policy sync does not search the
directory each time. The walk and its checks are `plan.policy.groups`; every
failure here is a `SourceError` naming `spec.directory`, and the sync then
applies nothing and keeps what is in force.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ldap3 import (
    AUTO_BIND_NO_TLS,
    AUTO_BIND_TLS_BEFORE_BIND,
    BASE,
    NONE,
    SUBTREE,
    Connection,
    Server,
    Tls,
)
from ldap3.core.exceptions import (
    LDAPBindError,
    LDAPException,
    LDAPInvalidCredentialsResult,
    LDAPNoSuchObjectResult,
    LDAPSizeLimitExceededResult,
)
from ldap3.utils.conv import escape_filter_chars

from slurmkube.api.allocation_source import AllocationSource, Team
from slurmkube.api.group_directory import GroupDirectory
from slurmkube.controllers.policy_sources import SourceError, ca_context, secret_value
from slurmkube.controllers.queue import Key
from slurmkube.kube.client import Kube
from slurmkube.plan.policy.groups import (
    DirectoryEntry,
    GroupError,
    check_directory,
    groups_named,
    members_of,
    with_group_members,
)

TIMEOUT_SECONDS = 10
# RFC 2307 and 2307bis groups, and Active Directory's `group`.
_GROUP_CLASSES = ("posixGroup", "groupOfNames", "groupOfUniqueNames", "group")
# A user's login name: `uid`, or Active Directory's `sAMAccountName`.
_ATTRIBUTES = ("objectClass", "uid", "sAMAccountName", "memberUid", "member", "uniqueMember")


class _VerifyingTls(Tls):  # type: ignore[misc]
    """ldap3's TLS with the standard library's certificate and host name checks
    (ldap3's own host name check, on Python 3.12+, does not read IP SANs)."""

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__(validate=ssl.CERT_REQUIRED)
        self._context = context

    def wrap_socket(self, connection: Any, do_handshake: bool = False) -> None:
        connection.socket = self._context.wrap_socket(
            connection.socket,
            server_side=False,
            do_handshake_on_connect=do_handshake,
            server_hostname=connection.server.host,
        )


def _values(attributes: dict[str, Any], name: str) -> tuple[str, ...]:
    """An attribute's values whatever case the server spelled its name in."""
    for key, value in attributes.items():
        if key.lower() == name.lower():
            items = value if isinstance(value, list) else [value]
            return tuple(str(v) for v in items)
    return ()


def _entry(answer: dict[str, Any]) -> DirectoryEntry:
    attributes = answer.get("attributes") or {}
    classes = {c.lower() for c in _values(attributes, "objectClass")}
    uids = _values(attributes, "uid") or _values(attributes, "sAMAccountName")
    return DirectoryEntry(
        dn=str(answer["dn"]),
        is_group=bool(classes & {c.lower() for c in _GROUP_CLASSES}),
        uid=uids[0] if uids else None,
        member_uids=_values(attributes, "memberUid"),
        member_dns=_values(attributes, "member") + _values(attributes, "uniqueMember"),
    )


class _Ldap:
    """The lookups `plan.policy.groups.members_of` asks, over one bound connection."""

    def __init__(self, connection: Connection, base_dn: str) -> None:
        self._connection = connection
        self._base_dn = base_dn

    def _search(self, base: str, query: str, scope: str, limit: int) -> list[DirectoryEntry]:
        self._connection.search(base, query, scope, attributes=list(_ATTRIBUTES), size_limit=limit)
        return [_entry(a) for a in self._connection.response if a.get("type") == "searchResEntry"]

    def group(self, name: str) -> DirectoryEntry | None:
        classes = "".join(f"(objectClass={c})" for c in _GROUP_CLASSES)
        query = f"(&(cn={escape_filter_chars(name)})(|{classes}))"
        ambiguous = GroupError(f"group {name!r}: more than one group of that name")
        try:
            found = self._search(self._base_dn, query, SUBTREE, 2)
        except LDAPSizeLimitExceededResult as err:
            raise ambiguous from err
        except LDAPNoSuchObjectResult as err:
            raise GroupError("the base DN names no entry") from err
        if len(found) > 1:
            raise ambiguous
        return found[0] if found else None

    def entry(self, dn: str) -> DirectoryEntry | None:
        try:
            found = self._search(dn, "(objectClass=*)", BASE, 1)
        except LDAPNoSuchObjectResult:
            return None
        return found[0] if found else None


@dataclass(frozen=True, slots=True)
class Credentials:
    """What `spec.directory`'s Secrets hold: a CA bundle and the bind password."""

    ca_pem: bytes | None = None
    password: bytes | None = None


def credentials(kube: Kube, namespace: str, directory: GroupDirectory, where: str) -> Credentials:
    ca, bind = directory.ca_secret_ref, directory.bind_password_secret_ref
    return Credentials(
        None if ca is None else secret_value(kube, namespace, ca, f"{where}.caSecretRef"),
        None
        if bind is None
        else secret_value(kube, namespace, bind, f"{where}.bindPasswordSecretRef"),
    )


def _connect(directory: GroupDirectory, secrets: Credentials, where: str) -> Connection:
    context = (
        ssl.create_default_context()
        if secrets.ca_pem is None
        else ca_context(secrets.ca_pem, where)
    )
    uri = urlsplit(directory.uri)
    ldaps = uri.scheme == "ldaps"
    server = Server(
        uri.hostname or "",
        port=uri.port or (636 if ldaps else 389),
        use_ssl=ldaps,
        tls=_VerifyingTls(context),
        get_info=NONE,
        connect_timeout=TIMEOUT_SECONDS,
    )
    try:
        return Connection(
            server,
            user=directory.bind_dn,
            password=None if secrets.password is None else secrets.password.decode().strip(),
            auto_bind=AUTO_BIND_TLS_BEFORE_BIND if directory.start_tls else AUTO_BIND_NO_TLS,
            read_only=True,
            raise_exceptions=True,
            receive_timeout=TIMEOUT_SECONDS,
        )
    except (LDAPBindError, LDAPInvalidCredentialsResult) as err:
        raise SourceError(
            "DirectoryBindFailed", f"{where}.bindDN: {directory.bind_dn}: {err}"
        ) from err
    except (LDAPException, OSError) as err:
        raise SourceError(
            "DirectoryUnreachable", f"{where}.uri: {directory.uri}: {type(err).__name__}: {err}"
        ) from err


def read_groups(
    directory: GroupDirectory, secrets: Credentials, groups: Sequence[str], where: str
) -> dict[str, tuple[str, ...]]:
    """Each group's members, read in one connection."""
    connection = _connect(directory, secrets, where)
    try:
        lookups = _Ldap(connection, directory.base_dn)
        return {group: members_of(group, lookups) for group in groups}
    except GroupError as err:
        raise SourceError("InvalidGroup", f"{where}: under {directory.base_dn}: {err}") from err
    except (LDAPException, OSError) as err:
        raise SourceError(
            "DirectoryUnreachable", f"{where}.uri: {directory.uri}: {type(err).__name__}: {err}"
        ) from err
    finally:
        connection.unbind()


@dataclass(frozen=True, slots=True)
class _Read:
    directory: GroupDirectory
    at: float
    members: dict[str, tuple[str, ...]]


class DirectoryReader:
    """Remembers each AllocationSource's last directory read for its pollSeconds."""

    def __init__(self) -> None:
        self._reads: dict[Key, _Read] = {}
        self._lock = threading.Lock()

    def forget(self, key: Key) -> None:
        with self._lock:
            self._reads.pop(key, None)

    def with_groups(
        self, kube: Kube, key: Key, source: AllocationSource, teams: list[Team], now: float
    ) -> list[Team]:
        """`teams` with their groups' members among their Slurm users."""
        name = f"AllocationSource {source.metadata.name}"
        check_directory(name, source.spec, teams)
        groups = groups_named(teams)
        directory = source.spec.directory
        if not groups or directory is None:
            return teams
        with self._lock:
            last = self._reads.get(key)
        fresh = (
            last is not None
            and last.directory == directory
            and now - last.at < directory.poll_seconds
            and set(groups) <= last.members.keys()
        )
        if last is None or not fresh:
            where = f"{name} spec.directory"
            secrets = credentials(kube, key[0], directory, where)
            members = read_groups(directory, secrets, groups, where)
            last = _Read(directory, now, members)
            with self._lock:
                self._reads[key] = last
        return with_group_members(name, teams, last.members)
