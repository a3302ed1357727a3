"""Teams' directory groups -> Slurm users: the walk over RFC 2307 and 2307bis groups,
nesting and loops, and the checks that keep a bad directory entry from being applied."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from slurmkube.api.allocation_source import AllocationSource, Team
from slurmkube.api.group_directory import GroupDirectory
from slurmkube.plan.policy import PolicyError
from slurmkube.plan.policy.groups import (
    MAX_DEPTH,
    DirectoryEntry,
    GroupError,
    check_directory,
    groups_named,
    members_of,
    uid_of_dn,
    with_group_members,
)

BASE = "dc=lab,dc=org"


def user(name: str) -> str:
    return f"uid={name},ou=people,{BASE}"


def group(name: str) -> str:
    return f"cn={name},ou=groups,{BASE}"


@dataclass
class FakeDirectory:
    """Plain data standing in for a directory's answers (the reader is tested
    against slapd in tests/integration/test_policy_directory.py)."""

    entries: dict[str, DirectoryEntry] = field(default_factory=dict)
    reads: list[str] = field(default_factory=list)

    def add_group(self, name: str, uids: tuple[str, ...] = (), dns: tuple[str, ...] = ()) -> None:
        self.entries[group(name).lower()] = DirectoryEntry(group(name), True, None, uids, dns)

    def add_person(self, dn: str, uid: str) -> None:
        self.entries[dn.lower()] = DirectoryEntry(dn, False, uid)

    def group(self, name: str) -> DirectoryEntry | None:
        return self.entries.get(group(name).lower())

    def entry(self, dn: str) -> DirectoryEntry | None:
        self.reads.append(dn)
        return self.entries.get(dn.lower())


@pytest.mark.parametrize(
    ("dn", "uid"),
    [
        (user("alice"), "alice"),
        (f"UID=bob,ou=people,{BASE}", "bob"),
        (group("ml"), None),
        (f"uid=a+cn=b,ou=people,{BASE}", None),  # a multi-valued RDN: ask the directory
        (f"uid=a\\,b,ou=people,{BASE}", None),
    ],
)
def test_a_uid_dn_names_its_user_without_a_lookup(dn: str, uid: str | None) -> None:
    assert uid_of_dn(dn) == uid


def test_posix_and_named_groups_nested_groups_and_a_dangling_member() -> None:
    d = FakeDirectory()
    d.add_group("ml-lab", uids=("alice", "bob"))
    d.add_person(f"cn=Carol Jones,ou=people,{BASE}", "carol")
    d.add_group("vision", dns=(f"cn=Carol Jones,ou=people,{BASE}", group("ml-lab")))
    d.add_group("all", dns=(group("vision"), user("dave"), f"cn=gone,ou=people,{BASE}"))
    assert members_of("ml-lab", d) == ("alice", "bob")
    assert members_of("vision", d) == ("alice", "bob", "carol")
    assert members_of("all", d) == ("alice", "bob", "carol", "dave")
    # uid=... members are never looked up.
    assert user("dave") not in d.reads


def test_a_loop_is_read_once() -> None:
    d = FakeDirectory()
    d.add_group("a", uids=("alice",), dns=(group("b"),))
    d.add_group("b", uids=("bob",), dns=(group("a"), group("a")))
    assert members_of("a", d) == ("alice", "bob")
    assert d.reads.count(group("a")) == 0 and d.reads.count(group("b")) == 1


def test_an_unknown_group_and_a_too_deep_nesting_are_errors() -> None:
    d = FakeDirectory()
    with pytest.raises(GroupError, match="'nope' not found"):
        members_of("nope", d)
    for level in range(MAX_DEPTH + 2):
        d.add_group(f"g{level}", uids=(f"u{level}",), dns=(group(f"g{level + 1}"),))
    with pytest.raises(GroupError, match="more than 8 deep"):
        members_of("g0", d)
    # The root and MAX_DEPTH levels below it are read (g9's member g10 names nothing).
    assert len(members_of("g1", d)) == MAX_DEPTH + 1


@st.composite
def directories(draw: st.DrawFn) -> tuple[FakeDirectory, dict[str, set[str]]]:
    """Up to 6 groups with random members and nesting (cycles allowed), and each
    group's users by plain reachability."""
    names = [f"g{i}" for i in range(draw(st.integers(1, 6)))]
    people = ["alice", "bob", "carol", "dave"]
    d = FakeDirectory()
    direct: dict[str, set[str]] = {}
    nested: dict[str, list[str]] = {}
    for name in names:
        uids = draw(st.lists(st.sampled_from(people), max_size=3))
        dns = draw(st.lists(st.sampled_from(people), max_size=2))
        subs = draw(st.lists(st.sampled_from(names), max_size=3))
        d.add_group(name, uids=tuple(uids), dns=tuple(user(p) for p in dns) + tuple(
            group(s) for s in subs))  # fmt: skip
        direct[name], nested[name] = set(uids) | set(dns), subs
    reachable: dict[str, set[str]] = {}
    for name in names:
        seen, todo, users = {name}, [name], set()
        while todo:
            current = todo.pop()
            users |= direct[current]
            for sub in nested[current]:
                if sub not in seen:
                    seen.add(sub)
                    todo.append(sub)
        reachable[name] = users
    return d, reachable


