"""A node Slurm shows with a job never leaves the config, changes shape or loses its
slurmd pod before it is drained and idle, whatever changed in Kubernetes."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from slurmkube.api.documents import parse_cluster
from slurmkube.api.slurm_version import SUPPORTED
from slurmkube.plan.cluster import Configured, configure, plan_cluster
from slurmkube.plan.holds import (
    CHANGE_REASON,
    NOT_RESPONDING_GRACE_SECONDS,
    ConfigInForce,
    early_delivery_safe,
    not_responding_since,
)
from slurmkube.plan.model import Condition, Observed, Plan, PodView, SlurmNodeView
from slurmkube.plan.status import node_problems_status
from slurmkube.render.context import SLURMD_TIMEOUT_SECONDS
from slurmkube.slurm.conf_text import node_shapes
from slurmkube.topology.fleet import fleet_node
from slurmkube_local.builders import NodeBuilder, cluster_docs

NODES = ("gpu-0001", "gpu-0002", "gpu-0003")
NODE = "gpu-0002"  # the node every change is aimed at
POD = f"gpu-{NODE}"
NOW = 1_000_000.0


@dataclass
class World:
    """Kubernetes and Slurm as one reconcile observes them (a test builder)."""

    docs: list[dict[str, Any]] = field(default_factory=lambda: cluster_docs(pools=("gpu",)))
    nodes: dict[str, NodeBuilder] = field(
        default_factory=lambda: {n: NodeBuilder(n).gpus(4) for n in NODES}
    )
    pods: dict[str, str] = field(default_factory=lambda: {n: "gpu" for n in NODES})
    slurm: dict[str, SlurmNodeView] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    not_responding_since: dict[str, float] = field(default_factory=dict)

    def observed(self) -> Observed:
        return Observed(
            bundle=parse_cluster(copy.deepcopy(self.docs)),
            fleet=[fleet_node(b.obj()) for _, b in sorted(self.nodes.items())],
            pods=[PodView(f"{ns}-{n}", n, ns) for n, ns in sorted(self.pods.items())],
            slurm_nodes=dict(self.slurm),
            unavailable=dict(self.unavailable),
            now=NOW,
            not_responding_since=dict(self.not_responding_since),
        )

    def registered(self) -> World:
        """Slurm has registered every node with the shape the current config gives it."""
        configured = configure(self.observed())
        assert isinstance(configured, Configured)
        for name in NODES:
            shape = configured.config.shape_of[name]
            gres = str(shape.gres or "")
            self.slurm[name] = SlurmNodeView(
                name,
                busy=False,
                drain=False,
                cpus=shape.cpus,
                real_memory=shape.real_memory,
                gpus=int(gres.rsplit(":", 1)[1]) if gres else 0,
                gpu_type=gres.split(":")[1] if gres.count(":") == 2 else "",
            )
        return self

    def state(self, node: str, **kw: Any) -> World:
        self.slurm[node] = replace(self.slurm[node], **kw)
        return self


def relabel_out(w: World) -> None:
    w.nodes[NODE].pool("other")


def selector_edit(w: World) -> None:
    w.docs[1]["spec"]["nodeSelector"] = {"matchLabels": {"slurmkube.io/pool": "none"}}


def gpu_drop(w: World) -> None:
    w.nodes[NODE].gpus(3)


def gpu_rise(w: World) -> None:
    w.nodes[NODE].gpus(8)


def node_recreated(w: World) -> None:
    del w.nodes[NODE]  # gone from the watch until the new Node object arrives


def product_change(w: World) -> None:
    w.nodes[NODE].gpus(4, "NVIDIA-H100")


def cpus_change(w: World) -> None:
    w.nodes[NODE].allocatable["cpu"] = "32"


def memory_change(w: World) -> None:
    w.nodes[NODE].allocatable["memory"] = "128Gi"


def scale_in(w: World) -> None:
    w.docs[1]["spec"]["replicas"] = 1


def node_set_deleted(w: World) -> None:
    # The NodeSet object is gone (no finalizer held it): its partition goes with it.
    del w.docs[1]
    w.docs[0]["spec"]["partitions"] = []


def cordon(w: World) -> None:
    w.unavailable[NODE] = "cordoned"


def overlap(w: World) -> None:
    w.docs.append(copy.deepcopy(w.docs[1]))
    w.docs[-1]["metadata"]["name"] = "other"
    w.docs[-1]["spec"]["nodeSelector"] = {"matchLabels": {"kubernetes.io/hostname": NODE}}
    w.nodes[NODE].label("kubernetes.io/hostname", NODE)


def memory_below_reserved(w: World) -> None:
    w.nodes[NODE].allocatable["memory"] = "512Mi"


def image_change(w: World) -> None:
    w.docs[0]["spec"]["image"] = "slurmkube/slurm:other"


CHANGES: dict[str, Callable[[World], None]] = {
    "relabelled out of its NodeSet": relabel_out,
    "NodeSet selector edited": selector_edit,
    "allocatable GPUs dropped": gpu_drop,
    "allocatable GPUs rose": gpu_rise,
    "Node re-created": node_recreated,
    "GPU product label changed": product_change,
    "CPUs changed": cpus_change,
    "memory changed": memory_change,
    "NodeSet scaled in": scale_in,
    "NodeSet deleted": node_set_deleted,
    "node cordoned": cordon,
    "two NodeSets overlap on it": overlap,
    "memory below memoryReservedMiB": memory_below_reserved,
    "slurmd image changed": image_change,
}


def changed(change: Callable[[World], None], **state: Any) -> tuple[World, Plan]:
    world = World().registered().state(NODE, **state)
    change(world)
    return world, plan_cluster(world.observed())


def configure_again(plan: Plan) -> dict[str, tuple[int, int, str]]:
    """Node -> (CPUs, RealMemory, Gres) as the plan's slurm.conf states them."""
    assert plan.rendered is not None
    shapes = node_shapes(plan.rendered.files["slurm.conf"])
    return {name: (s.cpus, s.real_memory, s.gres or "") for name, s in shapes.items()}


