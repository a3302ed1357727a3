"""RestClient against the live slurmrestd of Slurm 26.05 (its image, under podman).

The client has no scontrol to hand anything to: on 26.05 it discovers data_parser
v0.0.45 and creates, reads, updates and deletes reservations and requeues jobs over
REST alone. The reservation checks are the ones the integration tests run on 24.11
with both backends (tests/slurm_contract.py). `make test-images` runs this.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from images import build as image_build
from slurmkube.slurm import (
    ReservationFlag,
    ReservationRequest,
    ReservationUpdate,
    RestClient,
    SlurmNotFound,
    SlurmRejected,
)
from slurmkube.slurm.errors import SlurmError
from slurmkube.slurm.topology_text import parse_topology
from slurmkube_local.builders import CLUSTER_UUID
from tests.slurm_contract import (
    check_bad_reservations_are_rejected,
    check_nodes_read_and_updated,
    check_reservation_update_and_delete,
)

from .conftest import Podman
from .record_rest import Recorder, offered_versions
from .slurm_stack import SlurmStack, start_slurm_stack, wait_until

NODES = ("n1", "n2", "n3")


@pytest.fixture(scope="module")
def image() -> str:
    """The 26.05 image for the current inputs (cached: a few seconds)."""
    (built,) = image_build.cmd_build(["slurm-26.05"])
    return built.ref


@pytest.fixture
def stack(image: str, podman: Podman, tmp_path: Path) -> SlurmStack:
    return start_slurm_stack(podman, image, tmp_path, f"slurmkube-rest-{os.getpid()}", NODES)


@pytest.fixture
def rest(stack: SlurmStack) -> Iterator[RestClient]:
    # No `reservations=` delegate: anything handed to scontrol would raise.
    with RestClient(stack.rest_url, jwt_key=stack.jwt_key, user="slurm") as client:
        yield client


def sbatch(podman: Podman, stack: SlurmStack, *args: str) -> int:
    out = podman(
        "exec", stack.sackd, "sbatch", "--parsable", "--output=/dev/null", *args, timeout=60
    )
    return int(out.strip().split(";")[0])


def eventually(check: Callable[[], bool], what: str, podman: Podman) -> None:
    wait_until(check, what, podman, timeout=30)


def test_26_05_reservations_and_requeue_go_over_rest_alone(
    rest: RestClient, stack: SlurmStack, podman: Podman
) -> None:
    assert rest.data_parser == "v0.0.45"
    assert (rest.abilities.writes_reservations, rest.abilities.requeues_jobs) == (True, True)
    assert [p.mode for p in rest.ping() if p.responding] == ["primary"]
    nodes = {n.name: n for n in rest.list_nodes()}
    assert set(nodes) == set(NODES)
    assert all(n.base_state == "IDLE" for n in nodes.values())

    job = sbatch(podman, stack, "-J", "busy", "-N1", "-w", "n1", "-t", "10", "--wrap", "sleep 300")
    eventually(
        lambda: any(j.job_id == job and j.running for j in rest.list_jobs()), "job running", podman
    )
    (running,) = [j for j in rest.list_jobs() if j.job_id == job]
    assert (running.name, running.nodes, running.requeueable) == ("busy", ("n1",), True)

    made = rest.create_reservation(
        ReservationRequest(
            name="wl-1",
            nodes=("n1",),
            users=("slurm",),
            duration=timedelta(hours=1),
            flags=frozenset({ReservationFlag.IGNORE_JOBS, ReservationFlag.NO_HOLD_JOBS_AFTER}),
        )
    )
    assert (made.nodes, made.users, made.duration) == (("n1",), ("slurm",), timedelta(hours=1))
    assert made.flags >= {"IGNORE_JOBS", "NO_HOLD_JOBS_AFTER_END"}
    shown = podman("exec", stack.controller, "scontrol", "show", "reservation", "wl-1")
    assert "Nodes=n1 " in shown and "Users=slurm " in shown
    with pytest.raises(SlurmRejected, match="Duplicate"):
        rest.create_reservation(ReservationRequest(name="wl-1", nodes=("n2",), users=("slurm",)))

    moved = rest.update_reservation(
        ReservationUpdate(name="wl-1", nodes=("n1", "n2"), users=("slurm", "root"))
    )
    assert (moved.nodes, moved.users) == (("n1", "n2"), ("slurm", "root"))
    assert rest.get_reservation("wl-1") == moved
    rest.delete_reservation("wl-1")
    with pytest.raises(SlurmNotFound):
        rest.get_reservation("wl-1")

    rest.requeue_job(job)
    eventually(
        lambda: any(j.job_id == job and j.restarts == 1 for j in rest.list_jobs()),
        "job requeued",
        podman,
    )
    with pytest.raises(SlurmNotFound):
        rest.requeue_job(999999)


def test_26_05_keeps_the_reservation_contract(
    rest: RestClient, stack: SlurmStack, podman: Podman
) -> None:
    sbatch(podman, stack, "-N1", "-w", "n3", "-t", "10", "--wrap", "sleep 300")
    eventually(lambda: rest.get_node("n3").busy, "n3 busy", podman)

    check_reservation_update_and_delete(
        rest,
        ("n1", "n2"),
        "slurm",
        lambda: podman("exec", stack.controller, "scontrol", "show", "reservation"),
    )
    check_bad_reservations_are_rejected(rest, "n3", ("n1", "n2"), "slurm")


def test_every_26_05_data_parser_reads_and_updates_nodes(stack: SlurmStack) -> None:
    served = offered_versions(Recorder(stack).send("GET", "/openapi/v3")["body"])
    assert served == ["v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"]
    for version in served:
        with RestClient(
            stack.rest_url, jwt_key=stack.jwt_key, user="slurm", data_parser=version
        ) as rest:
            check_nodes_read_and_updated(rest, set(NODES), ("n1", ("gpu",)), "n2")


def test_26_05_moves_nodes_between_blocks_over_rest_without_a_reconfigure(
    image: str, podman: Podman, tmp_path: Path
) -> None:
    """The operator's live move (render/live_topology.py): `topology_str` on
    `POST /nodes/` with the names; a block slurmctld does not hold is refused."""
    stack = two_domains(podman, image, tmp_path, "move")

    def blocks() -> dict[str, frozenset[str]]:
        return nvlink_blocks(podman, stack)

    one, two = f"{CLUSTER_UUID}.1", f"{CLUSTER_UUID}.2"
    assert blocks() == {one: {"n1", "n2"}, two: {"n3", "n4"}}
    with RestClient(stack.rest_url, jwt_key=stack.jwt_key, user="slurm") as rest:
        rest.move_nodes(["n2"], [("nvlink", two)])
        assert blocks() == {one: {"n1"}, two: {"n2", "n3", "n4"}}
        rest.move_nodes(["n2", "n3"], [("nvlink", one)])
        assert blocks() == {one: {"n1", "n2", "n3"}, two: {"n4"}}
        with pytest.raises(SlurmError):
            rest.move_nodes(["n1"], [("nvlink", f"{CLUSTER_UUID}.9")])
    assert blocks()[one] == {"n1", "n2", "n3"}
    assert reconfigures(podman, stack.controller) == 0


def reconfigures(podman: Podman, controller: str) -> int:
    """How often slurmctld reconfigured, by its log."""
    logs = subprocess.run(
        ["podman", "logs", controller],
        env=podman.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=True,
    ).stdout
    return logs.count("Attempting to reconfigure")


def test_26_05_reconfigures_onto_new_blocks_once_a_moved_node_is_settled(
    image: str, podman: Podman, tmp_path: Path
) -> None:
    """slurmctld 26.05 keeps a live move's `Topology=` in its state (`scontrol
    show node` shows it) and, when it starts again, puts the node there over the
    files; one naming a block the files no longer hold stops it. The operator's
    settling before a reconfigure (live_topology.before_reconfigure) sends an
    empty `topology_str`: the override ends and the files place the node."""
    stack = two_domains(podman, image, tmp_path, "settle")

    def blocks() -> dict[str, frozenset[str]]:
        return nvlink_blocks(podman, stack)

    def override() -> str:
        shown = podman("exec", stack.controller, "scontrol", "show", "node", "n2")
        return next((w for w in shown.split() if w.startswith("Topology=")), "")

    one, two, three = (f"{CLUSTER_UUID}.{i}" for i in (1, 2, 3))
    with RestClient(stack.rest_url, jwt_key=stack.jwt_key, user="slurm") as rest:
        rest.move_nodes(["n2"], [("nvlink", two)])
        assert override() == f"Topology=nvlink:{two}"
        # What the operator reads back (live_topology.override_drift).
        assert {n.name: n.topology for n in rest.list_nodes()} == {
            "n1": "",
            "n2": f"nvlink:{two}",
            "n3": "",
            "n4": "",
        }
        rest.move_nodes(["n2"], [])
        assert override() == ""
        assert rest.get_node("n2").topology == ""
        assert blocks() == {one: {"n1"}, two: {"n3", "n4"}}
    # Domain 2 goes and domain 3 comes: the new files hold no block 2.
    stack.rewrite({"n2": 3, "n3": 3})
    podman("exec", stack.controller, "scontrol", "reconfigure")
    wait_until(
        lambda: (
            "UP" in podman("exec", stack.controller, "scontrol", "ping", check=False)
            and blocks() == {one: {"n1", "n4"}, three: {"n2", "n3"}}
        ),
        "the new blocks in force",
        podman,
    )
    assert reconfigures(podman, stack.controller) == 1


def test_26_05_power_saving_puts_a_moved_node_back_and_drops_its_override(
    image: str, podman: Podman, tmp_path: Path
) -> None:
    """Why each Slurm read is checked (live_topology.override_drift): a node that
    powers down goes back to the block it had before its first live move, with
    no override left, whatever the files say now (about SuspendTimeout, 30 s)."""
    stack = two_domains(podman, image, tmp_path, "power")

    def blocks() -> dict[str, frozenset[str]]:
        return nvlink_blocks(podman, stack)

    one, two = f"{CLUSTER_UUID}.1", f"{CLUSTER_UUID}.2"
    with RestClient(stack.rest_url, jwt_key=stack.jwt_key, user="slurm") as rest:
        rest.move_nodes(["n2"], [("nvlink", two)])
        podman(
            "exec", stack.controller, "scontrol", "update", "NodeName=n2", "State=POWER_DOWN_FORCE"
        )
        wait_until(
            lambda: "POWERED_DOWN" in rest.get_node("n2").state, "n2 powered down", podman, 90
        )
        assert rest.get_node("n2").topology == ""
    assert blocks() == {one: {"n1", "n2"}, two: {"n3", "n4"}}


def two_domains(podman: Podman, image: str, workdir: Path, name: str) -> SlurmStack:
    """n1 and n2 in NVLink domain 1 (block `<uuid>.1`), n3 and n4 in domain 2."""
    nodes = ("n1", "n2", "n3", "n4")
    prefix = f"slurmkube-{name}-{os.getpid()}"
    return start_slurm_stack(podman, image, workdir, prefix, nodes, cliques={"n3": 2, "n4": 2})


def nvlink_blocks(podman: Podman, stack: SlurmStack) -> dict[str, frozenset[str]]:
    shown = podman("exec", stack.controller, "scontrol", "show", "topology", "nvlink")
    return {name: r.nodes for name, r in parse_topology(shown).items()}
