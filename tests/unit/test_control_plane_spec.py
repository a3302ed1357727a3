"""Control-plane pods take the resources and cluster domain the SlurmCluster sets,
and a SlurmCluster is not deleted under running jobs unless asked to."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkube.api import well_known as wk
from slurmkube.api.documents import DocumentError, parse_cluster
from slurmkube.build.login import login_deployment
from slurmkube.build.slurmctld import controller_statefulset
from slurmkube.build.slurmd import slurmd_pod
from slurmkube.build.slurmdbd import slurmdbd_deployment
from slurmkube.build.slurmrestd import restapi_deployment
from slurmkube.plan.deletion import deletion_conditions, plan_deletion, reads_slurm
from slurmkube.plan.model import SlurmNodeView
from slurmkube_local.builders import cluster_docs

DB = {"host": "db", "secretName": "db-login"}
SMALL = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}


def parsed(**spec: Any) -> Any:
    return parse_cluster(cluster_docs(extra=spec))


def container(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    pod = manifest["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == name)


def test_each_control_plane_container_takes_its_resources() -> None:
    cluster = parsed(
        controller={"resources": SMALL},
        restApi={"resources": SMALL},
        accounting={"enabled": True, "database": DB, "resources": SMALL},
        login={"replicas": 1, "resources": SMALL},
    ).cluster
    made = {
        "slurmctld": container(controller_statefulset(cluster), "slurmctld"),
        "slurmrestd": container(restapi_deployment(cluster), "slurmrestd"),
        "slurmdbd": container(slurmdbd_deployment(cluster, "h"), "slurmdbd"),
        "login": container(login_deployment(cluster), "login"),
    }
    assert {name: c["resources"] for name, c in made.items()} == dict.fromkeys(made, SMALL)


def test_unset_resources_leave_the_containers_without_any() -> None:
    cluster = parsed().cluster
    assert "resources" not in container(controller_statefulset(cluster), "slurmctld")
    assert "resources" not in container(restapi_deployment(cluster), "slurmrestd")


@pytest.mark.parametrize("quantity", ["1 Gi", "lots", "1Gi\nx", "-1"])
def test_a_bad_quantity_is_refused_naming_the_field(quantity: str) -> None:
    with pytest.raises(DocumentError) as err:
        parsed(controller={"resources": {"limits": {"memory": quantity}}})
    assert "spec.controller.resources.limits" in str(err.value)


def test_the_cluster_domain_names_slurmctld_for_slurmd() -> None:
    bundle = parsed(clusterDomain="corp.example")
    pod = slurmd_pod(bundle.cluster, bundle.node_sets[0], "n1", 0, "h")
    args = pod["spec"]["containers"][0]["args"]
    server = args[args.index("--conf-server") + 1]
    assert server == "test-slurmctld-0.test-slurmctld.default.svc.corp.example:6817"


@pytest.mark.parametrize("domain", ["Corp.Example", "a b", "x\nSlurmUser=root", "a..b", "-x"])
def test_a_bad_cluster_domain_is_refused_naming_the_field(domain: str) -> None:
    with pytest.raises(DocumentError) as err:
        parsed(clusterDomain=domain)
    assert "spec.clusterDomain" in str(err.value)


def test_the_broken_backup_controller_field_is_gone() -> None:
    with pytest.raises(DocumentError):
        parsed(controller={"backup": True})


# --- deletion ---------------------------------------------------------------------------


def nodes(**states: str) -> dict[str, SlurmNodeView]:
    return {
        name: SlurmNodeView(name, busy=state == "busy", drain=state == "drained")
        for name, state in states.items()
    }


Slurm = dict[str, SlurmNodeView] | None


@pytest.mark.parametrize(
    ("policy", "forced", "seen", "expected"),
    [
        # Jobs run: every node not yet drained is drained, the deletion waits.
        ("Drain", False, (nodes(a="busy", b="idle", c="drained"), True), (False, ("a", "b"))),
        ("Drain", False, (nodes(a="idle", b="drained"), True), (True, ())),
        ("Drain", False, ({}, True), (True, ())),
        # Forced, or the Delete policy: at once, nothing drained.
        ("Drain", True, (nodes(a="busy"), True), (True, ())),
        ("Delete", False, (nodes(a="busy"), True), (True, ())),
        # Slurm silent: wait while slurmctld runs; its pod gone or going: go.
        ("Drain", False, (None, True), (False, ())),
        ("Drain", False, (None, False), (True, ())),
        ("Drain", False, (nodes(a="busy"), False), (True, ())),
    ],
)
def test_deletion_waits_only_while_jobs_can_be_kept(
    policy: str, forced: bool, seen: tuple[Slurm, bool], expected: tuple[bool, tuple[str, ...]]
) -> None:
    slurm, controller = seen
    step = plan_deletion(
        policy=policy, forced=forced, slurm_nodes=slurm, controller_running=controller
    )
    assert (step.proceed, step.drain) == expected
    if not step.proceed:
        assert wk.ANNOTATION_FORCE_DELETE in step.message


SLURM_SEEN = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from("abc"), st.sampled_from(["busy", "idle", "drained"])).map(
        lambda states: nodes(**states)
    ),
)


@given(st.sampled_from(["Drain", "Delete"]), st.booleans(), st.booleans(), SLURM_SEEN, SLURM_SEEN)
def test_slurm_is_read_only_when_its_answer_can_change_the_step(
    policy: str, forced: bool, controller: bool, seen: Slurm, other: Slurm
) -> None:
    # A read that cannot change the step would only wait on a slurmctld going away.
    if reads_slurm(policy=policy, forced=forced, controller_running=controller):
        return
    steps = [
        plan_deletion(policy=policy, forced=forced, slurm_nodes=s, controller_running=controller)
        for s in (seen, other)
    ]
    assert steps[0] == steps[1]


def test_a_waiting_deletion_is_a_condition_beside_the_others() -> None:
    step = plan_deletion(
        policy="Drain", forced=False, slurm_nodes=nodes(a="busy"), controller_running=True
    )
    previous = [{"type": "Ready", "status": "True", "reason": "Ready", "message": "ok"}]
    conditions = {c["type"]: c for c in deletion_conditions(previous, step, 3, "now")}
    assert conditions["Ready"]["status"] == "True"
    deleting = conditions["Deleting"]
    assert (deleting["status"], deleting["reason"]) == ("True", "WaitingForJobs")
    assert "1 nodes still run jobs (a)" in deleting["message"]


def test_the_default_policy_is_drain() -> None:
    assert parsed().cluster.spec.deletion_policy == "Drain"
