"""The Kubernetes Node, only what slurmkube reads of it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from slurmkube.api.meta import (
    LenientModel,
    ObjectMeta,
)

# --- Kubernetes Node (only what we read) ----------------------------------------------


class NodeCondition(LenientModel):
    type: str
    status: str


class Taint(LenientModel):
    """core/v1 Taint."""

    key: str
    value: str = ""
    effect: str


class NodeStatus(LenientModel):
    capacity: dict[str, str] = Field(default_factory=dict)
    allocatable: dict[str, str] = Field(default_factory=dict)
    conditions: list[NodeCondition] = Field(default_factory=list)


class NodeSpecK8s(LenientModel):
    unschedulable: bool = False
    taints: list[Taint] = Field(default_factory=list)


class KubeNode(LenientModel):
    api_version: str = Field("v1", alias="apiVersion")
    kind: Literal["Node"] = "Node"
    metadata: ObjectMeta
    spec: NodeSpecK8s = Field(default_factory=NodeSpecK8s)
    status: NodeStatus = Field(default_factory=NodeStatus)

    @property
    def ready(self) -> bool:
        return any(c.type == "Ready" and c.status == "True" for c in self.status.conditions)
