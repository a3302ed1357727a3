"""The config's two writers (the config queue and the reconcile): a config made
from an older look at the Node index never replaces a newer one."""

from __future__ import annotations

from typing import Any, cast

import pytest

from slurmkube.controllers.early_config import deliver, deliver_if_safe
from slurmkube.controllers.memory import ClusterMemory
from slurmkube.controllers.observe import Snapshot
from slurmkube.plan.cluster import Configured, configure
from slurmkube.plan.model import Observed
from slurmkube.topology.fleet import fleet_node
from slurmkube_local.builders import bundle, nvl_fleet


class FakeKube:
    """Records the config hashes written, in order."""

    def __init__(self) -> None:
        self.written: list[str] = []

    def apply(self, obj: dict[str, Any], owner: object = None) -> None:
        self.written.append(obj["data"]["config-hash"])

    def annotate_pod(self, *_: object) -> None:
        pass


def configured(nodes: int) -> Configured:
    fleet = [fleet_node(n) for n in nvl_fleet(1, nodes)]
    made = configure(Observed(bundle=bundle(), fleet=fleet, pods=(), slurm_nodes=None))
    assert isinstance(made, Configured)
    return made


def snapshot() -> Snapshot:
    obj = {"metadata": {"name": "test", "namespace": "default"}, "status": {}}
    observed = Observed(bundle=bundle(), fleet=[], pods=(), slurm_nodes=None)
    return Snapshot(obj, {}, observed, None, "")


def write(kube: FakeKube, memory: ClusterMemory, made: Configured, at: float) -> str:
    return deliver(cast(Any, kube), snapshot(), memory, made, at)


@pytest.mark.parametrize(
    ("first_at", "second_at", "in_force"),
    [(1.0, 2.0, "second"), (2.0, 1.0, "first"), (1.0, 1.0, "second")],
    ids=["newer replaces", "older is dropped", "the same look replaces"],
)
def test_the_config_in_force_is_made_from_the_latest_look_at_the_nodes(
    first_at: float, second_at: float, in_force: str
) -> None:
    kube, memory = FakeKube(), ClusterMemory()
    first, second = configured(2), configured(3)
    write(kube, memory, first, first_at)
    written = write(kube, memory, second, second_at)
    expected = {"first": first, "second": second}[in_force]
    assert kube.written[-1] == expected.rendered.hash
    assert memory.delivered is expected.config
    assert written == ("" if in_force == "first" else second.rendered.hash)


def test_nothing_is_written_early_before_a_config_is_in_force() -> None:
    # The first config waits for Slurm's answer (plan.holds.early_delivery_safe).
    kube, memory = FakeKube(), ClusterMemory()
    assert deliver_if_safe(cast(Any, kube), snapshot(), memory, configured(2), 1.0) == ""
    assert kube.written == []


def test_a_node_added_is_written_early() -> None:
    kube, memory = FakeKube(), ClusterMemory()
    write(kube, memory, configured(2), 1.0)
    grown = configured(3)
    assert deliver_if_safe(cast(Any, kube), snapshot(), memory, grown, 2.0) == grown.rendered.hash
