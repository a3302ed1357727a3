"""Autoscaling from Slurm's power states (slurmkube.plan.autoscale), table-driven."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from slurmkube.api.documents import ClusterBundle, parse_cluster
from slurmkube.api.grammar import InvalidValue
from slurmkube.api.models import AutoscalingSpec, NodeSet
from slurmkube.plan.autoscale import (
    HOLD_LIMIT,
    HOLD_UNAVAILABLE,
    HOLD_UNDEPLOYED,
    RESUMING,
    SUSPENDED,
    SUSPENDING,
    UP,
    plan_scaling,
    removable,
)
from slurmkube.plan.cluster import plan_cluster
from slurmkube.plan.model import Observed, Plan, PodView, SlurmNodeView
from slurmkube.render.config import plan_config
from slurmkube.render.files import render_files
from slurmkube.topology.fleet import fleet_node
from slurmkube_local.builders import bundle, cluster_docs, nvl_fleet

NODES = tuple(f"n{i}" for i in range(8))
BLOCKS = {n: ("b0" if i < 4 else "b1") for i, n in enumerate(NODES)}


@dataclass(frozen=True)
class View:
    power: str = SUSPENDED
    down: bool = False
    drain: bool = False
    reason: str = ""
    busy: bool = False


def spec(**fields: Any) -> AutoscalingSpec:
    return AutoscalingSpec.model_validate({"enabled": True, **fields})


def fleet(**nodes: View) -> dict[str, View]:
    """Every node powered down unless given."""
    return {n: nodes.get(n, View()) for n in NODES}


def plan(
    views: Mapping[str, View] | None,
    unavailable: Mapping[str, str] | None = None,
    with_pod: tuple[str, ...] = (),
    **fields: Any,
) -> Any:
    return plan_scaling(
        spec(**fields), NODES, views, unavailable or {}, blocks=BLOCKS, with_pod=with_pod
    )


def test_nodes_slurm_powers_up_get_pods_and_the_rest_none() -> None:
    views = fleet(n4=View(RESUMING), n5=View(UP), n6=View(SUSPENDING), n7=View(SUSPENDED))
    assert plan(views).pods == ("n4", "n5")


def test_at_zero_nothing_is_asked_of_slurm() -> None:
    scaling = plan(fleet())
    assert (scaling.pods, scaling.power_up, scaling.power_down, dict(scaling.hold)) == (
        (),
        (),
        (),
        {},
    )
    assert scaling.counts["suspended"] == 8


def test_without_an_answer_from_slurm_existing_pods_stay_and_nothing_changes() -> None:
    scaling = plan(None, with_pod=("n1", "n2"))
    assert scaling.pods == ("n1", "n2")
    assert not (scaling.hold or scaling.release or scaling.power_down or scaling.power_up)


def test_a_node_lent_to_kueue_is_held_drained_and_never_gets_a_pod() -> None:
    lent = {"n1": "lent to Kueue workload w"}
    scaling = plan(fleet(n1=View(RESUMING)), lent)
    assert "n1" not in scaling.pods
    scaling = plan(fleet(), lent)
    assert scaling.hold == {"n1": f"{HOLD_UNAVAILABLE} (lent to Kueue workload w)"}


def test_a_lent_node_still_up_keeps_its_pod_and_is_powered_down_through_slurm() -> None:
    lent = {"n1": "lent to Kueue workload w"}
    scaling = plan(fleet(n1=View(UP)), lent, with_pod=("n1",))
    assert scaling.pods == ("n1",)
    assert scaling.power_down == ("n1",)


@pytest.mark.parametrize(
    ("fields", "views", "offered"),
    [
        # maxNodes 4 with whole blocks: one block offered, the other held.
        ({"maxNodes": 4}, fleet(), set(NODES[:4])),
        # maxNodes 5: the second block does not fit whole, so it is not offered at all.
        ({"maxNodes": 5}, fleet(), set(NODES[:4])),
        # Without whole blocks the budget is filled node by node.
        ({"maxNodes": 5, "keepWholeBlocks": False}, fleet(), set(NODES[:5])),
        # Nodes up count against the limit; the rest of their block is offered first.
        ({"maxNodes": 4}, fleet(n5=View(UP)), {"n4", "n6", "n7"}),
        # Resumes in flight count against maxConcurrentResumes; the rest of their
        # block is what is left to offer.
        (
            {"maxConcurrentResumes": 4},
            fleet(n0=View(RESUMING), n1=View(RESUMING)),
            {"n2", "n3"},
        ),
        ({"maxConcurrentResumes": 2}, fleet(n0=View(RESUMING), n1=View(RESUMING)), set()),
        ({"maxConcurrentResumes": 4, "keepWholeBlocks": False}, fleet(), set(NODES[:4])),
        # No limits: every powered-down node is Slurm's to pick.
        ({}, fleet(), set(NODES)),
    ],
)
def test_limits_hold_the_powered_down_nodes_slurm_may_not_pick(
    fields: dict[str, Any], views: dict[str, View], offered: set[str]
) -> None:
    scaling = plan(views, **fields)
    suspended = {n for n, v in views.items() if v.power == SUSPENDED}
    assert set(scaling.hold) == suspended - offered
    assert all(r.startswith(HOLD_LIMIT) for r in scaling.hold.values())


def test_a_hold_no_longer_needed_is_released() -> None:
    held = View(drain=True, reason=f"{HOLD_LIMIT} (maxNodes 4)")
    # A NodeSet that switched from replicas to autoscaling: its spare nodes' holds go too.
    spare = View(drain=True, reason=HOLD_UNDEPLOYED)
    scaling = plan(fleet(n5=spare, n6=held, n7=held))
    assert scaling.release == ("n5", "n6", "n7")
    assert not scaling.hold


def test_an_admins_drain_is_neither_held_again_nor_released() -> None:
    admin = View(drain=True, reason="bad GPU, RMA")
    scaling = plan(fleet(n0=admin), maxNodes=0)
    assert "n0" not in scaling.hold
    assert "n0" not in scaling.release
    assert plan(fleet(n0=admin)).release == ()


def test_a_health_drain_is_neither_held_over_nor_offered_nor_released() -> None:
    sick = View(drain=True, reason="slurmkube:health: fatal condition SysLogsXIDError True")
    for scaling in (plan(fleet(n0=sick), maxNodes=0), plan(fleet(n0=sick))):
        assert "n0" not in scaling.hold
        assert "n0" not in scaling.release
        assert "n0" not in scaling.power_up


def test_a_node_already_held_is_not_drained_again() -> None:
    held = View(drain=True, reason=f"{HOLD_LIMIT} (maxNodes 4)")
    scaling = plan(fleet(n4=held, n5=held, n6=held, n7=held), maxNodes=4)
    assert not scaling.hold
    assert scaling.counts["held"] == 4


def test_nodes_above_max_nodes_are_powered_down_idle_ones_first_never_killed() -> None:
    views = fleet(
        n0=View(UP, busy=True), n1=View(UP, busy=True), n2=View(UP), n3=View(UP, busy=True)
    )
    scaling = plan(views, maxNodes=2)
    assert scaling.power_down == ("n2", "n3")
    # Still powered up: the pods stay until Slurm has drained and suspended the nodes.
    assert scaling.pods == ("n0", "n1", "n2", "n3")


def test_min_nodes_are_powered_up_in_whole_blocks_order() -> None:
    assert plan(fleet(), minNodes=2).power_up == ("n0", "n1")
    assert plan(fleet(n0=View(UP), n1=View(UP)), minNodes=2).power_up == ()


def test_a_failed_resume_is_reported_and_left_down_for_an_admin() -> None:
    failed = View(SUSPENDED, down=True, reason="ResumeTimeout reached")
    scaling = plan(fleet(n3=failed), with_pod=("n3",), maxNodes=4)
    assert scaling.failed == ("n3",)
    assert "n3" not in scaling.pods
    assert "n3" not in scaling.hold and "n3" not in scaling.release
    assert scaling.counts["failed"] == 1


@pytest.mark.parametrize(
    ("view", "expected"),
    [
        (None, True),
        (View(SUSPENDING), True),
        (View(SUSPENDED), True),
        (View(UP), False),
        (View(RESUMING), False),
        (View(SUSPENDING, busy=True), False),
    ],
)
def test_a_pod_goes_only_once_slurm_powered_its_idle_node_down(
    view: View | None, expected: bool
) -> None:
    assert removable(view) is expected


def test_replicas_and_autoscaling_are_exclusive() -> None:
    base = {
        "apiVersion": "slurmkube.io/v1alpha1",
        "kind": "NodeSet",
        "metadata": {"name": "gpu"},
        "spec": {"clusterRef": "c", "nodeSelector": {}, "autoscaling": {"enabled": True}},
    }
    NodeSet.model_validate(base)
    with pytest.raises(ValueError, match="exclude each other"):
        NodeSet.model_validate({**base, "spec": {**base["spec"], "replicas": 2}})
    with pytest.raises(ValueError, match="minNodes may not exceed"):
        spec(minNodes=3, maxNodes=2)


# --- the cluster plan and slurm.conf ----------------------------------------------------


def autoscaled_bundle(**autoscaling: Any) -> ClusterBundle:
    docs = cluster_docs(block_size=2)
    docs[1]["spec"]["autoscaling"] = {"enabled": True, **autoscaling}
    return parse_cluster(docs)


def cluster_plan(
    slurm: Mapping[str, SlurmNodeView] | None, pods: tuple[str, ...] = (), **autoscaling: Any
) -> Plan:
    return plan_cluster(
        Observed(
            bundle=autoscaled_bundle(**autoscaling),
            fleet=[fleet_node(n) for n in nvl_fleet(2, 2)],
            pods=[PodView(name=f"gpu-{n}", node=n, node_set="gpu") for n in pods],
            slurm_nodes=slurm,
        )
    )


def slurm_view(name: str, power: str, **kw: Any) -> SlurmNodeView:
    return SlurmNodeView(name=name, busy=kw.pop("busy", False), drain=False, power=power, **kw)


def test_cluster_plan_creates_pods_for_resuming_nodes_with_a_boot_time_of_their_own() -> None:
    slurm = {
        "gpu-0001": slurm_view("gpu-0001", RESUMING, responding=False),
        **{n: slurm_view(n, SUSPENDED, state="cloud") for n in ("gpu-0002", "gpu-0003")},
        "gpu-0004": slurm_view("gpu-0004", SUSPENDED, state="cloud"),
    }
    plan = cluster_plan(slurm)
    (pod,) = plan.create_pods
    assert pod["metadata"]["name"] == "gpu-gpu-0001"
    assert "-b" in pod["spec"]["containers"][0]["args"]
    # Ready does not wait for a resume in flight.
    assert plan.desired == {"gpu": ()}


def test_cluster_plan_removes_a_pod_only_once_slurm_powers_the_node_down() -> None:
    pods = ("gpu-0001", "gpu-0002", "gpu-0003")
    slurm = {
        "gpu-0001": slurm_view("gpu-0001", SUSPENDING),
        "gpu-0002": slurm_view("gpu-0002", UP, busy=True),
        "gpu-0003": slurm_view("gpu-0003", UP),
        "gpu-0004": slurm_view("gpu-0004", SUSPENDED),
    }
    plan = cluster_plan(slurm, pods)
    assert plan.delete_pods == ("gpu-gpu-0001",)
    assert plan.drain == ()  # Slurm drains and suspends; the operator never drains here
    # Slurm cannot be asked: nothing is deleted.
    assert cluster_plan(None, pods).delete_pods == ()


def test_power_saving_is_rendered_only_for_autoscaled_node_sets() -> None:
    fleet = nvl_fleet(2, 2)
    plain = render_files(plan_config(bundle(block_size=2), fleet)).files["slurm.conf"]
    # Without autoscaling, power saving stays off (no SuspendTime); the programs are
    # set anyway, so CLOUD nodes stay powered down across a reconfigure.
    assert "\nSuspendTime=" not in plain and "\nResumeProgram=/bin/true\n" in plain
    conf = render_files(
        plan_config(
            autoscaled_bundle(suspendTimeSeconds=20, resumeTimeoutSeconds=45, minNodes=2),
            fleet,
        )
    ).files["slurm.conf"]
    assert "ResumeProgram=/bin/true\nSuspendProgram=/bin/true\n" in conf
    assert "\nSuspendTime=20\n" in conf
    assert "ResumeTimeout=45\n" in conf
    assert "SuspendExcNodes=gpu-[0001-0004]:2\n" in conf


def test_min_nodes_needs_node_names_slurm_can_count_as_one_set() -> None:

    fleet = [*nvl_fleet(1, 2), *nvl_fleet(1, 2, prefix="other")]
    for node in fleet:
        node.metadata.labels["slurmkube.io/pool"] = "gpu"
    with pytest.raises(InvalidValue, match=r"spec.autoscaling.minNodes"):
        plan_config(autoscaled_bundle(minNodes=1), fleet)


def test_with_power_saving_on_a_replicas_node_sets_spare_nodes_are_held_and_never_suspended() -> (
    None
):
    docs = cluster_docs(block_size=2, pools=("gpu", "cpu"))
    docs[1]["spec"]["autoscaling"] = {"enabled": True}
    docs[2]["spec"]["replicas"] = 1
    fleet = [*nvl_fleet(2, 2), *nvl_fleet(1, 2, prefix="cpu")]
    for node in fleet:
        node.metadata.labels["slurmkube.io/pool"] = node.metadata.name.split("-")[0]
    slurm = {n.metadata.name: slurm_view(n.metadata.name, SUSPENDED) for n in fleet}
    plan = plan_cluster(
        Observed(
            bundle=parse_cluster(docs),
            fleet=[fleet_node(n) for n in fleet],
            pods=[],
            slurm_nodes=slurm,
        )
    )
    assert dict(plan.hold) == {"cpu-0002": HOLD_UNDEPLOYED}
    assert [p["metadata"]["name"] for p in plan.create_pods] == ["cpu-cpu-0001"]
    assert plan.rendered is not None
    assert "SuspendExcNodes=cpu-[0001-0002]\n" in plan.rendered.files["slurm.conf"]
