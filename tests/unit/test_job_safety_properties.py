"""Property: for any fleet Slurm registered and any change to labels, resources or
spec, no node Slurm shows busy leaves the config, changes shape or loses its pod."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkube.plan.cluster import plan_cluster
from slurmkube.slurm.conf_text import LineShape, node_shapes
from slurmkube_local.builders import NodeBuilder
from tests.unit.test_job_safety import NODES, World, configure_again, registered_line


@dataclass(frozen=True)
class NodeSpec:
    pool: str
    gpus: int
    product: str
    cpus: str
    memory: str

    def builder(self, name: str) -> NodeBuilder:
        node = NodeBuilder(name).pool(self.pool).gpus(self.gpus, self.product)
        node.allocatable |= {"cpu": self.cpus, "memory": self.memory}
        return node


node_specs = st.builds(
    NodeSpec,
    pool=st.sampled_from(["gpu", "gpu", "other"]),
    gpus=st.sampled_from([0, 3, 4, 8]),
    product=st.sampled_from(["NVIDIA-GB200", "NVIDIA-H100"]),
    cpus=st.sampled_from(["32", "64"]),
    memory=st.sampled_from(["512Mi", "128Gi", "256Gi", "256Gi"]),
)
# A node is mostly there: None (its Node object gone) one time in five.
fleets = st.fixed_dictionaries(
    {
        n: st.sampled_from([True, True, True, True, False]).flatmap(
            lambda present: node_specs if present else st.none()
        )
        for n in NODES
    }
)
slurm_states = st.fixed_dictionaries(
    {
        "busy": st.sampled_from([True, True, False]),
        "drain": st.booleans(),
        "responding": st.booleans(),
        "reason": st.sampled_from(["slurmkube: x", "admin"]),
    }
)
spec_changes = st.fixed_dictionaries(
    {
        "replicas": st.one_of(st.none(), st.integers(0, len(NODES))),
        "pool": st.sampled_from(["gpu", "other"]),
        "reserved": st.sampled_from([0, 1024, 200_000]),
        "deleted": st.booleans(),
        "image": st.sampled_from(["a", "b"]),
        "cordoned": st.sets(st.sampled_from(NODES)),
    }
)


def world_of(fleet: dict[str, NodeSpec | None]) -> World:
    nodes = {n: spec.builder(n) for n, spec in fleet.items() if spec is not None}
    return World(nodes=nodes, pods={})


def apply_spec(world: World, change: dict[str, Any]) -> None:
    node_set = world.docs[1]["spec"]
    node_set["nodeSelector"] = {"matchLabels": {"slurmkube.io/pool": change["pool"]}}
    node_set["memoryReservedMiB"] = change["reserved"]
    if change["replicas"] is not None:
        node_set["replicas"] = change["replicas"]
    world.docs[0]["spec"]["image"] = f"slurmkube/slurm:{change['image']}"
    world.unavailable = dict.fromkeys(change["cordoned"], "cordoned")
    if change["deleted"]:
        del world.docs[1]
        world.docs[0]["spec"]["partitions"] = []


@settings(max_examples=300, deadline=None)
@given(
    before=fleets,
    after=fleets,
    states=st.fixed_dictionaries({n: slurm_states for n in NODES}),
    change=spec_changes,
)
def test_no_busy_node_leaves_the_config_changes_shape_or_loses_its_pod(
    before: dict[str, NodeSpec | None],
    after: dict[str, NodeSpec | None],
    states: dict[str, dict[str, Any]],
    change: dict[str, Any],
) -> None:
    world = world_of(before)
    first = plan_cluster(world.observed())
    if first.rendered is None:
        return
    lines = configure_again(first)
    # Slurm registered the first config; each running slurmd has its pod.
    world.pods = {n: ns for ns, nodes in first.desired.items() for n in nodes}
    for name, (cpus, memory, gres) in lines.items():
        parts = gres.split(":") if gres else []
        world.slurm[name] = _view(name, cpus, memory, parts, states[name])
    world.nodes = {n: spec.builder(n) for n, spec in after.items() if spec is not None}
    apply_spec(world, change)
    plan = plan_cluster(world.observed())
    assert plan.rendered is not None
    now = configure_again(plan)
    for name, view in world.slurm.items():
        if not view.busy:
            continue
        assert now.get(name) == registered_line(world, name), name
        if name in world.pods:
            assert f"{world.pods[name]}-{name}" not in plan.delete_pods, name


@settings(max_examples=200, deadline=None)
@given(fleet=fleets, change=spec_changes)
def test_the_shapes_read_back_from_slurm_conf_are_the_configs_own(
    fleet: dict[str, NodeSpec | None], change: dict[str, Any]
) -> None:
    """What a restarted operator reads back (plan.holds.ConfigInForce)."""
    world = world_of(fleet)
    apply_spec(world, change)
    plan = plan_cluster(world.observed())
    if plan.rendered is None or plan.config is None:
        return
    read_back = node_shapes(plan.rendered.files["slurm.conf"])
    assert read_back == {
        name: LineShape(shape.cpus, shape.real_memory, shape.gres)
        for name, shape in plan.config.shape_of.items()
    }


def _view(name: str, cpus: int, memory: int, gres: list[str], state: dict[str, Any]) -> Any:
    from slurmkube.plan.model import SlurmNodeView

    return SlurmNodeView(
        name,
        busy=state["busy"],
        drain=state["drain"],
        reason=state["reason"] if state["drain"] else "",
        responding=state["responding"],
        cpus=cpus,
        real_memory=memory,
        gpus=int(gres[-1]) if gres else 0,
        gpu_type=gres[1] if len(gres) == 3 else "",
    )
