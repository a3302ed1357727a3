"""slurm.conf's NodeName lines -> each node's shape. Pure.

An operator that restarts reads back the config in force from its ConfigMap,
so its first config may be written before Slurm is read
(plan.holds.early_delivery_safe). The lines are the ones
`render/templates/slurm.conf.j2` writes: `NodeName=<hostlist> CPUs=<n>
RealMemory=<MiB> [Gres=..] [Features=..] Weight=<n> [Port=<n>] State=CLOUD`.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmkube.slurm.hostlist import expand

__all__ = ["LineShape", "node_shapes"]


@dataclass(frozen=True, slots=True)
class LineShape:
    """What a running job fails on when it changes: a NodeName line's CPUs,
    RealMemory and Gres."""

    cpus: int
    real_memory: int
    gres: str | None


def node_shapes(slurm_conf: str) -> dict[str, LineShape]:
    """{node: shape} of every NodeName line; ValueError for a line it cannot read."""
    shapes: dict[str, LineShape] = {}
    for line in slurm_conf.splitlines():
        if not line.startswith("NodeName="):
            continue
        fields = dict(_pair(word, line) for word in line.split())
        try:
            shape = LineShape(
                int(fields["CPUs"]), int(fields["RealMemory"]), fields.get("Gres") or None
            )
        except (KeyError, ValueError) as err:
            raise ValueError(f"slurm.conf line {line!r}: {err}") from err
        for name in expand(fields["NodeName"]):
            shapes[name] = shape
    return shapes


def _pair(word: str, line: str) -> tuple[str, str]:
    key, sep, value = word.partition("=")
    if not sep:
        raise ValueError(f"slurm.conf line {line!r}: {word!r} is not key=value")
    return key, value
