"""The policy's group reader against a real slapd (Debian's OpenLDAP) on loopback.

RFC 2307 posixGroups, RFC 2307bis groupOfNames with nested groups, a member DN
that names nothing, live edits, and the failures a sync reports instead of
applying: an unknown group, another CA, a certificate for another name, a
wrong bind password, a filter metacharacter in a group name.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from ldap3 import MODIFY_ADD, MODIFY_DELETE

from slurmkube.api.group_directory import GroupDirectory
from slurmkube.controllers.policy_directory import Credentials, read_groups
from slurmkube.controllers.policy_sources import SourceError
from slurmkube_e2e.ldap import (
    PORT,
    Directory,
    LdapUser,
    admin,
    group_dn,
    running_slapd,
    user_dn,
)

pytestmark = pytest.mark.integration
HOST = "127.0.0.1"
USERS = tuple(LdapUser(n, 20001 + i, 20001 + i, f"pw-{n}") for i, n in enumerate(
    ("alice", "bob", "carol", "dave", "erin")))  # fmt: skip
WHERE = "AllocationSource fleet spec.directory"


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Directory]:
    groups: dict[str, tuple[int, tuple[str, ...]]] = {"ml-lab": (30001, ("alice", "bob"))}
    named: dict[str, tuple[str, ...]] = {
        "vision": (user_dn("carol"), group_dn("ml-lab")),
        "all-labs": (
            group_dn("vision"),
            user_dn("dave"),
            "cn=gone,ou=people,dc=slurmkube,dc=test",
        ),
        # A loop: the walk reads each group once.
        "loop-a": (group_dn("loop-b"), user_dn("erin")),
        "loop-b": (group_dn("loop-a"),),
    }
    root = Path(tmp_path_factory.mktemp("slapd"))
    with running_slapd(root, USERS, groups, named_groups=named, host=HOST) as served:
        yield served


def spec(served: Directory, uri: str | None = None) -> GroupDirectory:
    return GroupDirectory.model_validate(
        {
            "uri": uri or served.uri,
            "baseDN": served.base_dn,
            "bindDN": served.bind_dn,
            "bindPasswordSecretRef": {"name": "ldap", "key": "password"},
            "caSecretRef": {"name": "ldap", "key": "ca.crt"},
        }
    )


def secrets(served: Directory, password: str | None = None) -> Credentials:
    return Credentials(served.ca_pem.encode(), (password or served.bind_password).encode())


def test_posix_groups_groups_of_names_and_nesting(directory: Directory) -> None:
    read = read_groups(
        spec(directory), secrets(directory), ["ml-lab", "vision", "all-labs", "loop-a"], WHERE
    )
    assert read == {
        "ml-lab": ("alice", "bob"),
        "vision": ("alice", "bob", "carol"),
        "all-labs": ("alice", "bob", "carol", "dave"),
        "loop-a": ("erin",),
    }


def test_a_live_edit_is_read_again(directory: Directory) -> None:
    with admin(directory) as edit:
        assert edit.modify(group_dn("ml-lab"), {"memberUid": [(MODIFY_DELETE, ["bob"])]})
        assert edit.modify(group_dn("vision"), {"member": [(MODIFY_ADD, [user_dn("erin")])]})
    try:
        read = read_groups(spec(directory), secrets(directory), ["ml-lab", "vision"], WHERE)
        assert read == {"ml-lab": ("alice",), "vision": ("alice", "carol", "erin")}
    finally:
        with admin(directory) as edit:
            edit.modify(group_dn("ml-lab"), {"memberUid": [(MODIFY_ADD, ["bob"])]})
            edit.modify(group_dn("vision"), {"member": [(MODIFY_DELETE, [user_dn("erin")])]})


@pytest.mark.parametrize("group", ["no-such-group", "*", "ml-lab)(cn=*"])
def test_an_unknown_group_is_an_error_naming_it(directory: Directory, group: str) -> None:
    with pytest.raises(SourceError) as raised:
        read_groups(spec(directory), secrets(directory), ["ml-lab", group], WHERE)
    assert raised.value.reason == "InvalidGroup"
    assert repr(group) in raised.value.message and WHERE in raised.value.message


def test_another_ca_is_refused(directory: Directory, tmp_path: Path) -> None:
    other = Path(tmp_path)
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
         str(other / "k"), "-out", str(other / "c"), "-days", "1", "-subj", "/CN=other"],
        check=True, capture_output=True,
    )  # fmt: skip
    wrong = Credentials((other / "c").read_bytes(), directory.bind_password.encode())
    with pytest.raises(SourceError) as raised:
        read_groups(spec(directory), wrong, ["ml-lab"], WHERE)
    assert raised.value.reason == "DirectoryUnreachable"
    assert f"{WHERE}.uri" in raised.value.message


def test_a_certificate_for_another_name_is_refused(directory: Directory) -> None:
    # slapd's certificate names 127.0.0.1 only.
    elsewhere = spec(directory, f"ldaps://localhost:{PORT}")
    with pytest.raises(SourceError) as raised:
        read_groups(elsewhere, secrets(directory), ["ml-lab"], WHERE)
    assert raised.value.reason == "DirectoryUnreachable"


def test_a_wrong_bind_password_is_refused(directory: Directory) -> None:
    with pytest.raises(SourceError) as raised:
        read_groups(spec(directory), secrets(directory, "not-it"), ["ml-lab"], WHERE)
    assert raised.value.reason == "DirectoryBindFailed"
    assert directory.bind_dn in raised.value.message


def test_a_member_dn_without_its_uid_is_read_for_it(directory: Directory) -> None:
    """A `cn=<full name>` DN, as many directories name people: its uid is read."""
    person = f"cn=Zoe Park,ou=people,{directory.base_dn}"
    with admin(directory) as edit:
        assert edit.add(
            person,
            ["inetOrgPerson", "posixAccount"],
            {"cn": "Zoe Park", "sn": "Park", "uid": "zoe", "uidNumber": 20101,
             "gidNumber": 20101, "homeDirectory": "/home/zoe"},
        )  # fmt: skip
        assert edit.add(group_dn("design"), ["groupOfNames"], {"cn": "design", "member": person})
    try:
        read = read_groups(spec(directory), secrets(directory), ["design"], WHERE)
        assert read == {"design": ("zoe",)}
    finally:
        with admin(directory) as edit:
            edit.delete(group_dn("design"))
            edit.delete(person)


def test_a_base_dn_that_names_nothing_is_an_error_naming_it(directory: Directory) -> None:
    nowhere = spec(directory).model_copy(update={"base_dn": f"ou=nowhere,{directory.base_dn}"})
    with pytest.raises(SourceError) as raised:
        read_groups(nowhere, secrets(directory), ["ml-lab"], WHERE)
    assert raised.value.reason == "InvalidGroup"
    assert "ou=nowhere" in raised.value.message and "base DN names no entry" in raised.value.message
