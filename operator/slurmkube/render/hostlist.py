"""Slurm hostlist expressions: `gpu-[001-018,020]`.

Slurm's parser accepts plain comma lists too, but 10,000-node lines are
unreadable and slow to diff; compressed ranges keep each line short and make
a change to one node touch one range. Only a trailing run of digits is ranged,
and zero padding is kept (Slurm ranges preserve the width of the bounds).
The inverse, `expand`, lives with the Slurm adapter (`slurmkube.slurm.hostlist`),
which reads Slurm's compressed node lists.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from slurmkube.api.grammar import SlurmToken

_TRAILING_DIGITS = re.compile(r"^(.*?)(\d+)$")


def compress(names: Iterable[str]) -> str:
    """Names -> one hostlist expression, deterministic for any input order.

    Names are grouped by prefix and digit count, so every member of a range
    has the width of its bounds and Slurm expands it back exactly.
    """
    members = frozenset(names)
    return _compress_block(members) if len(members) <= BLOCK_NAMES else _compress(members)


# A block's or a shape's few names: the same few thousand sets, render after render.
BLOCK_NAMES = 64


@lru_cache(maxsize=4096)
def _compress_block(names: frozenset[str]) -> str:
    return _compress.__wrapped__(names)


# One render compresses the same node set for its NodeName, PartitionName and
# gres.conf lines; a set hashes in microseconds, compressing it takes milliseconds.
# Few entries: each holds its set, 2 MB for 25,000 names, and a fleet coming up
# (or a label moving nodes) gives every render new sets, which 256 entries kept
# by the hundred.
@lru_cache(maxsize=8)
def _compress(names: frozenset[str]) -> str:
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for name in names:
        split = _split(name)
        if split is None:
            plain.append(name)
            continue
        prefix, width, number = split
        groups.setdefault((prefix, width), []).append(number)
    parts: list[tuple[str, int, str]] = [(p, 0, p) for p in plain]
    for (prefix, width), numbers in groups.items():
        numbers.sort()
        ranges = _ranges(numbers, width)
        body = ranges[0] if len(numbers) == 1 else f"[{','.join(ranges)}]"
        parts.append((prefix, width, f"{prefix}{body}"))
    parts.sort()
    return ",".join(expr for _, _, expr in parts)


@lru_cache(maxsize=1 << 17)
def _split(name: str) -> tuple[str, int, int] | None:
    """`gpu-0042` -> ("gpu-", 4, 42); names are compressed into several lines each render."""
    match = _TRAILING_DIGITS.match(name)
    if match is None:
        return None
    prefix, digits = match.groups()
    return prefix, len(digits), int(digits)


def _ranges(numbers: list[int], width: int) -> list[str]:
    out: list[str] = []
    start = prev = numbers[0]
    for n in numbers[1:]:
        if n == prev + 1:
            prev = n
            continue
        out.append(_range(start, prev, width))
        start = prev = n
    out.append(_range(start, prev, width))
    return out


def _range(lo: int, hi: int, width: int) -> str:
    first = str(lo).zfill(width)
    return first if lo == hi else f"{first}-{str(hi).zfill(width)}"


def hostlist(names: Iterable[SlurmToken]) -> SlurmToken:
    """Compressing validated hostnames only adds `[`, `]`, `-`, `,` and digits."""
    items = list(names)
    for name in items:
        if not isinstance(name, SlurmToken):
            raise TypeError(f"refusing to compress unvalidated {name!r}")
    return SlurmToken(compress(items))
