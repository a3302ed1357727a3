"""Which Slurm release a cluster runs, and so which files and keys it reads. Pure.

`spec.slurm.version` names the release series; unset, the series the tag of
`spec.image` names (`slurmkube/slurm:24.11.5` -> 24.11), else the newest
supported. Either way the operator renders for one explicit version and
writes it to `status.slurmVersion`. What changes between the series lives
here as properties, so the renderer asks "does this release read
topology.yaml", never "is this 26.05".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from slurmkube.api.grammar import InvalidValue


@dataclass(frozen=True, slots=True, order=True)
class SlurmVersion:
    """A Slurm release series (YY.MM): 24.11, 26.05."""

    year: int
    month: int

    def __str__(self) -> str:
        return f"{self.year:02d}.{self.month:02d}"

    @property
    def reads_topology_yaml(self) -> bool:
        """topology.yaml(5), several named topologies and `Topology=` on partitions: 25.05+.
        When the file exists slurmctld ignores topology.conf and TopologyPlugin."""
        return self >= SlurmVersion(25, 5)

    @property
    def serves_openmetrics(self) -> bool:
        """`MetricsType=metrics/openmetrics` (slurm.conf(5)): slurmctld answers
        `GET /metrics/...` on its own port, 25.11+."""
        return self >= SlurmVersion(25, 11)

    @property
    def moves_nodes_live(self) -> bool:
        """`scontrol update NodeName=... Topology=<topology>:<unit>` moves nodes between
        blocks and switches slurmctld holds (render/live_topology.py). Seen on 26.05;
        25.05 and 25.11 are not supported here, so not relied on."""
        return self >= SlurmVersion(26, 5)


SUPPORTED: Final = (SlurmVersion(24, 11), SlurmVersion(26, 5))
DEFAULT: Final = SlurmVersion(26, 5)
SUPPORTED_NAMES: Final = tuple(str(v) for v in SUPPORTED)

_SERIES: Final = re.compile(r"(\d{2})\.(\d{2})")
# An image tag that names a release: 24.11, 24.11.5, v26.05.5, 26.05.5-1, 26.05-rocky9.
_TAG_SERIES: Final = re.compile(r"v?(\d{2})\.(\d{2})(?:\.\d+)*(?:[-_+].*)?")


def parse_slurm_version(text: object, where: str) -> SlurmVersion:
    """`24.11` or `26.05` -> its SlurmVersion; anything else names `where` and what is accepted."""
    found = _SERIES.fullmatch(text) if isinstance(text, str) else None
    version = SlurmVersion(int(found[1]), int(found[2])) if found else None
    if version is None or version not in SUPPORTED:
        raise InvalidValue(where, str(text), f"a supported Slurm release: {_names()}")
    return version


def image_series(image: str) -> SlurmVersion | None:
    """The release series an image reference's tag names, if it names one.

    `registry:5000/slurmkube/slurm:26.05.5` -> 26.05; no tag, a digest only or a
    tag like `latest` -> None. The series may be one slurmkube does not support.
    """
    reference = image.split("@", 1)[0]
    name = reference.rsplit("/", 1)[-1]
    if ":" not in name:
        return None
    return release_series(name.rsplit(":", 1)[1])


def release_series(release: str) -> SlurmVersion | None:
    """The series of a release as a tag or `scontrol --version` names it:
    `26.05.5` -> 26.05, `24.11.5-1` -> 24.11; None when it names none."""
    found = _TAG_SERIES.fullmatch(release)
    return SlurmVersion(int(found[1]), int(found[2])) if found else None


def cluster_slurm_version(version: str | None, image: str, spec: str) -> SlurmVersion:
    """The version a cluster renders for: `version` (spec.slurm.version) when set,
    else the series `image` (spec.image) names, else DEFAULT. `spec` is where the
    spec is (`SlurmCluster c spec`; empty inside the spec's own validator).

    An image whose tag names a series slurmkube does not support is an error:
    its daemons would be given files for another release.
    """
    at = f"{spec}." if spec else ""
    if version is not None:
        return parse_slurm_version(version, f"{at}slurm.version")
    series = image_series(image)
    if series is None:
        return DEFAULT
    if series not in SUPPORTED:
        raise InvalidValue(
            f"{at}image",
            image,
            f"an image of a supported Slurm release ({_names()}), "
            "or spec.slurm.version set to the release it runs",
        )
    return series


def _names() -> str:
    return ", ".join(SUPPORTED_NAMES)
