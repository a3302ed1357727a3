"""Teams' directory groups -> their Slurm users.

A group names its members two ways: RFC 2307 `memberUid` (login names) and
RFC 2307bis `member`/`uniqueMember` (DNs, of users or of groups nested in it).
The directory reader (controllers/policy_directory.py) answers lookups; the
walk and every check are here. Each user a group gives is held to Slurm's user
grammar, and an error names the team, the group and the value, so one bad
directory entry changes nothing already applied.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from slurmkube.api.allocation_source import AllocationSourceSpec, Team
from slurmkube.api.grammar import InvalidValue, slurm_user
from slurmkube.plan.policy.model import PolicyError

# Nested groups deeper than this are a directory loop or a mistake, not a team.
MAX_DEPTH = 8
# As many users as a team may list itself (TeamMembers.slurm_users).
MAX_USERS = 10_000

_UID_RDN = re.compile(r"(?i)uid=([^,+\\=]+),")


@dataclass(frozen=True, slots=True)
class DirectoryEntry:
    """A group or a user, with the attributes the walk reads."""

    dn: str
    is_group: bool
    uid: str | None = None
    member_uids: tuple[str, ...] = ()
    member_dns: tuple[str, ...] = ()


class Directory(Protocol):
    def group(self, name: str) -> DirectoryEntry | None:
        """The group whose cn is `name` under the base DN; None: there is none."""
        ...

    def entry(self, dn: str) -> DirectoryEntry | None:
        """The entry at `dn`; None: there is none."""
        ...


class GroupError(Exception):
    """A group that cannot be expanded; the message says which and why."""


def uid_of_dn(dn: str) -> str | None:
    """The login name a `uid=<name>,...` DN carries, without asking the directory."""
    found = _UID_RDN.match(dn)
    return found.group(1).strip() if found else None


def groups_named(teams: Sequence[Team]) -> tuple[str, ...]:
    """Every group any team names, once, sorted."""
    return tuple(sorted({g for t in teams for g in t.members.groups}))


def members_of(name: str, directory: Directory) -> tuple[str, ...]:
    """The login names of group `name`'s members, nested groups included, sorted.
    A member DN that names nothing is left out, as sssd leaves it out."""
    root = directory.group(name)
    if root is None:
        raise GroupError(f"group {name!r} not found")
    users: set[str] = set()
    seen = {root.dn.lower()}
    level = [root]
    for depth in range(MAX_DEPTH + 1):
        nested: list[DirectoryEntry] = []
        for group in level:
            users.update(group.member_uids)
            for dn in group.member_dns:
                if dn.lower() in seen:
                    continue
                seen.add(dn.lower())
                uid = uid_of_dn(dn)
                if uid is not None:
                    users.add(uid)
                    continue
                entry = directory.entry(dn)
                if entry is not None and entry.is_group:
                    nested.append(entry)
                elif entry is not None and entry.uid is not None:
                    users.add(entry.uid)
            if len(users) > MAX_USERS:
                raise GroupError(f"group {name!r} has more than {MAX_USERS} members")
        if not nested:
            return tuple(sorted(users))
        if depth == MAX_DEPTH:
            break
        level = nested
    raise GroupError(f"group {name!r} nests groups more than {MAX_DEPTH} deep")


def check_directory(source: str, spec: AllocationSourceSpec, teams: Sequence[Team]) -> None:
    """A team that names groups needs a directory to read them from."""
    if spec.directory is not None:
        return
    for index, team in enumerate(teams):
        if team.members.groups:
            raise PolicyError(
                f"{source}: teams[{index}] ({team.name}).members.groups: "
                f"{list(team.members.groups)} need spec.directory to read them from"
            )


def with_group_members(
    source: str, teams: Sequence[Team], members: Mapping[str, Sequence[str]]
) -> list[Team]:
    """Each team with its groups' members added to its Slurm users (its own first,
    then the groups', each once)."""
    expanded: list[Team] = []
    for index, team in enumerate(teams):
        users = list(team.members.slurm_users)
        listed = set(users)
        for position, group in enumerate(team.members.groups):
            where = f"{source}: teams[{index}] ({team.name}).members.groups[{position}] ({group})"
            if group not in members:
                raise PolicyError(f"{where}: not read from the directory")
            for name in members[group]:
                try:
                    user = str(slurm_user(name, f"{where}: member"))
                except InvalidValue as err:
                    raise PolicyError(str(err)) from err
                if user not in listed:
                    listed.add(user)
                    users.append(user)
        if len(users) > MAX_USERS:
            raise PolicyError(
                f"{source}: teams[{index}] ({team.name}): more than {MAX_USERS} users "
                "with its groups' members"
            )
        if len(users) == len(team.members.slurm_users):
            expanded.append(team)
            continue
        new_members = team.members.model_copy(update={"slurm_users": users})
        expanded.append(team.model_copy(update={"members": new_members}))
    return expanded
