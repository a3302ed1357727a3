"""Slurm releases and which upgrades between them Slurm allows (pure).

Slurm's Upgrade Guide (upgrades.html, "Release Cycle", "Compatibility
Window"): a major release is YY.MM; until 24.05 they came every nine months
(22.05, 23.02, 23.11, 24.05), since then every six (24.11, 25.05, 25.11,
26.05, ...). A release accepts daemons, clients and state from the previous
two major releases, and from 24.11 on from the previous three ("Slurm 26.05
supports upgrading directly from 25.11, 25.05, and 24.11", its release
notes): 24.11 -> 26.05 is three releases and allowed in one step. An
incompatible daemon "will fail immediately upon startup", and nothing goes
back: state files and the database are converted forward ("Reverting an
Upgrade" needs the backups).

The version is read from the image tag (`slurmkube/slurm:26.05.5`, `...:24.11.5-1`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

# Majors of the nine-month cycle, oldest first; 24.05 began the six-month one.
_NINE_MONTH: Final = ((20, 2), (20, 11), (21, 8), (22, 5), (23, 2), (23, 11), (24, 5))
_TAG: Final = re.compile(r"v?(\d{2})\.(\d{2})(?:\.(\d{1,3}))?(?![\d.])")


@dataclass(frozen=True, slots=True, order=True)
class Release:
    """A Slurm version: major YY.MM and its maintenance number."""

    year: int
    month: int
    patch: int = 0

    @property
    def major(self) -> str:
        return f"{self.year:02d}.{self.month:02d}"

    def __str__(self) -> str:
        return f"{self.major}.{self.patch}"


def release_of(image: str) -> Release | None:
    """The Slurm version an image's tag names; None when the tag names none."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    if ":" not in name:
        return None
    match = _TAG.match(name.rsplit(":", 1)[1])
    if match is None:
        return None
    release = Release(int(match[1]), int(match[2]), int(match[3] or 0))
    return release if _ordinal(release) is not None else None


def _ordinal(release: Release) -> int | None:
    """The major's place in Slurm's release sequence (None: no such major)."""
    major = (release.year, release.month)
    if major in _NINE_MONTH:
        return _NINE_MONTH.index(major)
    if major < _NINE_MONTH[-1] or release.month not in (5, 11):
        return None
    return len(_NINE_MONTH) - 1 + (release.year - 24) * 2 + (release.month == 11)


def _major_at(ordinal: int) -> str:
    if ordinal < len(_NINE_MONTH):
        year, month = _NINE_MONTH[ordinal]
    else:
        half = ordinal - (len(_NINE_MONTH) - 1)
        year, month = 24 + half // 2, 11 if half % 2 else 5
    return f"{year:02d}.{month:02d}"


def accepted_back(ordinal: int) -> int:
    """How many earlier majors the major at `ordinal` accepts (two; three from 24.11)."""
    return 3 if ordinal >= len(_NINE_MONTH) else 2


def upgrade_refusal(old: Release, new: Release, field: str) -> str | None:
    """Why `old` -> `new` cannot be done in place (None: Slurm allows it).
    `field` names what the user set (`SlurmCluster x spec.image`)."""
    if new < old:
        return (
            f"{field}: Slurm {new} is older than the {old} the cluster runs; Slurm does "
            f"not downgrade in place (state and database are converted forward): set a "
            f"{old.major} image again"
        )
    start, end = _ordinal(old), _ordinal(new)
    assert start is not None and end is not None, "release_of returns known majors only"
    window = accepted_back(end)
    if end - start <= window:
        return None
    step = start + 1
    while step + 1 - start <= accepted_back(step + 1):
        step += 1
    accepted = ", ".join(_major_at(end - k) for k in range(1, window + 1))
    return (
        f"{field}: Slurm {new.major} is {end - start} releases after the {old.major} the "
        f"cluster runs, and accepts at most {window} ({accepted}); upgrade to "
        f"{_major_at(step)} first"
    )
