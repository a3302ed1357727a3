"""Builders for policy tests: allocation documents, sources and policies."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmkube.plan.policy import Policy
from slurmkube.plan.policy.sources import policy_from_object

PERIOD = {"start": "2026-10-01T00:00:00Z", "lengthDays": 91}


@dataclass
class TeamBuilder:
    """`TeamBuilder("team-a").gpus(8).budget(5000).users("alice").obj()`"""

    doc: dict[str, Any] = field(default_factory=dict)

    def __init__(self, name: str) -> None:
        self.doc = {"name": name, "gpus": 1, "members": {}}

    def gpus(self, n: int) -> TeamBuilder:
        self.doc["gpus"] = n
        return self

    def budget(self, gpu_hours: int) -> TeamBuilder:
        self.doc["gpuHours"] = gpu_hours
        self.doc["period"] = dict(PERIOD)
        return self

    def users(self, *names: str) -> TeamBuilder:
        self.doc["members"]["slurmUsers"] = list(names)
        return self

    def namespaces(self, *names: str) -> TeamBuilder:
        self.doc["members"]["namespaces"] = list(names)
        return self

    def weight(self, w: int) -> TeamBuilder:
        self.doc["fairShareWeight"] = w
        return self

    def tier(self, name: str) -> TeamBuilder:
        self.doc["tier"] = name
        return self

    def borrowing(self) -> TeamBuilder:
        self.doc["borrowing"] = True
        return self

    def set(self, key: str, value: Any) -> TeamBuilder:
        self.doc[key] = value
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self.doc)


def source(*teams: dict[str, Any], name: str = "fleet", **spec: Any) -> dict[str, Any]:
    """An AllocationSource object with inline teams."""
    return {
        "apiVersion": "slurmkube.io/v1alpha1",
        "kind": "AllocationSource",
        "metadata": {"name": name, "namespace": "slurmkube"},
        "spec": {"inline": {"teams": list(teams)}, **spec},
    }


def policy(*teams: dict[str, Any], **spec: Any) -> Policy:
    return policy_from_object(source(*teams, **spec), "test")


def teams_with_users(a: tuple[str, ...], b: tuple[str, ...]) -> Policy:
    """team-a (8 GPUs) with users `a`, team-b (4 GPUs) with users `b`."""
    return policy(
        TeamBuilder("team-a").gpus(8).users(*a).obj(),
        TeamBuilder("team-b").gpus(4).users(*b).obj(),
    )


def two_teams() -> Policy:
    return policy(
        TeamBuilder("team-a")
        .gpus(8)
        .budget(5000)
        .users("alice", "bob")
        .namespaces("team-a")
        .weight(2)
        .tier("high")
        .obj(),
        TeamBuilder("team-b").gpus(4).users("carol").namespaces("team-b").borrowing().obj(),
    )


RECORDED_COLDFRONT = (
    Path(__file__).resolve().parents[1] / "fixtures" / "coldfront" / "recorded-1.1.10"
)


def recorded_coldfront() -> tuple[Any, Any]:
    """A live ColdFront 1.1.10's answers (allocations with attributes, projects with users)."""
    return (
        json.loads((RECORDED_COLDFRONT / "allocations.json").read_text()),
        json.loads((RECORDED_COLDFRONT / "projects.json").read_text()),
    )
