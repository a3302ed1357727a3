"""Expand Slurm hostlist expressions (`gb200-[001-004,019],hgx-01`) into names.

Slurm reports node lists of jobs and reservations compressed; controllers
compare sets of names. `slurmkube.render.hostlist` compresses for config
files; this is the one inverse (tests and the demo use it too), kept here
because the adapter may not import the renderer. Grammar from
`src/common/hostlist.c`: comma-separated entries, each a prefix with bracketed
ranges (several brackets multiply), ranges keep the zero padding of their
lower bound.
"""

from __future__ import annotations

import itertools
import re

__all__ = ["HostlistError", "expand"]

_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
# Guard against a hostile or broken `a[0-999999999]` exhausting memory.
_MAX_HOSTS = 1_000_000


class HostlistError(ValueError):
    pass


def expand(expression: str) -> tuple[str, ...]:
    """`a-[01-03],b` -> ('a-01', 'a-02', 'a-03', 'b'); '' and '(null)' -> ()."""
    expression = expression.strip()
    if expression in ("", "(null)"):
        return ()
    names: list[str] = []
    for entry in _split_top_level(expression):
        names.extend(_expand_entry(entry, expression))
        if len(names) > _MAX_HOSTS:
            raise HostlistError(f"hostlist {expression[:60]!r} names over {_MAX_HOSTS} hosts")
    return tuple(names)


def _split_top_level(expression: str) -> list[str]:
    entries, depth, start = [], 0, 0
    for i, char in enumerate(expression):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in hostlist {expression!r}")
        elif char == "," and depth == 0:
            entries.append(expression[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"unbalanced '[' in hostlist {expression!r}")
    entries.append(expression[start:])
    return [e for e in (x.strip() for x in entries) if e]


def _expand_entry(entry: str, expression: str) -> list[str]:
    # Alternate literal text and bracket bodies: "a[1-2]b[3]" -> ["a", "1-2", "b", "3", ""].
    pieces = re.split(r"\[([^\]]*)\]", entry)
    choices: list[list[str]] = []
    for index, piece in enumerate(pieces):
        choices.append(_expand_ranges(piece, expression) if index % 2 else [piece])
    return ["".join(combo) for combo in itertools.product(*choices)]


def _expand_ranges(body: str, expression: str) -> list[str]:
    out: list[str] = []
    for part in body.split(","):
        match = _RANGE.fullmatch(part.strip())
        if match is None:
            raise HostlistError(f"bad range {part!r} in hostlist {expression!r}")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise HostlistError(f"descending range {part!r} in hostlist {expression!r}")
        if int(high) - int(low) > _MAX_HOSTS:
            raise HostlistError(f"range {part!r} in hostlist {expression!r} is too large")
        width = len(low)
        out.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    return out
