"""Property: whatever happens between reconciles (jobs starting and ending, pods
becoming Ready or going, Deployments rolling out, time passing an update
window), an upgrade through `plan_cluster` never runs slurmd newer than
slurmctld nor slurmctld newer than slurmdbd, never replaces the pod of a node
with a job, never lets a block run jobs while it is half old, half new, and
never drains for it or replaces pods outside the window. Run to the end,
every pod is upgraded."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkube.api import well_known as wk
from slurmkube.api.documents import ClusterBundle
from slurmkube.plan.cluster import plan_cluster, undrain_candidates
from slurmkube.plan.model import Observed, Plan, PodView, SlurmNodeView
from slurmkube.plan.slurm_release import Release, release_of
from slurmkube.plan.upgrade_model import (
    LOGIN,
    SLURMCTLD,
    SLURMDBD,
    SLURMRESTD,
    ComponentView,
    UpgradeMemory,
)
from slurmkube.render.slurmdbd import DatabaseCredentials
from slurmkube.topology.fleet import fleet_node
from slurmkube_local.builders import bundle, nvl_fleet
from tests.unit.upgrade_builders import NEW, NOW, OLD

FLEET = [fleet_node(n) for n in nvl_fleet(3, 2)]
NODES = sorted(n.name for n in FLEET)
DATABASE = {"host": "mariadb", "secretName": "db"}
OBJECTS = {
    ("StatefulSet", "test-slurmctld"): SLURMCTLD,
    ("Deployment", "test-slurmrestd"): SLURMRESTD,
    ("Deployment", "test-login"): LOGIN,
    ("Deployment", "test-slurmdbd"): SLURMDBD,
}


def cluster(
    image: str, accounting: bool, max_unavailable: int, window: tuple[int, int] | None = None
) -> ClusterBundle:
    """`window`: (start, minutes), the start in seconds after NOW."""
    extra: dict[str, object] = {"image": image}
    if accounting:
        extra["accounting"] = {"enabled": True, "database": DATABASE}
    b = bundle(block_size=2, extra=extra)
    ns = b.node_sets[0]
    spec = ns.spec.model_validate(
        ns.spec.model_dump(by_alias=True) | {"updateStrategy": strategy(max_unavailable, window)}
    )
    return ClusterBundle(b.cluster, (ns.model_copy(update={"spec": spec}),))


def strategy(max_unavailable: int, window: tuple[int, int] | None) -> dict[str, object]:
    out: dict[str, object] = {"maxUnavailable": max_unavailable}
    if window is not None:
        start = dt.datetime.fromtimestamp(NOW + window[0], dt.UTC).isoformat()
        out["window"] = {"start": start, "durationMinutes": window[1]}
    return out


def version(image: str) -> Release:
    release = release_of(image)
    assert release is not None
    return release


@dataclass
class Component:
    template: str
    running: str


@dataclass
class World:
    """A cluster on OLD whose spec now says NEW, and what Slurm and Kubernetes do."""

    accounting: bool
    max_unavailable: int
    # Start with the control plane upgraded already (the slurmd step under way).
    control_done: bool = False
    window: tuple[int, int] | None = None
    components: dict[str, Component] = field(default_factory=dict)
    pods: dict[str, PodView] = field(default_factory=dict)
    slurm: dict[str, SlurmNodeView] = field(default_factory=dict)
    memory: UpgradeMemory | None = None
    now: float = NOW

    def __post_init__(self) -> None:
        names = [SLURMCTLD, SLURMRESTD, LOGIN] + ([SLURMDBD] if self.accounting else [])
        self.components = {n: Component(OLD, OLD) for n in names}
        self.slurm = {n: SlurmNodeView(n, busy=False, drain=False) for n in NODES}
        first = plan_cluster(self._observed(OLD))
        for manifest in first.create_pods:
            self._create(manifest, ready=True)
        if self.control_done:
            self.components = {n: Component(NEW, NEW) for n in names}

    def _observed(self, image: str) -> Observed:
        return Observed(
            bundle=cluster(image, self.accounting, self.max_unavailable, self.window),
            fleet=FLEET,
            pods=sorted(self.pods.values(), key=lambda p: p.name),
            slurm_nodes=dict(self.slurm),
            database=DatabaseCredentials("slurm", "pw") if self.accounting else None,
            components={
                n: ComponentView(c.template, c.template == c.running)
                for n, c in self.components.items()
            },
            upgrade_memory=self.memory,
            now=self.now,
        )

    def _create(self, manifest: dict[str, object], ready: bool) -> None:
        meta = manifest["metadata"]
        assert isinstance(meta, dict)
        spec = manifest["spec"]
        assert isinstance(spec, dict)
        node = meta["labels"][wk.LABEL_NODE]
        self.pods[meta["name"]] = PodView(
            meta["name"],
            node,
            meta["labels"][wk.LABEL_NODESET],
            ready=ready,
            template_hash=meta["annotations"][wk.ANNOTATION_POD_TEMPLATE_HASH],
            image=spec["containers"][0]["image"],
        )

    def reconcile(self) -> Plan:
        plan = plan_cluster(self._observed(NEW))
        if self.window is not None:
            start = NOW + self.window[0]
            if not start <= self.now < start + self.window[1] * 60:
                # Outside its window a NodeSet is neither drained for nor upgraded.
                assert plan.delete_pods == (), "pods replaced outside the window"
                assert not any("upgrade" in r for r in plan.drain_reasons.values())
        for obj in plan.objects:
            component = OBJECTS.get((obj["kind"], obj["metadata"]["name"]))
            if component is not None:
                containers = obj["spec"]["template"]["spec"]["containers"]
                self.components[component].template = containers[0]["image"]
        for node in plan.drain:
            reason = plan.drain_reasons.get(node, f"{wk.DRAIN_REASON_PREFIX} removal")
            self.slurm[node] = SlurmNodeView(
                node, busy=self.slurm[node].busy, drain=True, reason=reason
            )
        for name in plan.delete_pods:
            pod = self.pods[name]
            assert not self.slurm[pod.node].busy, f"the pod of {pod.node} went while a job ran"
            # Terminating until `gone`: its slurmd may still be up meanwhile.
            self.pods[name] = replace(pod, deleting=True, ready=False)
        for manifest in plan.create_pods:
            self._create(manifest, ready=False)
        for node in undrain_candidates(plan.desired, self.slurm):
            if node not in plan.drain and node not in plan.rolling:
                self.slurm[node] = SlurmNodeView(node, busy=self.slurm[node].busy, drain=False)
        if plan.upgrade is not None:
            u = plan.upgrade
            self.memory = UpgradeMemory(u.from_image, u.to_image, u.phase, u.nodes_done, u.since)
        self.now += 10
        return plan

    def roll_out(self, component: str) -> None:
        if component in self.components:
            self.components[component].running = self.components[component].template

    def pod_ready(self, node: str) -> None:
        """`node` "all": every pod."""
        for name, pod in self.pods.items():
            if node in (pod.node, "all") and not pod.deleting:
                self.pods[name] = replace(pod, ready=True)

    def pod_gone(self, node: str) -> None:
        """A terminating pod of `node` (or "all") is gone."""
        for name, pod in list(self.pods.items()):
            if node in (pod.node, "all") and pod.deleting:
                del self.pods[name]

    def job(self, node: str, running: bool) -> None:
        view = self.slurm[node]
        has_pod = any(p.node == node and p.ready and not p.deleting for p in self.pods.values())
        if running and (view.drain or not has_pod):
            return  # Slurm starts nothing on a drained node or one without slurmd
        self.slurm[node] = SlurmNodeView(node, busy=running, drain=view.drain, reason=view.reason)

    def check(self) -> None:
        ctld = version(self.components[SLURMCTLD].running)
        if SLURMDBD in self.components:
            assert ctld <= version(self.components[SLURMDBD].running), "slurmctld before slurmdbd"
        for pod in self.pods.values():
            assert version(pod.image) <= ctld, f"slurmd {pod.node} newer than slurmctld"
        for block in ({"gpu-0001", "gpu-0002"}, {"gpu-0003", "gpu-0004"}, {"gpu-0005", "gpu-0006"}):
            # Terminating pods count: their slurmd may still serve the node.
            images = {p.image for p in self.pods.values() if p.node in block}
            if len(images) > 1:
                for node in block:
                    view = self.slurm[node]
                    assert view.drain and not view.busy, f"block {sorted(block)} half upgraded"


EVENTS = st.one_of(
    st.just(("reconcile", "")),
    st.just(("roll_out_all", "")),
    st.tuples(st.sampled_from(["ready", "gone"]), st.just("all")),
    st.tuples(st.just("roll_out"), st.sampled_from([SLURMDBD, SLURMCTLD, SLURMRESTD, LOGIN])),
    st.tuples(st.sampled_from(["ready", "gone", "start", "end"]), st.sampled_from(NODES)),
)


@settings(max_examples=300, deadline=None)
@given(
    accounting=st.booleans(),
    max_unavailable=st.integers(1, 4),
    control_done=st.booleans(),
    window=st.none() | st.tuples(st.integers(-600, 300), st.integers(1, 10)),
    events=st.lists(EVENTS, min_size=10, max_size=80),
)
def test_any_sequence_keeps_slurms_order_jobs_and_whole_blocks(
    accounting: bool,
    max_unavailable: int,
    control_done: bool,
    window: tuple[int, int] | None,
    events: list[tuple[str, str]],
) -> None:
    world = World(accounting, max_unavailable, control_done, window)
    world.check()
    for kind, arg in events:
        if kind == "reconcile":
            world.reconcile()
        elif kind == "roll_out":
            world.roll_out(arg)
        elif kind == "roll_out_all":
            for component in world.components:
                world.roll_out(component)
        elif kind == "ready":
            world.pod_ready(arg)
        elif kind == "gone":
            world.pod_gone(arg)
        else:
            world.job(arg, running=kind == "start")
        world.check()


def test_an_upgrade_runs_to_the_end_around_a_job() -> None:
    world = World(accounting=True, max_unavailable=1)
    world.job("gpu-0003", running=True)
    phases = []
    for step in range(60):
        plan = world.reconcile()
        assert plan.upgrade is not None
        phases.append(plan.upgrade.phase)
        world.check()
        for component in world.components:
            world.roll_out(component)
        world.pod_gone("all")
        world.pod_ready("all")
        if step == 20:
            world.job("gpu-0003", running=False)
        if plan.upgrade.phase == "Complete":
            break
    assert phases[-1] == "Complete"
    assert list(dict.fromkeys(phases)) == ["Slurmdbd", "Slurmctld", "Clients", "Slurmd", "Complete"]
    assert {p.image for p in world.pods.values()} == {NEW}
    assert not any(v.drain for v in world.slurm.values())
