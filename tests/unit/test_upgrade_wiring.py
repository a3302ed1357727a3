"""The upgrade planner wired into the cluster plan and the controller's reads:
each object is built with the image its step allows, and nothing changes when
spec.image does not."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any, cast

from slurmkube.api import well_known as wk
from slurmkube.api.documents import ClusterBundle
from slurmkube.controllers.observe import pod_view
from slurmkube.controllers.upgrade_apply import apply_maintenance
from slurmkube.controllers.upgrade_observe import component_view, upgrade_memory
from slurmkube.plan.cluster import Configured, configure, plan_cluster
from slurmkube.plan.model import Observed, Plan, PodView, SlurmNodeView
from slurmkube.plan.status import upgrade_event, upgrade_status
from slurmkube.plan.upgrade_input import config_image
from slurmkube.plan.upgrade_model import (
    ComponentView,
    MaintenanceReservation,
    UpgradeMemory,
    UpgradeStatus,
)
from slurmkube.render.slurmdbd import DatabaseCredentials
from slurmkube.slurm.errors import SlurmNotFound
from slurmkube.slurm.models import ReservationFlag, ReservationRequest, ReservationUpdate
from slurmkube.topology.fleet import fleet_node
from slurmkube_local.builders import bundle, nvl_fleet
from tests.unit.upgrade_builders import NEW, NOW, OLD, control

FLEET = [fleet_node(n) for n in nvl_fleet(2, 2)]
DATABASE = {"host": "mariadb", "secretName": "db"}


def cluster(image: str = NEW, accounting: bool = False) -> ClusterBundle:
    extra: dict[str, Any] = {"image": image}
    if accounting:
        extra["accounting"] = {"enabled": True, "database": DATABASE}
    return bundle(block_size=2, extra=extra)


def plan(components: dict[str, ComponentView], accounting: bool = False) -> Plan:
    return plan_cluster(
        Observed(
            bundle=cluster(accounting=accounting),
            fleet=FLEET,
            pods=(),
            slurm_nodes=None,
            database=DatabaseCredentials("slurm", "pw") if accounting else None,
            components=components,
            now=NOW,
        )
    )


def images_of(p: Plan, kind: str, suffix: str) -> set[str]:
    (obj,) = (o for o in p.objects if o["kind"] == kind and o["metadata"]["name"].endswith(suffix))
    pod = obj["spec"]["template"]["spec"]
    return {c["image"] for c in (*pod.get("initContainers", ()), *pod["containers"])}


def test_the_controller_and_its_reloader_go_first_without_accounting() -> None:
    p = plan(control(accounting=False))
    assert images_of(p, "StatefulSet", "slurmctld") == {NEW}
    assert images_of(p, "Deployment", "slurmrestd") == {OLD}
    assert images_of(p, "Deployment", "login") == {OLD}
    assert {c["spec"]["containers"][0]["image"] for c in p.create_pods} == {OLD}
    assert p.upgrade is not None and p.upgrade.phase == "Slurmctld"
    assert any(c.type == "SlurmUpgrade" for c in p.conditions)


def test_slurmdbd_and_its_init_container_go_before_the_controller() -> None:
    p = plan(control(), accounting=True)
    assert images_of(p, "Deployment", "slurmdbd") == {NEW}
    assert images_of(p, "StatefulSet", "slurmctld") == {OLD}


def test_without_an_image_change_the_plan_is_what_it_was() -> None:
    seen = plan(control(NEW), accounting=True)
    unseen = plan({}, accounting=True)
    assert seen.objects == unseen.objects and seen.create_pods == unseen.create_pods
    assert seen.upgrade is None and unseen.upgrade is None


def test_rollout_status_of_deployments_and_statefulsets() -> None:
    template = {"template": {"spec": {"containers": [{"name": "slurmctld", "image": NEW}]}}}
    done = {
        "kind": "StatefulSet",
        "metadata": {"generation": 3},
        "spec": {"replicas": 1, **template},
        "status": {
            "observedGeneration": 3,
            "replicas": 1,
            "updatedReplicas": 1,
            "readyReplicas": 1,
            "currentRevision": "b",
            "updateRevision": "b",
        },
    }
    assert component_view(done, "slurmctld") == ComponentView(NEW, True)
    for status in (
        {"observedGeneration": 2},
        {"currentRevision": "a"},
        {"readyReplicas": 0},
        {"replicas": 2},
    ):
        pending = done | {"status": done["status"] | status}
        assert component_view(pending, "slurmctld") == ComponentView(NEW, False)
    login = {"kind": "Deployment", "metadata": {"generation": 1}, "spec": {"replicas": 0}}
    login["status"] = {"observedGeneration": 1}
    assert component_view(login, "sackd") == ComponentView("", True)


def test_the_status_written_is_the_memory_read_back() -> None:
    status = UpgradeStatus(OLD, NEW, "Slurmd", 2, 4, "2/4", NOW)
    written = upgrade_status(status)
    assert written is not None and written["since"] == "2026-12-04T12:00:00Z"
    memory = upgrade_memory({"status": {"upgrade": written}})
    assert memory is not None
    assert (memory.from_image, memory.to_image, memory.phase, memory.nodes_done) == (
        OLD,
        NEW,
        "Slurmd",
        2,
    )
    assert memory.since == NOW
    assert upgrade_memory({"status": {}}) is None
    assert upgrade_status(None) is None


def test_a_slurmd_pods_image_is_read_from_its_slurmd_container() -> None:
    pod = {
        "metadata": {"name": "gpu-n1", "labels": {}},
        "spec": {"containers": [{"name": "slurmd", "image": OLD}]},
    }
    assert pod_view(pod).image == OLD


class FakeSlurm:
    """Records reservation writes as scontrol would receive them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def create_reservation(self, request: ReservationRequest) -> None:
        self.calls.append(("create", request))

    def update_reservation(self, update: ReservationUpdate) -> None:
        self.calls.append(("update", update))

    def delete_reservation(self, name: str) -> None:
        self.calls.append(("delete", name))
        raise SlurmNotFound("gone", operation="delete")


