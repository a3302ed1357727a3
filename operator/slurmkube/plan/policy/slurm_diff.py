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
    default_accounts: Mapping[str, str] | None = None,
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
    deletes = [e for k, e in have.items() if k not in want and _owned(e, owned_accounts)]
    for entity in deletes:
        changes.append(
            SlurmChange("delete", entity, drift=last is not None and entity.key not in last)
        )
    defaults = default_accounts or {}
    changes += _default_moves(deletes, want, have, defaults)
    return tuple(sorted(changes, key=lambda c: _order(c, defaults)))


def _default_moves(
    deletes: Iterable[SlurmEntity],
    want: Mapping[tuple[str, str, str], SlurmEntity],
    have: Mapping[tuple[str, str, str], SlurmEntity],
    defaults: Mapping[str, str],
) -> list[SlurmChange]:
    """Slurm refuses to delete a user's default account while the user has another
    association: move the default to one the user keeps (one it is given first)."""
    gone = {(e.name, e.account) for e in deletes if e.kind == "user"}
    moves = []
    for user in sorted({name for name, _ in gone}):
        default = defaults.get(user)
        if (user, default) not in gone:
            continue
        given = sorted(e.account for e in want.values() if e.kind == "user" and e.name == user)
        kept = sorted(
            e.account
            for e in have.values()
            if e.kind == "user" and e.name == user and (user, e.account) not in gone
        )
        if given or kept:
            entity = SlurmEntity("user", user)
            moves.append(
                SlurmChange("modify", entity, (("DefaultAccount", default, (given or kept)[0]),))
            )
    return moves


def _order(change: SlurmChange, defaults: Mapping[str, str]) -> tuple[int, int, str, str]:
    # Adds and modifies: QOS, then accounts, then users (each refers to the one before);
    # QOS by ascending priority, since a QOS's Preempt list names lower ones. A user's
    # default account moves once its new association exists. Deletes the other way
    # round, after every add and modify; a user's default account last.
    kind = _ORDER[change.entity.kind]
    e = change.entity
    if change.action == "delete":
        last = "~" if e.kind == "user" and defaults.get(e.name) == e.account else ""
        return (2, -kind, e.name, last + e.account)
    if e.kind == "user" and not e.account:
        return (1, kind, e.name, "")
    priority = int(e.attr("Priority") or 0)
    return (0, kind, f"{priority:012d}{e.name}", e.account)


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
    # A user's association, or (no account) the user itself: its default account.
    user = [f"Account={e.account}"] if e.kind == "user" and e.account else []
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