def registered_line(world: World, node: str) -> tuple[int, int, str]:
    view = world.slurm[node]
    gres = f"gpu:{view.gpu_type}:{view.gpus}" if view.gpus else ""
    return (view.cpus, view.real_memory, gres)


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
@pytest.mark.parametrize(
    "state",
    [
        {"busy": True},
        {"busy": True, "drain": True, "reason": "slurmkube: slurmd pod removal"},
        {"busy": True, "drain": True, "reason": "admin: bad fan"},
        {"busy": True, "responding": False},
    ],
    ids=["busy", "draining", "admin-drained busy", "busy not responding"],
)
def test_a_busy_node_keeps_its_line_and_its_pod(
    change: Callable[[World], None], state: dict[str, Any]
) -> None:
    world, plan = changed(change, **state)
    assert configure_again(plan).get(NODE) == registered_line(world, NODE)
    # (`delete_once_drained` may name it: apply deletes only if Slurm, asked again
    # after the drain, shows the node idle; tests/unit/test_cluster_plan.py.)
    assert POD not in plan.delete_pods


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
def test_a_busy_node_is_drained_first_when_its_pod_or_line_must_change(
    change: Callable[[World], None],
) -> None:
    world, plan = changed(change, busy=True)
    pod_goes = not any(
        p["metadata"]["name"] == POD for p in plan.create_pods
    ) and POD not in _wanted(plan)
    k8s_line = _line_without_slurm(world)
    if pod_goes or k8s_line != registered_line(world, NODE):
        assert NODE in plan.drain
        assert NODE in plan.rolling or pod_goes  # not resumed while the change waits
    else:
        assert NODE not in plan.drain


def _wanted(plan: Plan) -> set[str]:
    return {f"{ns}-{n}" for ns, nodes in plan.desired.items() for n in nodes}


