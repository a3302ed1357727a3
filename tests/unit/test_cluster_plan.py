"""The reconcile plan: what gets created, drained and deleted, and when nothing may be."""

from __future__ import annotations

from typing import cast

import pytest

from slurmkube.controllers.apply import drained_idle
from slurmkube.plan.cluster import (
    MOUNTED_KINDS,
    configure,
    mounted_first,
    plan_cluster,
    undrain_candidates,
)
from slurmkube.plan.model import Condition, Observed, PodView, SlurmNodeView
from slurmkube.plan.topology_status import topology_applied
from slurmkube.slurm.models import Node as SlurmNode
from slurmkube.slurm.protocol import SlurmClient
from slurmkube.topology.fleet import fleet_node
from slurmkube_local.builders import bundle, nvl_fleet


def observed(
    replicas: int | None = None,
    pods: tuple[str, ...] = (),
    slurm: dict[str, SlurmNodeView] | None = None,
    unavailable: dict[str, str] | None = None,
    extra: dict[str, object] | None = None,
) -> Observed:
    b = bundle(block_size=2, extra=extra)
    if replicas is not None:
        ns = b.node_sets[0]
        spec = ns.spec.model_copy(update={"replicas": replicas})
        b = type(b)(
            b.cluster.model_copy(
                update={"metadata": b.cluster.metadata.model_copy(update={"namespace": "slurm"})}
            ),
            (ns.model_copy(update={"spec": spec}),),
        )
    fleet = [fleet_node(n) for n in nvl_fleet(2, 2)]
    return Observed(
        bundle=b,
        fleet=fleet,
        pods=[PodView(name=f"gpu-{n}", node=n, node_set="gpu") for n in pods],
        slurm_nodes=slurm,
        unavailable=unavailable or {},
    )


def idle(name: str, **kw: object) -> SlurmNodeView:
    return SlurmNodeView(name=name, busy=False, drain=False, **kw)  # type: ignore[arg-type]


def test_one_slurmd_pod_per_selected_node_with_all_its_gpus() -> None:
    plan = plan_cluster(observed())
    pods = {p["metadata"]["name"]: p for p in plan.create_pods}
    assert sorted(pods) == ["gpu-gpu-0001", "gpu-gpu-0002", "gpu-gpu-0003", "gpu-gpu-0004"]
    container = pods["gpu-gpu-0001"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "4"}
    assert container["args"][:4] == ["slurmd", "-D", "-N", "gpu-0001"]
    assert plan.config_map is not None and plan.config_map["kind"] == "ConfigMap"
    kinds = [o["kind"] for o in plan.objects]
    assert kinds == ["Service", "StatefulSet", "Deployment", "Service", "ConfigMap", "Deployment"]


def test_the_config_needs_nothing_from_slurm_so_it_is_written_before_slurm_is_asked() -> None:
    """The reconcile writes `configure`'s ConfigMap before it reads Slurm's nodes:
    what Slurm says may change the pods, never the files."""
    busy = {n: SlurmNodeView(name=n, busy=True, drain=True) for n in ("gpu-0001", "gpu-0002")}
    before, after = configure(observed()), configure(observed(slurm=busy))
    assert not isinstance(before, Condition) and not isinstance(after, Condition)
    assert before.config_map == after.config_map
    assert plan_cluster(observed(slurm=busy), before).config_map == before.config_map


def test_an_invalid_spec_configures_nothing_and_says_so() -> None:
    # Accounting on, and no database login read from its Secret.
    database = {"host": "db.example", "secretName": "db-login"}
    broken = observed(extra={"accounting": {"enabled": True, "database": database}})
    configured = configure(broken)
    assert isinstance(configured, Condition) and configured.reason == "InvalidSpec"
    assert "spec.accounting.database.secretName" in configured.message
    plan = plan_cluster(broken, configured)
    assert plan.rendered is None and plan.config_map is None and plan.conditions == (configured,)


