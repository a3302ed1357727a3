"""The config's two writers (the config queue and the reconcile): a config made
from an older look at the Node index never replaces a newer one."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

import pytest

from slurmkube.api import well_known as wk
from slurmkube.controllers import early_config
from slurmkube.controllers.early_config import deliver, deliver_if_safe
from slurmkube.controllers.memory import ClusterMemory, State
from slurmkube.controllers.observe import Snapshot, node_entry, observe, observe_again
from slurmkube.controllers.topology_moves import follow_slurm
from slurmkube.plan.cluster import Configured, configure
from slurmkube.plan.model import Observed, SlurmNodeView
from slurmkube.render.live_topology import units_of
from slurmkube.slurm.errors import SlurmError
from slurmkube.topology.fleet import fleet_node
from slurmkube_local.builders import NodeBuilder, bundle, cluster_docs, nvl_fleet


class FakeKube:
    """Records the config hashes written, in order; serves the ConfigMap last written."""

    def __init__(self) -> None:
        self.written: list[str] = []
        self.config_map: dict[str, Any] | None = None

    def apply(self, obj: dict[str, Any], owner: object = None) -> None:
        self.written.append(obj["data"]["config-hash"])
        self.config_map = obj

    def get(self, api_version: str, kind: str, name: str, namespace: str) -> Any:
        return self.config_map if kind == "ConfigMap" else None

    def annotate_pod(self, *_: object) -> None:
        pass


def configured(nodes: int) -> Configured:
    fleet = [fleet_node(n) for n in nvl_fleet(1, nodes)]
    made = configure(Observed(bundle=bundle(), fleet=fleet, pods=(), slurm_nodes=None))
    assert isinstance(made, Configured)
    return made


def snapshot(config_hash: str | None = None) -> Snapshot:
    status = {} if config_hash is None else {"configHash": config_hash}
    obj = {"metadata": {"name": "test", "namespace": "default"}, "status": status}
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


def test_after_a_restart_the_config_in_force_is_read_back_from_the_config_map() -> None:
    kube = FakeKube()
    write(kube, ClusterMemory(), configured(2), 1.0)
    restarted = ClusterMemory()
    grown = configured(3)
    assert (
        deliver_if_safe(cast(Any, kube), snapshot(), restarted, grown, 2.0) == grown.rendered.hash
    )
    # A line that leaves waits for Slurm's answer, as before the restart.
    again = ClusterMemory()
    assert deliver_if_safe(cast(Any, kube), snapshot(), again, configured(2), 3.0) == ""


def test_a_config_map_without_its_slurm_release_is_not_trusted() -> None:
    kube = FakeKube()
    write(kube, ClusterMemory(), configured(2), 1.0)
    assert kube.config_map is not None
    del kube.config_map["metadata"]["annotations"][wk.ANNOTATION_SLURM_RELEASE]
    grown = configured(3)
    assert deliver_if_safe(cast(Any, kube), snapshot(), ClusterMemory(), grown, 2.0) == ""


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


# --- nodes moved live (26.05: render/live_topology.py) ---


class MovingSlurm:
    """Records `move_nodes` calls; fails the first `failures` of them."""

    def __init__(self, failures: int = 0) -> None:
        self.moved: list[tuple[tuple[str, ...], tuple[tuple[str, str], ...]]] = []
        self.failures = failures
        # Refuse every unit, as a slurmctld that has not loaded the files would.
        self.refuse_units = False

    def move_nodes(self, nodes: tuple[str, ...], units: tuple[tuple[str, str], ...]) -> None:
        if self.failures:
            self.failures -= 1
            raise SlurmError("slurmctld busy")
        if units and self.refuse_units:
            raise SlurmError("Requested topology configuration is not available")
        self.moved.append((tuple(nodes), tuple(units)))


class ConfigMapKube(FakeKube):
    """Keeps the ConfigMap written and the pod annotations set."""

    def __init__(self) -> None:
        super().__init__()
        self.config_map: dict[str, Any] | None = None
        self.annotations: list[tuple[str, str]] = []

    def apply(self, obj: dict[str, Any], owner: object = None) -> None:
        super().apply(obj, owner)
        self.config_map = obj

    def get(self, *_: object) -> Any:
        return self.config_map

    def annotate_pod(self, *args: object) -> None:
        self.annotations.append((str(args[2]), str(args[3])))


class Clients:
    def __init__(self, slurm: MovingSlurm) -> None:
        self.slurm = slurm

    def rest(self, *_: object) -> MovingSlurm:
        return self.slurm


def placed(cliques: list[int]) -> Configured:
    """Six nodes in NVLink domains `cliques` (26.05, blocks of two)."""
    nodes = nvl_fleet(domains=1, per_domain=len(cliques))
    fleet = [
        fleet_node(NodeBuilder(n.metadata.name, labels=dict(n.metadata.labels)).clique(c).obj())
        for n, c in zip(nodes, cliques, strict=True)
    ]
    b = bundle(block_size=2, extra={"slurm": {"version": "26.05"}})
    made = configure(Observed(bundle=b, fleet=fleet, pods=(), slurm_nodes=None))
    assert isinstance(made, Configured)
    return made


BEFORE, SWAPPED = [1, 1, 2, 2, 3, 3], [2, 1, 1, 2, 3, 3]


@pytest.fixture
def slurm(monkeypatch: pytest.MonkeyPatch) -> MovingSlurm:
    moving = MovingSlurm()
    monkeypatch.setattr(State, "clients", Clients(moving))
    return moving


def test_a_node_moved_between_existing_blocks_is_moved_in_slurm_without_a_reconfigure(
    slurm: MovingSlurm,
) -> None:
    kube, memory = ConfigMapKube(), ClusterMemory()
    first, second = placed(BEFORE), placed(SWAPPED)
    deliver(cast(Any, kube), snapshot(), memory, first, 1.0)
    assert slurm.moved == []  # a new cluster's slurmctld starts on the files
    deliver(cast(Any, kube), snapshot(first.rendered.hash), memory, second, 2.0)
    # The same config hash: the reloader does not reconfigure.
    assert kube.written == [first.rendered.hash, first.rendered.hash]
    assert sorted(n for nodes, _ in slurm.moved for n in nodes) == ["gpu-0001", "gpu-0003"]
    assert memory.units_in_slurm == units_of(second.config)
    # The new files reach the pod now, for a slurmctld that restarts.
    assert kube.annotations[-1] == (wk.ANNOTATION_CONFIG_CONTENT, second.rendered.content_hash)


def test_a_failed_move_is_sent_again_by_the_next_delivery(monkeypatch: pytest.MonkeyPatch) -> None:
    failing = MovingSlurm(failures=1)
    monkeypatch.setattr(State, "clients", Clients(failing))
    kube, memory = ConfigMapKube(), ClusterMemory()
    deliver(cast(Any, kube), snapshot(), memory, placed(BEFORE), 1.0)
    second = placed(SWAPPED)
    deliver(cast(Any, kube), snapshot(), memory, second, 2.0)
    assert memory.units_in_slurm != units_of(second.config)
    deliver(cast(Any, kube), snapshot(), memory, second, 3.0)
    assert memory.units_in_slurm == units_of(second.config)
    assert sorted(n for nodes, _ in failing.moved for n in nodes) == ["gpu-0001", "gpu-0003"]


def test_a_restarted_operator_moves_what_changed_since_the_files_it_finds(
    slurm: MovingSlurm,
) -> None:
    kube = ConfigMapKube()
    deliver(cast(Any, kube), snapshot(), ClusterMemory(), placed(BEFORE), 1.0)
    # A new process: nothing in memory, the ConfigMap as the last one left it.
    second = placed(SWAPPED)
    deliver(cast(Any, kube), snapshot(), ClusterMemory(), second, 2.0)
    assert sorted(n for nodes, _ in slurm.moved for n in nodes) == ["gpu-0001", "gpu-0003"]


def test_a_new_block_is_a_reconfigure_not_a_move(slurm: MovingSlurm) -> None:
    kube, memory = ConfigMapKube(), ClusterMemory()
    deliver(cast(Any, kube), snapshot(), memory, placed(BEFORE), 1.0)
    grown = placed([1, 1, 2, 2, 4, 4])
    deliver(cast(Any, kube), snapshot(), memory, grown, 2.0)
    assert slurm.moved == []
    assert kube.written[-1] == grown.rendered.hash != placed(BEFORE).rendered.hash


def test_a_status_write_alone_does_not_make_the_config_queue_read_everything_again() -> None:
    # Each reconcile writes status; the spec is what the config is made from.
    last = observe(cast(Any, ObjectsKube(cluster_obj("1"))), "default", "test", {}, ())
    assert last is not None
    kube = ObjectsKube(cluster_obj("2", generation=1))
    again = observe_again(cast(Any, kube), "default", "test", {}, (), last=last)
    assert again is not None
    assert kube.reads == 1
    assert again.cluster_obj["metadata"]["resourceVersion"] == "2"  # today's status


def overrides(kube: ConfigMapKube) -> str | None:
    assert kube.config_map is not None
    annotations = kube.config_map["metadata"].get("annotations") or {}
    return annotations.get(wk.ANNOTATION_TOPOLOGY_OVERRIDES)


# After SWAPPED, domain 2 goes and domain 4 comes: block 2, which Slurm keeps
# gpu-0001 in, is not in the new files (slurmctld 26.05 would not start).
REGROUPED = [4, 4, 1, 1, 3, 3]


def test_a_reconfigure_first_settles_the_nodes_moved_live(slurm: MovingSlurm) -> None:
    kube, memory = ConfigMapKube(), ClusterMemory()
    deliver(cast(Any, kube), snapshot(), memory, placed(BEFORE), 1.0)
    assert overrides(kube) is None
    deliver(cast(Any, kube), snapshot(), memory, placed(SWAPPED), 2.0)
    assert overrides(kube) == "gpu-[0001,0003]"
    slurm.moved.clear()
    regrouped = placed(REGROUPED)
    deliver(cast(Any, kube), snapshot(), memory, regrouped, 3.0)
    # Out of every unit, or already where the new files put it; then the write.
    assert slurm.moved == [
        (("gpu-0001",), ()),
        (("gpu-0003",), units_of(regrouped.config)["gpu-0003"]),
    ]
    assert kube.written[-1] == regrouped.rendered.hash
    assert memory.overridden == {"gpu-0003"}
    assert overrides(kube) == "gpu-0003"


def test_a_reconfigure_waits_while_slurm_does_not_take_the_settling(slurm: MovingSlurm) -> None:
    kube, memory = ConfigMapKube(), ClusterMemory()
    deliver(cast(Any, kube), snapshot(), memory, placed(BEFORE), 1.0)
    deliver(cast(Any, kube), snapshot(), memory, placed(SWAPPED), 2.0)
    written = list(kube.written)
    slurm.failures = 1
    regrouped = placed(REGROUPED)
    assert deliver(cast(Any, kube), snapshot(), memory, regrouped, 3.0) == ""
    assert kube.written == written
    assert memory.overridden == {"gpu-0001", "gpu-0003"}
    assert deliver(cast(Any, kube), snapshot(), memory, regrouped, 4.0) == regrouped.rendered.hash


def test_a_restarted_operator_settles_the_nodes_the_config_map_lists(slurm: MovingSlurm) -> None:
    kube = ConfigMapKube()
    memory = ClusterMemory()
    deliver(cast(Any, kube), snapshot(), memory, placed(BEFORE), 1.0)
    deliver(cast(Any, kube), snapshot(memory.config_clock.hash), memory, placed(SWAPPED), 2.0)
    slurm.moved.clear()
    # A new process: nothing in memory, the ConfigMap as the last one left it.
    deliver(cast(Any, kube), snapshot(), ClusterMemory(), placed(REGROUPED), 3.0)
    assert sorted(n for nodes, _ in slurm.moved for n in nodes) == ["gpu-0001", "gpu-0003"]


def test_a_read_of_slurm_moves_again_a_node_power_saving_put_back(slurm: MovingSlurm) -> None:
    kube, memory = ConfigMapKube(), ClusterMemory()
    deliver(cast(Any, kube), snapshot(), memory, placed(BEFORE), 1.0)
    second = placed(SWAPPED)
    deliver(cast(Any, kube), snapshot(), memory, second, 2.0)
    slurm.moved.clear()
    wanted = units_of(second.config)
    shown = {
        # Powered down: back in its first block, no override.
        "gpu-0001": "",
        "gpu-0003": ",".join(f"{t}:{u}" for t, u in wanted["gpu-0003"]),
        # An admin's own move.
        "gpu-0005": "nvlink:elsewhere",
    }
    snap = snapshot()
    views = {n: SlurmNodeView(n, busy=False, drain=False, topology=t) for n, t in shown.items()}
    snap = replace(snap, observed=replace(snap.observed, slurm_nodes=views))
    follow_slurm(cast(Any, kube), snap, memory)
    # Both back where the labels put them; the admin's counted for the next reconfigure.
    assert slurm.moved == [
        (("gpu-0001",), wanted["gpu-0001"]),
        (("gpu-0005",), wanted["gpu-0005"]),
    ]
    assert memory.overridden == {"gpu-0001", "gpu-0003", "gpu-0005"}
    slurm.moved.clear()
    settled = {n: ",".join(f"{t}:{u}" for t, u in wanted[n]) for n in shown}
    views = {n: SlurmNodeView(n, busy=False, drain=False, topology=t) for n, t in settled.items()}
    follow_slurm(
        cast(Any, kube), replace(snap, observed=replace(snap.observed, slurm_nodes=views)), memory
    )
    assert slurm.moved == []


def test_a_unit_slurm_refuses_while_settling_takes_the_nodes_out_of_every_unit(
    slurm: MovingSlurm,
) -> None:
    kube, memory = ConfigMapKube(), ClusterMemory()
    deliver(cast(Any, kube), snapshot(), memory, placed(BEFORE), 1.0)
    deliver(cast(Any, kube), snapshot(), memory, placed(SWAPPED), 2.0)
    slurm.moved.clear()
    slurm.refuse_units = True
    regrouped = placed(REGROUPED)
    assert deliver(cast(Any, kube), snapshot(), memory, regrouped, 3.0) == regrouped.rendered.hash
    assert slurm.moved == [(("gpu-0001",), ()), (("gpu-0003",), ())]
    assert memory.overridden == frozenset()


def test_a_write_waits_for_the_settling_only_so_long(
    slurm: MovingSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    kube, memory = ConfigMapKube(), ClusterMemory()
    deliver(cast(Any, kube), snapshot(), memory, placed(BEFORE), 1.0)
    deliver(cast(Any, kube), snapshot(), memory, placed(SWAPPED), 2.0)
    slurm.failures = 100  # slurmctld down
    regrouped = placed(REGROUPED)
    assert deliver(cast(Any, kube), snapshot(), memory, regrouped, 3.0) == ""
    assert memory.settling_since is not None
    # Long enough: the files go, and the nodes stay counted for the next settling.
    memory.settling_since -= early_config.SETTLE_WAIT_SECONDS
    assert deliver(cast(Any, kube), snapshot(), memory, regrouped, 4.0) == regrouped.rendered.hash
    assert memory.overridden == {"gpu-0001", "gpu-0003"}
    assert memory.settling_since is None


def test_a_node_slurm_does_not_have_holds_no_override(slurm: MovingSlurm) -> None:
    kube, memory = ConfigMapKube(), ClusterMemory()
    deliver(cast(Any, kube), snapshot(), memory, placed(BEFORE), 1.0)
    second = placed(SWAPPED)
    deliver(cast(Any, kube), snapshot(), memory, second, 2.0)
    wanted = units_of(second.config)
    # gpu-0001 is not in Slurm's answer; gpu-0003 is where it was sent.
    topology = ",".join(f"{t}:{u}" for t, u in wanted["gpu-0003"])
    views = {"gpu-0003": SlurmNodeView("gpu-0003", busy=False, drain=False, topology=topology)}
    snap = snapshot()
    follow_slurm(
        cast(Any, kube), replace(snap, observed=replace(snap.observed, slurm_nodes=views)), memory
    )
    assert memory.overridden == {"gpu-0003"}