def _line_without_slurm(world: World) -> tuple[int, int, str] | None:
    """The line Kubernetes alone would give the node (no Slurm view, no pods)."""
    observed = replace(world.observed(), slurm_nodes={}, pods=())
    return configure_again(plan_cluster(observed)).get(NODE)


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
def test_once_drained_and_idle_the_change_lands(change: Callable[[World], None]) -> None:
    world, plan = changed(change, busy=False, drain=True, reason="slurmkube: x")
    expected = _line_without_slurm(world)
    if change is gpu_drop:
        # A health event, not a reconfigure: the registered GRES stay while GPUs are missing.
        expected = registered_line(world, NODE)
    assert configure_again(plan).get(NODE) == expected
    if POD not in _wanted(plan):
        assert POD in plan.delete_pods


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
def test_a_busy_node_slurm_gave_up_on_may_lose_its_pod(change: Callable[[World], None]) -> None:
    overdue = NOW - SLURMD_TIMEOUT_SECONDS - NOT_RESPONDING_GRACE_SECONDS
    world = World().registered().state(NODE, busy=True, responding=False)
    world.not_responding_since[NODE] = overdue
    change(world)
    plan = plan_cluster(world.observed())
    if POD not in _wanted(plan):
        assert POD in plan.delete_pods


@pytest.mark.parametrize(
    ("since", "deleted"),
    [
        (None, False),  # never seen answering again, since unknown: wait
        (NOW, False),  # just stopped answering
        (NOW - SLURMD_TIMEOUT_SECONDS, False),  # SlurmdTimeout passed, not the grace
        (NOW - SLURMD_TIMEOUT_SECONDS - NOT_RESPONDING_GRACE_SECONDS, True),
    ],
    ids=["unknown", "now", "timeout", "timeout+grace"],
)
def test_a_not_responding_busy_node_keeps_its_pod_until_slurmd_timeout_and_grace(
    since: float | None, deleted: bool
) -> None:
    world = World().registered().state(NODE, busy=True, responding=False)
    if since is not None:
        world.not_responding_since[NODE] = since
    scale_in(world)
    plan = plan_cluster(world.observed())
    assert (POD in plan.delete_pods) is deleted


def test_a_not_responding_idle_node_loses_its_pod_at_once() -> None:
    world = World().registered().state(NODE, responding=False)
    scale_in(world)
    assert POD in plan_cluster(world.observed()).delete_pods


def test_a_gpu_drop_is_a_health_event_reported_per_node_and_drained() -> None:
    world, plan = changed(gpu_drop)
    assert configure_again(plan)[NODE] == registered_line(world, NODE)
    assert plan.drain_reasons[NODE].startswith("slurmkube:")
    (problem,) = plan.node_problems
    assert (problem.node, problem.reason) == (NODE, "GpusBelowRegistered")
    assert "3 GPUs allocatable, 4 registered" in problem.message
    valid = next(c for c in plan.conditions if c.type == "NodesValid")
    assert not valid.status and NODE in valid.message
    # The pod keeps asking for the GPUs Slurm was promised: no replacement.
    assert POD not in plan.delete_pods and not plan.create_pods


@pytest.mark.parametrize("change", [overlap, memory_below_reserved], ids=["overlap", "memory"])
def test_a_bad_node_is_a_node_problem_and_the_rest_of_the_cluster_still_plans(
    change: Callable[[World], None],
) -> None:
    world = World(pods={})
    change(world)
    plan = plan_cluster(world.observed())
    assert plan.rendered is not None and plan.objects
    lines = configure_again(plan)
    assert NODE not in lines and set(lines) == set(NODES) - {NODE}
    assert [p.node for p in plan.node_problems] == [NODE]
    created = {p["metadata"]["name"] for p in plan.create_pods}
    assert created == {f"gpu-{n}" for n in NODES if n != NODE}


def test_a_change_waiting_on_a_busy_node_drains_it_with_the_owned_reason() -> None:
    _, plan = changed(cpus_change, busy=True)
    assert plan.drain_reasons[NODE] == CHANGE_REASON


def test_a_config_made_before_slurm_was_read_is_made_again_when_it_would_hurt_a_job() -> None:
    world = World().registered()
    relabel_out(world)
    early = configure(replace(world.observed(), slurm_nodes=None, pods=()))
    assert isinstance(early, Configured) and NODE not in early.config.shape_of
    world.state(NODE, busy=True)
    plan = plan_cluster(world.observed(), early)
    assert configure_again(plan)[NODE] == registered_line(world, NODE)
    assert plan.config_map != early.config_map


def test_a_config_made_with_the_same_holds_is_kept() -> None:
    world = World().registered().state(NODE, busy=True)
    relabel_out(world)
    configured = configure(world.observed())
    assert not isinstance(configured, Condition)
    plan = plan_cluster(world.observed(), configured)
    assert plan.config_map == configured.config_map


