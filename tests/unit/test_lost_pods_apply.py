"""The apply side of a lost busy slurmd pod (controllers/apply.py): the node is set
DOWN before its pod is made again, only if the pod is really gone, and the pod
waits when Slurm refuses."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from slurmkube.api import well_known as wk
from slurmkube.controllers.apply import down_lost_nodes
from slurmkube.controllers.observe import Snapshot
from slurmkube.kube.client import Kube
from slurmkube.plan.lost_pods import LOST_REASON
from slurmkube.plan.model import Plan
from slurmkube.slurm.errors import SlurmError
from slurmkube.slurm.models import NodeStateChange


class FakeSlurm:
    def __init__(self, refuse: bool) -> None:
        self.refuse = refuse
        self.calls: list[tuple[str, NodeStateChange, str | None]] = []

    def update_node_state(self, name: str, state: NodeStateChange, reason: str | None) -> None:
        if self.refuse:
            raise SlurmError("refused")
        self.calls.append((name, state, reason))


class FakeKube:
    def __init__(self, live: set[str]) -> None:
        self.live = live
        self.events: list[tuple[str, bool]] = []

    def get(self, api: str, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        return {"metadata": {"name": name}} if name in self.live else None

    def event(self, obj: object, reason: str, message: str, warning: bool = False) -> None:
        self.events.append((reason, warning))


def pod(node: str) -> dict[str, Any]:
    return {"metadata": {"name": f"gpu-{node}", "labels": {wk.LABEL_NODE: node}}}


@pytest.mark.parametrize(
    ("live", "refuse", "downed", "waiting"),
    [
        # Gone, Slurm takes it: DOWN, then the pod is made.
        (set(), False, ["n1"], set()),
        # The cache was stale, the pod is there: nothing told, nothing waits.
        ({"gpu-n1"}, False, [], set()),
        # Slurm refuses: the pod waits for the next reconcile.
        (set(), True, [], {"n1"}),
    ],
)
def test_a_lost_busy_node_is_set_down_only_when_its_pod_is_really_gone(
    live: set[str], refuse: bool, downed: list[str], waiting: set[str]
) -> None:
    kube, slurm = FakeKube(live), FakeSlurm(refuse)
    snap = SimpleNamespace(cluster_obj={"metadata": {"namespace": "ns"}}, slurm=slurm)
    plan = SimpleNamespace(create_pods=(pod("n1"), pod("n2")), down_lost=("n1",))
    held = down_lost_nodes(cast(Kube, kube), cast(Snapshot, snap), cast(Plan, plan))
    assert held == waiting
    assert [c[0] for c in slurm.calls] == downed
    assert all(c[1] == NodeStateChange.DOWN and c[2] == LOST_REASON for c in slurm.calls)
    assert kube.events == ([("SlurmdLost", True)] if downed else [])
