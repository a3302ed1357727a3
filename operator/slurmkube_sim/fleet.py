"""The simulated fleet: GPU nodes in NVLink blocks under leaf and spine switches.

A fleet is described the way the render CLI describes one (node count, GPUs
per node, nodes per NVLink block, blocks per leaf, leaves per spine), and
expands to nodes named like Kubernetes nodes, so the placement engine sees
the same shapes it sees live.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FleetSpec:
    nodes: int = 2000
    gpus_per_node: int = 8
    nodes_per_block: int = 16
    blocks_per_leaf: int = 4
    leaves_per_spine: int = 8

    def __post_init__(self) -> None:
        for name in ("nodes", "gpus_per_node", "nodes_per_block", "blocks_per_leaf"):
            if getattr(self, name) < 1:
                raise ValueError(f"fleet.{name} must be at least 1, got {getattr(self, name)}")
        if self.leaves_per_spine < 1:
            raise ValueError(
                f"fleet.leaves_per_spine must be at least 1, got {self.leaves_per_spine}"
            )

    @classmethod
    def from_mapping(cls, raw: Mapping[str, object]) -> FleetSpec:
        known = set(cls.__dataclass_fields__)
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"fleet: unknown keys {sorted(unknown)}; accepted: {sorted(known)}")
        values: dict[str, int] = {}
        for key, value in raw.items():
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"fleet.{key} must be an integer, got {value!r}")
            values[key] = value
        return cls(**values)

    @property
    def blocks(self) -> int:
        return -(-self.nodes // self.nodes_per_block)

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def block_of(self, node: int) -> int:
        return node // self.nodes_per_block

    def node_name(self, node: int) -> str:
        return f"gpu-{node:05d}"

    def block_name(self, block: int) -> str:
        return f"nvl-{block:04d}"

    def tier_path(self, block: int) -> tuple[str, str]:
        leaf = block // self.blocks_per_leaf
        return (f"leaf-{leaf:03d}", f"spine-{leaf // self.leaves_per_spine:02d}")


REFERENCE_FLEET = FleetSpec()