def test_without_slurm_every_node_with_a_pod_keeps_its_nodeset() -> None:
    world = World()
    relabel_out(world)
    plan = plan_cluster(replace(world.observed(), slurm_nodes=None))
    assert NODE in configure_again(plan)
    assert plan.delete_pods == ()


@pytest.mark.parametrize(
    ("before", "responding", "since"),
    [
        ({}, False, NOW),  # first seen not responding: now
        ({NODE: NOW - 50}, False, NOW - 50),  # still not responding: kept
        ({NODE: NOW - 50}, True, None),  # answering again: forgotten
    ],
)
def test_not_responding_since_is_remembered_from_the_first_sighting(
    before: dict[str, float], responding: bool, since: float | None
) -> None:
    world = World().registered().state(NODE, responding=responding, busy=True)
    remembered = not_responding_since(before, world.observed().slurm_nodes, NOW)
    assert remembered.get(NODE) == since


def test_without_slurm_the_memory_of_not_responding_is_kept() -> None:
    assert not_responding_since({NODE: 1.0}, None, NOW) == {NODE: 1.0}


@pytest.mark.parametrize(
    ("change", "safe"),
    [
        (None, True),
        (lambda w: w.nodes.update({"gpu-0009": NodeBuilder("gpu-0009").gpus(4)}), True),
        (lambda w: w.nodes[NODE].label("topology.slurmkube.io/leaf", "x"), True),
        (relabel_out, False),
        (cpus_change, False),
        (gpu_drop, False),
        (product_change, False),
    ],
    ids=["nothing", "node added", "label no line reads", "removed", "cpus", "gpus", "product"],
)
def test_a_config_may_be_written_before_slurm_is_read_only_if_no_line_goes_or_changes(
    change: Callable[[World], None] | None, safe: bool
) -> None:
    world = World(pods={})
    delivered = configure(world.observed())
    if change is not None:
        change(world)
    new = configure(world.observed())
    assert isinstance(delivered, Configured) and isinstance(new, Configured)
    assert early_delivery_safe(delivered.config, new.config) is safe
    # After a restart: the config read back from its ConfigMap decides the same.
    shapes = node_shapes(delivered.rendered.files["slurm.conf"])
    read_back = ConfigInForce(delivered.config.slurm_version, shapes)
    assert early_delivery_safe(read_back, new.config) is safe
    assert not early_delivery_safe(None, new.config)  # nothing in force known: wait for Slurm


def test_node_problems_are_listed_in_status() -> None:
    world = World(pods={})
    memory_below_reserved(world)
    (entry,) = node_problems_status(plan_cluster(world.observed()))
    assert entry["node"] == NODE and entry["reason"] == "MemoryBelowReserved"
    assert "spec.memoryReservedMiB" in entry["message"]


def test_cpus_reserved_keeps_cpus_back_from_slurm_and_the_pod() -> None:
    world = World(pods={})
    world.docs[1]["spec"]["podQoS"] = "Guaranteed"
    world.docs[1]["spec"]["cpusReserved"] = 2
    plan = plan_cluster(world.observed())
    assert {cpus for cpus, _, _ in configure_again(plan).values()} == {62}
    assert {p["spec"]["resources"]["limits"]["cpu"] for p in plan.create_pods} == {"62"}
    world.docs[1]["spec"]["cpusReserved"] = 64
    problems = plan_cluster(world.observed()).node_problems
    assert {(p.node, p.reason) for p in problems} == {(n, "CpusBelowReserved") for n in NODES}


def test_another_releases_files_are_never_written_before_slurm_is_read() -> None:
    """Mid-upgrade the files switch release only with the whole plan, which knows
    which Slurm each daemon runs (a 24.11 slurmd dies on 26.05's keys)."""
    world = World(pods={})
    delivered = configure(world.observed())
    assert isinstance(delivered, Configured)
    other = next(v for v in SUPPORTED if v != delivered.config.slurm_version)
    moved = replace(delivered.config, slurm_version=other)
    assert not early_delivery_safe(delivered.config, moved)
    assert early_delivery_safe(delivered.config, delivered.config)