class FakeKube:
    def __init__(self) -> None:
        self.events: list[str] = []

    def event(self, obj: object, reason: str, message: str, warning: bool = False) -> None:
        self.events.append(reason)


def test_maintenance_reservations_are_made_updated_and_released() -> None:
    made = MaintenanceReservation("slurmkube-upgrade-gpu", ("n1", "n2"), NOW + 600, 60)
    moved = MaintenanceReservation("slurmkube-upgrade-cpu", ("n3",), None, 30, exists=True)
    p = Plan(rendered=None, maintenance=(made, moved), maintenance_release=("slurmkube-upgrade-x",))
    slurm, kube = FakeSlurm(), FakeKube()
    apply_maintenance(cast(Any, kube), {}, cast(Any, slurm), p, "slurm")
    (_, create), (_, update), (_, delete) = slurm.calls
    assert isinstance(create, ReservationRequest) and isinstance(update, ReservationUpdate)
    assert create.flags == {ReservationFlag.MAINT, ReservationFlag.IGNORE_JOBS}
    assert create.users == ("slurm",) and create.nodes == ("n1", "n2")
    assert create.start == dt.datetime(2026, 12, 4, 12, 10, tzinfo=dt.UTC)
    assert create.duration == dt.timedelta(minutes=60)
    assert update.start is None and update.duration == dt.timedelta(minutes=30)
    assert delete == "slurmkube-upgrade-x"
    assert kube.events == ["MaintenanceReserved", "MaintenanceReserved"]


def test_objects_the_plan_no_longer_builds_do_not_hold_the_upgrade() -> None:
    """A slurmrestd scaled to nothing, or slurmdbd left from accounting, is never applied."""
    b = bundle(block_size=2, extra={"image": NEW, "restApi": {"replicas": 0}})
    p = plan_cluster(
        Observed(
            bundle=b,
            fleet=FLEET,
            pods=(),
            slurm_nodes={},
            components=control(NEW, slurmrestd=OLD, slurmdbd=OLD),
            now=NOW,
        )
    )
    assert p.upgrade is None  # nothing built runs another image


def test_the_config_suits_the_slurm_that_slurmctld_runs() -> None:
    def image(components: dict[str, ComponentView], memory: UpgradeMemory | None = None) -> str:
        observed = Observed(
            bundle=cluster(),
            fleet=FLEET,
            pods=(),
            slurm_nodes=None,
            components=components,
            upgrade_memory=memory,
        )
        return config_image(observed)

    during = UpgradeMemory(OLD, NEW, "Slurmctld")
    assert image({}) == NEW
    assert image(control(slurmdbd=NEW)) == OLD
    assert image(control(NEW, pending=["slurmctld"]), during) == OLD
    assert image(control(NEW)) == NEW