@pytest.mark.parametrize("replicas", [0, 2])
def test_login_pods_run_sackd_configless_with_only_the_slurm_key(replicas: int) -> None:
    plan = plan_cluster(observed(extra={"login": {"replicas": replicas}}))
    login = next(o for o in plan.objects if o["metadata"]["name"] == "test-login")
    assert login["spec"]["replicas"] == replicas
    pod = login["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["login", "sackd"]
    container = pod["containers"][1]
    assert container["args"][:2] == ["sackd", "-D"]
    assert container["args"][3].endswith(":6817")
    # Only slurm.key (and its key set while a rotation writes one): login users never
    # see the JWT key or a slurm.conf.
    sources = pod["volumes"][0]["projected"]["sources"]
    assert [s["secret"]["items"][0]["key"] for s in sources] == ["slurm.key", "slurm.jwks"]
    assert all(e["name"] != "SLURM_CONF" for e in container["env"])


def test_existing_pods_are_not_created_again() -> None:
    plan = plan_cluster(observed(pods=("gpu-0001", "gpu-0002", "gpu-0003", "gpu-0004")))
    assert plan.create_pods == ()
    assert plan.delete_pods == () and plan.drain == ()


NODES = ("gpu-0001", "gpu-0002", "gpu-0003", "gpu-0004")


@pytest.mark.parametrize(
    ("state", "drain", "delete"),
    [
        # A job runs on the node leaving the set: drain first, keep the pod.
        (SlurmNodeView("gpu-0004", busy=True, drain=False), ("gpu-0004",), ()),
        # Draining, job still running: wait.
        (SlurmNodeView("gpu-0004", busy=True, drain=True, reason="slurmkube: x"), (), ()),
        # Drained and idle: now the pod goes.
        (
            SlurmNodeView("gpu-0004", busy=False, drain=True, reason="slurmkube: x"),
            (),
            ("gpu-gpu-0004",),
        ),
        # Idle but not drained: drain first (a job could start meanwhile otherwise).
        (SlurmNodeView("gpu-0004", busy=False, drain=False), ("gpu-0004",), ()),
        # Slurm does not reach the node: nothing can run there.
        (
            SlurmNodeView("gpu-0004", busy=False, drain=False, responding=False),
            (),
            ("gpu-gpu-0004",),
        ),
        # Not reached, but Slurm keeps its job until SlurmdTimeout: drain, keep the pod.
        (
            SlurmNodeView("gpu-0004", busy=True, drain=False, responding=False),
            ("gpu-0004",),
            (),
        ),
        (
            SlurmNodeView("gpu-0004", busy=True, drain=True, reason="x", responding=False),
            (),
            (),
        ),
    ],
)
def test_scale_in_drains_before_delete(
    state: SlurmNodeView, drain: tuple[str, ...], delete: tuple[str, ...]
) -> None:
    slurm = {n: idle(n) for n in NODES[:3]} | {"gpu-0004": state}
    plan = plan_cluster(observed(replicas=3, pods=NODES, slurm=slurm))
    assert plan.drain == drain
    assert plan.delete_pods == delete


WHEN_IDLE = {
    "busy, drained now": (SlurmNodeView("gpu-0004", busy=True, drain=False), {"gpu-0004"}),
    "busy, drained before": (
        SlurmNodeView("gpu-0004", busy=True, drain=True, reason="slurmkube: slurmd pod removal"),
        {"gpu-0004"},
    ),
    "idle: its pod goes now": (
        SlurmNodeView("gpu-0004", busy=False, drain=True, reason="slurmkube: slurmd pod removal"),
        set(),
    ),
    # Its pod waits for Slurm to give up on the node, not for a job's end.
    "busy, not reached": (
        SlurmNodeView("gpu-0004", busy=True, drain=False, responding=False),
        set(),
    ),
}


@pytest.mark.parametrize(("state", "waiting"), WHEN_IDLE.values(), ids=WHEN_IDLE.keys())
def test_a_scale_in_names_the_busy_nodes_whose_pod_goes_when_their_job_ends(
    state: SlurmNodeView, waiting: set[str]
) -> None:
    slurm = {n: idle(n) for n in NODES[:3]} | {"gpu-0004": state}
    plan = plan_cluster(observed(replicas=3, pods=NODES, slurm=slurm))
    assert plan.pods_go_when_idle == waiting


def test_the_plan_awaits_the_slurmd_of_each_wanted_node_slurm_does_not_hear() -> None:
    slurm = {n: idle(n) for n in NODES[:2]} | {
        "gpu-0003": SlurmNodeView("gpu-0003", busy=False, drain=False, responding=False)
    }
    plan = plan_cluster(observed(replicas=4, pods=NODES, slurm=slurm))
    # gpu-0003 not responding yet, gpu-0004 not in Slurm's list yet.
    assert plan.awaited == {"gpu-0003", "gpu-0004"}
    assert plan_cluster(observed(replicas=4, pods=NODES, slurm=None)).awaited == frozenset()


def test_a_node_drained_now_names_its_pod_to_go_once_slurm_confirms_the_drain() -> None:
    slurm = {n: idle(n) for n in NODES[:3]} | {
        "gpu-0004": SlurmNodeView("gpu-0004", busy=False, drain=False)
    }
    plan = plan_cluster(observed(replicas=3, pods=NODES, slurm=slurm))
    # Not deleted on the observation from before the drain: apply asks Slurm again.
    assert plan.drain == ("gpu-0004",) and plan.delete_pods == ()
    assert plan.delete_once_drained == {"gpu-0004": "gpu-gpu-0004"}


class _AskedAfterDrain:
    """Slurm as apply sees it right after draining: only list_nodes is asked."""

    def __init__(self, *nodes: SlurmNode) -> None:
        self.nodes = nodes

    def list_nodes(self) -> tuple[SlurmNode, ...]:
        return self.nodes


@pytest.mark.parametrize(
    ("states", "deleted"),
    [
        ({"IDLE", "DRAIN"}, ["pod-a"]),  # drained, no job: goes now
        ({"MIXED", "DRAIN"}, []),  # a job started before the drain: waits
        ({"COMPLETING", "DRAIN"}, []),  # a job still cleaning up: waits
        ({"IDLE"}, []),  # the drain did not take: waits
    ],
)
def test_a_pod_goes_in_the_same_pass_only_if_slurm_shows_its_node_drained_and_idle(
    states: set[str], deleted: list[str]
) -> None:
    slurm = _AskedAfterDrain(SlurmNode("a", frozenset(states), base_state=min(states)))
    assert drained_idle(cast(SlurmClient, slurm), {"a": "pod-a", "gone": "pod-gone"}) == deleted


def test_no_pod_is_deleted_when_slurm_cannot_be_asked() -> None:
    plan = plan_cluster(observed(replicas=1, pods=NODES, slurm=None))
    assert plan.delete_pods == () and plan.drain == ()


def test_nodes_lent_to_kueue_get_no_slurmd() -> None:
    plan = plan_cluster(observed(unavailable={"gpu-0002": "lease"}))
    names = [p["metadata"]["name"] for p in plan.create_pods]
    assert "gpu-gpu-0002" not in names and len(names) == 3


def test_invalid_spec_plans_nothing_and_says_why() -> None:
    obs = observed()
    bad_partitions = [{"name": "gpu", "nodeSets": ["missing"]}]
    obs = observed(extra={"partitions": bad_partitions})
    plan = plan_cluster(obs)
    assert plan.objects == () and plan.create_pods == ()
    (condition,) = plan.conditions
    assert condition.type == "ConfigApplied" and not condition.status
    assert "spec.partitions[0].nodeSets[0]" in condition.message


@pytest.mark.parametrize(
    ("config_applied", "status", "reason"),
    [
        (Condition("ConfigApplied", True, "Applied", "config abc in force"), True, "Applied"),
        (
            Condition("ConfigApplied", False, "Propagating", "reconfigure in 9s"),
            False,
            "Propagating",
        ),
        (
            Condition("ConfigApplied", False, "ReconfigureFailed", "boom"),
            False,
            "ReconfigureFailed",
        ),
    ],
    ids=["applied", "propagating", "failed"],
)
def test_topology_applied_names_the_file_hash_and_counts_and_follows_the_reconfigure(
    config_applied: Condition, status: bool, reason: str
) -> None:
    plan = plan_cluster(observed())
    # nvl_fleet(2, 2): two NVLink domains of two nodes, block size 2.
    assert plan.topology_summary.startswith("topology.conf ")
    assert plan.topology_summary.endswith("(topology/block, 2 blocks)")
    condition = topology_applied(config_applied, plan.topology_summary)
    assert (condition.type, condition.status, condition.reason) == (
        "TopologyApplied",
        status,
        reason,
    )
    assert condition.message.startswith(plan.topology_summary)


def test_a_wanted_node_is_undrained_only_from_a_non_health_drain_of_ours() -> None:
    desired = {"gpu": ("a", "b", "c", "d")}
    slurm = {
        "a": SlurmNodeView("a", busy=False, drain=True, reason="slurmkube: slurmd pod removal"),
        "b": SlurmNodeView("b", busy=False, drain=True, reason="slurmkube:health: fatal x"),
        "c": SlurmNodeView("c", busy=False, drain=True, reason="RMA bad GPU"),
        "d": idle("d"),
    }
    assert undrain_candidates(desired, slurm) == ["a"]


@pytest.mark.parametrize(
    ("extra", "version", "topology_file"),
    [
        (None, "24.11", "topology.conf"),
        ({"image": "slurmkube/slurm:26.05.5"}, "26.05", "topology.yaml"),
        ({"slurm": {"version": "26.05"}}, "26.05", "topology.yaml"),
    ],
)
def test_the_plan_names_the_release_and_its_configmap_holds_the_file_it_reads(
    extra: dict[str, object] | None, version: str, topology_file: str
) -> None:
    plan = plan_cluster(observed(extra=extra))
    assert plan.slurm_version == version
    assert plan.config_map is not None
    data = plan.config_map["data"]
    assert {k for k in data if k.startswith("topology.")} == {topology_file}
    assert plan.topology_summary.startswith(f"{topology_file} ")


@pytest.mark.parametrize(("version", "serves"), [("24.11", False), ("26.05", True)])
def test_the_slurmctld_metrics_service_exists_only_where_the_release_serves_openmetrics(
    version: str, serves: bool
) -> None:
    plan = plan_cluster(observed(extra={"slurm": {"version": version}}))
    services = {o["metadata"]["name"]: o for o in plan.objects if o["kind"] == "Service"}
    assert ("test-slurmctld-metrics" in services) is serves
    assert (("v1", "Service", "test-slurmctld-metrics") in plan.prune) is not serves
    assert plan.config_map is not None
    conf = plan.config_map["data"]["slurm.conf"].splitlines()
    assert ("MetricsType=metrics/openmetrics" in conf) is serves
    if serves:
        service = services["test-slurmctld-metrics"]
        assert service["metadata"]["labels"]["app.kubernetes.io/name"] == "slurmctld-metrics"
        assert service["spec"]["ports"] == [
            {"name": "metrics", "port": 6817, "targetPort": "slurmctld"}
        ]
        assert service["spec"]["selector"] == services["test-slurmctld"]["spec"]["selector"]


def test_an_image_of_an_unsupported_release_is_an_invalid_spec_in_status() -> None:
    plan = plan_cluster(observed(extra={"image": "registry.example/slurm:25.11.1"}))
    assert plan.rendered is None
    (condition,) = plan.conditions
    assert (condition.type, condition.status, condition.reason) == (
        "ConfigApplied",
        False,
        "InvalidSpec",
    )
    assert condition.message.startswith("SlurmCluster test spec.image: ")
    assert "spec.slurm.version" in condition.message


@pytest.mark.parametrize(
    ("pods", "gpu_0004", "down_lost"),
    [
        # Its pod lost under a job: DOWN before the pod is made again.
        (NODES[:3], SlurmNodeView("gpu-0004", busy=True, drain=False), ("gpu-0004",)),
        # Lost while idle: just made again.
        (NODES[:3], idle("gpu-0004"), ()),
        # Its pod is there: nothing to tell Slurm.
        (NODES, SlurmNodeView("gpu-0004", busy=True, drain=False), ()),
        # Slurm silent: nothing known, nothing set.
        (NODES[:3], None, ()),
    ],
)
def test_a_busy_node_whose_pod_is_made_again_is_set_down_first(
    pods: tuple[str, ...], gpu_0004: SlurmNodeView | None, down_lost: tuple[str, ...]
) -> None:
    slurm = None if gpu_0004 is None else {n: idle(n) for n in NODES[:3]} | {"gpu-0004": gpu_0004}
    plan = plan_cluster(observed(pods=pods, slurm=slurm))
    assert plan.down_lost == down_lost
    created = {p["metadata"]["labels"]["slurmkube.io/node"] for p in plan.create_pods}
    assert set(down_lost) <= created


LDAP = {
    "uri": "ldaps://ldap.example.org:636",
    "baseDN": "dc=example,dc=org",
    "caConfigMap": "ldap-ca",
}


@pytest.mark.parametrize(
    "extra",
    [
        {"restApi": {"tls": {"enabled": True}}},
        {"login": {"replicas": 1, "ldap": LDAP}},
    ],
)
def test_what_a_pod_mounts_is_applied_before_the_workload_that_mounts_it(
    extra: dict[str, object],
) -> None:
    objects = plan_cluster(observed(extra=extra)).objects
    ordered = mounted_first(objects)
    assert sorted(map(id, ordered)) == sorted(map(id, objects))
    mounted = [o["kind"] in MOUNTED_KINDS for o in ordered]
    assert any(mounted), [o["kind"] for o in objects]
    assert mounted == sorted(mounted, reverse=True)


def test_mounted_first_keeps_each_groups_order() -> None:
    objs = [
        {"kind": k, "n": i} for i, k in enumerate(["Deployment", "ConfigMap", "Service", "Secret"])
    ]
    assert [o["n"] for o in mounted_first(objs)] == [1, 3, 0, 2]
