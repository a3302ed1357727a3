"""Desired vs observed Slurm accounting -> changes -> `sacctmgr -i` argument lists.

Only objects slurmkube owns are changed: QOS and accounts whose Description
is `slurmkube`, and user associations under those accounts. A change to an
object whose observed state differs from what slurmkube last applied is drift
(a hand edit): it is reported and put back.

Commands are argument lists for `subprocess` without a shell, and every
argument passes `_ARGUMENT` as a last gate: names come from the grammar,
values from integers and those names, so nothing can add a key or a command.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from slurmkube.plan.policy.slurm import OWNER, SlurmEntity

Action = Literal["add", "modify", "delete"]

# `Key=value` with a value of name characters and Slurm's separators, or one of
# sacctmgr's words; names always go in `Name=`, so a user called `where` is a name.
_ARGUMENT: Final = re.compile(r"[A-Za-z]+=[A-Za-z0-9_.,/:=-]*")
_WORDS: Final = frozenset({"add", "modify", "delete", "qos", "account", "user", "where", "set"})
_ORDER: Final = {"qos": 0, "account": 1, "user": 2}


@dataclass(frozen=True, slots=True)
class SlurmChange:
    action: Action
    entity: SlurmEntity
    changed: tuple[tuple[str, str | None, str], ...] = ()  # (key, observed, desired)
    drift: bool = False

    def describe(self) -> str:
        what = f"{self.entity.kind} {self.entity.name}"
        if self.entity.account:
            what += f" (account {self.entity.account})"
        fields = ", ".join(f"{k}: {old!r} -> {new!r}" for k, old, new in self.changed)
        return f"{'drift: ' if self.drift else ''}{self.action} {what}" + (
            f": {fields}" if fields else ""
        )


def _owned(entity: SlurmEntity, owned_accounts: set[str]) -> bool:
    if entity.kind == "user":
        return entity.account in owned_accounts
    return entity.attr("Description") == OWNER


def diff_slurm(
    desired: Iterable[SlurmEntity],
    observed: Iterable[SlurmEntity],
    last_applied: Iterable[SlurmEntity] | None = None,
) -> tuple[SlurmChange, ...]:
    """Changes that make `observed` what `desired` says, in an order sacctmgr accepts."""
    want = {e.key: e for e in desired}
    have = {e.key: e for e in observed}
    last: Mapping[tuple[str, str, str], SlurmEntity] | None = (
        None if last_applied is None else {e.key: e for e in last_applied}
    )
    owned_accounts = {e.name for e in have.values() if e.kind == "account" and _owned(e, set())}
    owned_accounts |= {e.name for e in want.values() if e.kind == "account"}
    changes: list[SlurmChange] = []
    for key, entity in want.items():
        current = have.get(key)
        if current is None:
            changes.append(SlurmChange("add", entity, drift=last is not None and key in last))
            continue
        changed = tuple((k, current.attr(k), v) for k, v in entity.attrs if current.attr(k) != v)
        if changed:
            drift = last is not None and key in last and last[key].attrs != current.attrs
            changes.append(SlurmChange("modify", entity, changed, drift))
    for key, entity in have.items():
        if key not in want and _owned(entity, owned_accounts):
            changes.append(
                SlurmChange("delete", entity, drift=last is not None and key not in last)
            )
    return tuple(sorted(changes, key=_order))


def _order(change: SlurmChange) -> tuple[int, int, str, str]:
    # Adds and modifies: QOS, then accounts, then users (each refers to the one before);
    # QOS by ascending priority, since a QOS's Preempt list names lower ones.
    # Deletes the other way round, after every add and modify.
    kind = _ORDER[change.entity.kind]
    if change.action == "delete":
        return (1, -kind, change.entity.name, change.entity.account)
    priority = int(change.entity.attr("Priority") or 0)
    return (0, kind, f"{priority:012d}{change.entity.name}", change.entity.account)


def _checked(argv: list[str]) -> list[str]:
    for argument in argv[2:]:
        if argument not in _WORDS and not _ARGUMENT.fullmatch(argument):
            raise ValueError(f"refusing sacctmgr argument {argument!r}")
    return argv


def _pairs(attrs: Iterable[tuple[str, str]]) -> list[str]:
    return [f"{k}={v}" for k, v in attrs if v or k == "Preempt"]


def sacctmgr_argv(change: SlurmChange) -> list[str]:
    """One change as `sacctmgr -i ...` arguments (no shell, never a string)."""
    e = change.entity
    user = [f"Account={e.account}"] if e.kind == "user" else []
    where = ["where", f"Name={e.name}", *user]
    if change.action == "add":
        # An add without Preempt=: an empty list is the default, and sacctmgr's
        # add refuses an empty value.
        attrs = [(k, v) for k, v in e.attrs if v]
        return _checked(["sacctmgr", "-i", "add", e.kind, f"Name={e.name}", *user, *_pairs(attrs)])
    if change.action == "modify":
        set_ = _pairs((k, new) for k, _, new in change.changed)
        return _checked(["sacctmgr", "-i", "modify", e.kind, *where, "set", *set_])
    return _checked(["sacctmgr", "-i", "delete", e.kind, *where])


def sacctmgr_commands(changes: Iterable[SlurmChange]) -> list[list[str]]:
    return [sacctmgr_argv(c) for c in changes]
