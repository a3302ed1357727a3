"""The config's two writers (the config queue and the reconcile): a config made
from an older look at the Node index never replaces a newer one."""

from __future__ import annotations

from typing import Any, cast

import pytest

from slurmkube.controllers.early_config import deliver, deliver_if_safe
from slurmkube.controllers.memory import ClusterMemory
from slurmkube.controllers.observe import Snapshot, node_entry, observe, observe_again
from slurmkube.plan.cluster import Configured, configure
from slurmkube.plan.model import Observed
from slurmkube.topology.fleet import fleet_node
from slurmkube_local.builders import NodeBuilder, bundle, cluster_docs, nvl_fleet


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


class ObjectsKube:
    """Serves one SlurmCluster object; nothing else exists. Counts reads."""

    def __init__(self, cluster: dict[str, Any]) -> None:
        self.cluster = cluster
        self.reads = 0

    def get(self, api_version: str, kind: str, name: str, namespace: str) -> Any:
        self.reads += 1
        return self.cluster if kind == "SlurmCluster" else None

    def list(self, *_: object) -> list[Any]:
        self.reads += 1
        return []

    def secret_value(self, *_: object) -> None:
        self.reads += 1


def cluster_obj(version: str, generation: int | None = None) -> dict[str, Any]:
    """`generation`: the spec's (each version a spec change unless given)."""
    doc = next(d for d in cluster_docs() if d["kind"] == "SlurmCluster")
    meta = {**doc["metadata"], "namespace": "default", "resourceVersion": version, "uid": "u"}
    meta["generation"] = int(version) if generation is None else generation
    return {**doc, "metadata": meta}


@pytest.mark.parametrize(
    ("version", "reused"), [("1", True), ("2", False)], ids=["same version", "changed"]
)
def test_the_config_queue_reuses_the_reconciles_look_at_an_unchanged_cluster(
    version: str, reused: bool
) -> None:
    last = observe(cast(Any, ObjectsKube(cluster_obj("1"))), "default", "test", {}, ())
    assert last is not None
    kube = ObjectsKube(cluster_obj(version))
    built = [NodeBuilder(f"gpu-{i}").clique(1) for i in (2, 1)]
    nodes = {b.name: node_entry(b.dict()) for b in built}
    again = observe_again(cast(Any, kube), "default", "test", nodes, (), last=last)
    assert again is not None
    assert (again.cluster_obj is last.cluster_obj) is reused
    assert (kube.reads == 1) is reused
    assert [n.name for n in again.observed.fleet] == sorted(nodes)


def test_a_status_write_alone_does_not_make_the_config_queue_read_everything_again() -> None:
    # Each reconcile writes status; the spec is what the config is made from.
    last = observe(cast(Any, ObjectsKube(cluster_obj("1"))), "default", "test", {}, ())
    assert last is not None
    kube = ObjectsKube(cluster_obj("2", generation=1))
    again = observe_again(cast(Any, kube), "default", "test", {}, (), last=last)
    assert again is not None
    assert kube.reads == 1
    assert again.cluster_obj["metadata"]["resourceVersion"] == "2"  # today's status