@given(directories())
def test_members_are_every_user_reachable_through_nesting(
    case: tuple[FakeDirectory, dict[str, set[str]]],
) -> None:
    d, reachable = case
    for name, users in reachable.items():
        assert members_of(name, d) == tuple(sorted(users))


def team(name: str, users: list[str], groups: list[str]) -> Team:
    return Team.model_validate(
        {"name": name, "gpus": 4, "members": {"slurmUsers": users, "groups": groups}}
    )


def test_group_members_join_each_team_once_after_its_own_users() -> None:
    teams = [team("team-a", ["bob"], ["ml-lab", "vision"]), team("team-b", ["erin"], [])]
    members = {"ml-lab": ("alice", "bob"), "vision": ("alice", "carol")}
    assert groups_named(teams) == ("ml-lab", "vision")
    a, b = with_group_members("src", teams, members)
    assert a.members.slurm_users == ["bob", "alice", "carol"]
    assert a.members.groups == ["ml-lab", "vision"]
    assert b is teams[1]


@pytest.mark.parametrize(
    "member", ["Alice", "bob\nGrpTRES=gres/gpu=999", "carol where name=x", "x" * 40, ""]
)
def test_a_member_that_is_no_slurm_user_name_is_an_error_naming_team_and_group(
    member: str,
) -> None:
    teams = [team("team-a", [], ["ml-lab"])]
    with pytest.raises(PolicyError) as raised:
        with_group_members("AllocationSource fleet", teams, {"ml-lab": ("alice", member)})
    message = str(raised.value)
    assert "teams[0] (team-a).members.groups[0] (ml-lab)" in message
    assert repr(member) in message


def test_a_group_not_read_is_an_error() -> None:
    with pytest.raises(PolicyError, match=r"groups\[0\] \(ml-lab\): not read"):
        with_group_members("src", [team("team-a", [], ["ml-lab"])], {})


def source_spec(directory: bool) -> dict[str, object]:
    spec: dict[str, object] = {
        "inline": {"teams": [{"name": "team-a", "gpus": 1, "members": {"groups": ["ml-lab"]}}]}
    }
    if directory:
        spec["directory"] = {"uri": "ldaps://ldap.lab.org", "baseDN": BASE}
    return spec


def test_groups_need_a_directory() -> None:
    without = AllocationSource.model_validate(
        {"metadata": {"name": "fleet"}, "spec": source_spec(directory=False)}
    )
    assert without.spec.inline is not None
    with pytest.raises(PolicyError, match=r"teams\[0\] \(team-a\)\.members\.groups: .*directory"):
        check_directory("fleet", without.spec, without.spec.inline.teams)
    with_directory = AllocationSource.model_validate(
        {"metadata": {"name": "fleet"}, "spec": source_spec(directory=True)}
    )
    assert with_directory.spec.inline is not None
    check_directory("fleet", with_directory.spec, with_directory.spec.inline.teams)


@pytest.mark.parametrize("name", ["", "a)(cn=*", "*", "ml\nlab", " lead", "x" * 257, "a,b"])
def test_a_group_name_with_filter_or_dn_syntax_is_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="groups"):
        team("team-a", [], [name])


def test_a_group_listed_twice_is_refused() -> None:
    with pytest.raises(ValidationError, match="listed twice"):
        team("team-a", [], ["ml-lab", "ml-lab"])


@pytest.mark.parametrize(
    ("directory", "error"),
    [
        ({"uri": "ldap://ldap.lab.org", "baseDN": BASE}, "startTLS"),
        ({"uri": "ldaps://ldap.lab.org/?x", "baseDN": BASE}, "uri"),
        ({"uri": "ldaps://ldap.lab.org", "baseDN": "dc=lab)(x=*"}, "baseDN"),
        (
            {"uri": "ldaps://ldap.lab.org", "baseDN": BASE, "bindDN": f"cn=op,{BASE}"},
            "bindPasswordSecretRef",
        ),
    ],
)
def test_a_directory_that_would_leak_or_inject_is_refused(
    directory: dict[str, object], error: str
) -> None:
    with pytest.raises(ValidationError, match=error):
        GroupDirectory.model_validate(directory)
    GroupDirectory.model_validate(
        {"uri": "ldap://ldap.lab.org:389", "baseDN": BASE, "startTLS": True}
    )