def test_each_new_phase_is_told_once_in_an_event() -> None:
    status = UpgradeStatus(OLD, NEW, "Slurmctld", 0, 4, "upgrading slurmctld", NOW)
    before = UpgradeMemory(OLD, NEW, "Slurmdbd")
    assert upgrade_event(before, status) == (
        "UpgradeSlurmctld",
        f"{OLD} -> {NEW}: upgrading slurmctld",
        False,
    )
    assert upgrade_event(UpgradeMemory(OLD, NEW, "Slurmctld"), status) is None
    assert upgrade_event(None, None) is None
    refused = UpgradeStatus(NEW, OLD, "Refused", 0, 0, "no", NOW)
    assert upgrade_event(None, refused) == ("UpgradeRefused", f"{NEW} -> {OLD}: no", True)


def test_a_pod_from_before_template_hashes_is_replaced_for_a_slurm_upgrade() -> None:
    """Its block drained and idle: the upgrade switches it, the rollout replaces it."""
    block = ("gpu-0001", "gpu-0002")
    reason = f"{wk.DRAIN_REASON_PREFIX} upgrade"
    slurm_nodes = {
        n: SlurmNodeView(n, busy=False, drain=n in block, reason=reason if n in block else "")
        for n in ("gpu-0001", "gpu-0002", "gpu-0003", "gpu-0004")
    }
    old_pods = [PodView(f"gpu-{n}", n, "gpu", ready=True, image=OLD) for n in slurm_nodes]
    p = plan_cluster(
        Observed(
            bundle=cluster(),
            fleet=FLEET,
            pods=old_pods,
            slurm_nodes=slurm_nodes,
            components=control(NEW, accounting=False),
            now=NOW,
        )
    )
    assert p.delete_pods == ("gpu-gpu-0001", "gpu-gpu-0002")


def test_mid_upgrade_the_files_are_for_the_release_slurmctld_still_runs() -> None:
    """24.11 -> 26.05: until slurmctld runs 26.05, no topology.yaml and no MetricsType
    (a 24.11 slurmctld refuses the key and dies on reconfigure)."""
    old, new = "slurmkube/slurm:24.11.5", "slurmkube/slurm:26.05.5"

    def files(components: dict[str, ComponentView]) -> dict[str, str]:
        observed = Observed(
            bundle=cluster(new),
            fleet=FLEET,
            pods=(),
            slurm_nodes=None,
            components=components,
        )
        configured = configure(observed)
        assert isinstance(configured, Configured)
        return dict(configured.rendered.files)

    before = files(control(old, slurmdbd=new))
    assert "topology.conf" in before and "topology.yaml" not in before
    assert "MetricsType" not in before["slurm.conf"]
    after = files(control(new))
    assert "topology.yaml" in after and "MetricsType" in after["slurm.conf"]


def test_the_config_suits_the_oldest_slurmd_still_running() -> None:
    """slurmctld on 26.05, a slurmd pod still on 24.11 (its block waits for a job):
    configless, that slurmd fetches the file on reconfigure and dies on a 26.05 key,
    its job with it. The file stays 24.11's until no daemon reading it runs 24.11."""
    old, new = "slurmkube/slurm:24.11.5", "slurmkube/slurm:26.05.5"

    def image(pods: list[PodView], components: dict[str, ComponentView]) -> str:
        observed = Observed(
            bundle=cluster(new),
            fleet=FLEET,
            pods=pods,
            slurm_nodes=None,
            components=components,
        )
        return config_image(observed)

    busy_old = PodView("gpu-gpu-0001", "gpu-0001", "gpu", ready=True, image=old)
    upgraded = PodView("gpu-gpu-0003", "gpu-0003", "gpu", ready=True, image=new)
    assert image([busy_old, upgraded], control(new)) == old
    assert image([upgraded], control(new)) == new
    assert image([upgraded], control(new, slurmrestd=old)) == old  # clients not yet done
    # A patch release reads the same keys: the file follows spec.image.
    assert image([replace(upgraded, image="slurmkube/slurm:26.05.4")], control(new)) == new
