"""The Slurm adapter against real slurmctld, slurmd and slurmrestd (JWT).

Each behaviour runs against both backends where the backend can do it: the
REST backend reads and updates nodes itself and hands reservation writes to
its CLI delegate, so "rest" exercises that composition too. The cluster is
the sample fleet (examples/), cut to 4 nodes of each GB200 domain plus one
HGX and one CPU node, with blockSize 4.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
import yaml

from slurmkube.api.documents import parse_cluster, parse_nodes
from slurmkube.api.grammar import InvalidValue
from slurmkube.api.models import KubeNode
from slurmkube.api.well_known import DRAIN_REASON_PREFIX
from slurmkube.slurm import (
    CliClient,
    NodeStateChange,
    ReservationFlag,
    ReservationRequest,
    RestClient,
    SlurmAuthError,
    SlurmClient,
    SlurmNotFound,
    SlurmUnreachable,
    drain,
    resume_if_ours,
)
from slurmkube.slurm.incremental import SlurmLists
from slurmkube.slurm.jwt_cli import client_config, jwt_cli_client
from slurmkube.slurm.models import NodeList
from slurmkube_local.local_slurm import LocalSlurm, free_ports, slurm_prefix, start_local_slurm
from tests.slurm_contract import (
    check_bad_reservations_are_rejected,
    check_nodes_read_and_updated,
    check_reservation_update_and_delete,
    unique,
)

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BLOCK_1 = ("gb200-001", "gb200-002", "gb200-003", "gb200-004")
BLOCK_2 = ("gb200-019", "gb200-020", "gb200-021", "gb200-022")


def sample_fleet() -> list[KubeNode]:
    nodes = parse_nodes(yaml.safe_load_all((EXAMPLES / "fleet-nodes.yaml").read_text()))
    keep = {*BLOCK_1, *BLOCK_2, "hgx-01", "cpu-01"}
    return [n for n in nodes if n.metadata.name in keep]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalSlurm]:
    if not (slurm_prefix() / "sbin" / "slurmctld").exists():
        pytest.fail(f"no Slurm build at {slurm_prefix()}: run `make slurm`", pytrace=False)
    docs = list(yaml.safe_load_all((EXAMPLES / "cluster.yaml").read_text()))
    docs[0]["spec"]["topology"]["blockSize"] = 4
    with start_local_slurm(parse_cluster(docs), sample_fleet()) as running:
        running.wait_nodes_idle(timeout=90)
        yield running


def cli_client(cluster: LocalSlurm, env: dict[str, str] | None = None) -> CliClient:
    return CliClient(
        bin_dir=cluster.prefix / "bin",
        env=env if env is not None else cluster.env,
        wrapper=cluster.isolated,
    )


def rest_client(cluster: LocalSlurm, **kwargs: object) -> RestClient:
    options: dict[str, object] = {
        "jwt_key_file": cluster.conf_dir / "jwt.key",
        "reservations": cli_client(cluster),
    }
    options.update(kwargs)
    return RestClient(cluster.rest_url, **options)  # type: ignore[arg-type]


@pytest.fixture(params=["rest", "cli"])
def client(request: pytest.FixtureRequest, cluster: LocalSlurm) -> Iterator[SlurmClient]:
    if request.param == "cli":
        yield cli_client(cluster)
        return
    with rest_client(cluster) as rest:
        yield rest


@pytest.fixture(autouse=True)
def clean_cluster(cluster: LocalSlurm) -> Iterator[None]:
    """Each test starts from idle nodes, no jobs and no reservations."""
    yield
    cluster.run("scancel", "--user=root", check=False)
    for res in cli_client(cluster).list_reservations():
        cluster.run("scontrol", "delete", f"ReservationName={res.name}", check=False)
    for node in cluster.nodes:
        cluster.run("scontrol", "update", f"NodeName={node}", "State=UNDRAIN", check=False)
    cluster.wait_nodes_idle(timeout=60)


def eventually(predicate: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def submit(cluster: LocalSlurm, *args: str, seconds: int = 300) -> int:
    out = cluster.run(
        "sbatch",
        "--parsable",
        f"--output={cluster.root / 'log' / 'job-%j.out'}",
        "--time=10",
        *args,
        "--wrap",
        f"sleep {seconds}",
    )
    return int(out.strip().split(";")[0])


def job_state(cluster: LocalSlurm, job_id: int) -> tuple[str, str, str]:
    """(state, nodes, reason) as squeue prints them; ('', '', '') once gone."""
    out = cluster.run("squeue", "-h", "-j", str(job_id), "-o", "%T|%N|%r", check=False).strip()
    if not out:
        return ("", "", "")
    state, nodes, reason = out.split("|")
    return (state, nodes, reason)


def wait_running(cluster: LocalSlurm, job_id: int) -> str:
    eventually(lambda: job_state(cluster, job_id)[0] == "RUNNING", f"job {job_id} running")
    return job_state(cluster, job_id)[1]


# --- nodes and jobs ---


def test_nodes_are_listed_with_gpus_features_and_partitions(
    client: SlurmClient, cluster: LocalSlurm
) -> None:
    nodes = {n.name: n for n in client.list_nodes()}

    assert set(nodes) == set(cluster.nodes)
    for name in (*BLOCK_1, *BLOCK_2):
        assert (nodes[name].gpus, nodes[name].gpus_allocated) == (4, 0)
        assert "nvl72" in nodes[name].features
        assert set(nodes[name].partitions) == {"gb200", "all-gpu"}
    assert nodes["hgx-01"].gpus == 8
    assert nodes["cpu-01"].gpus == 0
    assert all(n.base_state == "IDLE" and "CLOUD" in n.state for n in nodes.values())
    assert client.get_node("hgx-01") == nodes["hgx-01"]


def test_rest_backend_uses_newest_data_parser_of_24_11(cluster: LocalSlurm) -> None:
    with rest_client(cluster) as rest:
        assert rest.data_parser == "v0.0.42"
        assert any(p.responding for p in rest.ping())


@pytest.mark.parametrize("version", ["v0.0.40", "v0.0.41", "v0.0.42"])
def test_every_24_11_data_parser_reads_and_updates_nodes(cluster: LocalSlurm, version: str) -> None:
    with rest_client(cluster, data_parser=version) as rest:
        check_nodes_read_and_updated(
            rest, set(cluster.nodes), ("hgx-01", ("hgx", "all-gpu")), "cpu-01"
        )


def test_jobs_are_listed_with_gpu_requests_nodes_and_reasons(
    client: SlurmClient, cluster: LocalSlurm
) -> None:
    running = submit(cluster, "-p", "gb200", "-N", "2", "--gres=gpu:4", "-w", "gb200-001,gb200-002")
    held = submit(cluster, "-p", "hgx", "-N", "1", "--gpus=8", "--hold")
    wait_running(cluster, running)

    jobs = {j.job_id: j for j in client.list_jobs()}

    assert jobs[running].running
    assert jobs[running].nodes == ("gb200-001", "gb200-002")
    assert (jobs[running].node_count, jobs[running].gpus_per_node) == (2, 4)
    assert jobs[running].gpus_requested == jobs[running].gpus_allocated == 8
    assert jobs[running].partition == "gb200"
    assert jobs[held].pending
    assert (jobs[held].gpus_per_job, jobs[held].gpus_requested, jobs[held].nodes) == (8, 8, ())
    assert jobs[held].reason == "JobHeldUser"
    assert jobs[held].priority == 0  # a held job's priority is 0
    assert jobs[running].priority > 0
    gpu_nodes = {n.name: n for n in client.list_nodes()}
    assert gpu_nodes["gb200-001"].gpus_allocated == 4


def test_node_features_can_be_set(client: SlurmClient, cluster: LocalSlurm) -> None:
    before = client.get_node("cpu-01").features
    try:
        client.set_node_features("cpu-01", ["cpu", "lent"])
        assert client.get_node("cpu-01").features == ("cpu", "lent")
        assert client.get_node("cpu-01").active_features == ("cpu", "lent")
    finally:
        client.set_node_features("cpu-01", before)
    assert client.get_node("cpu-01").features == before


# --- reservations ---


def test_reservation_holds_exactly_the_requested_nodes(
    client: SlurmClient, cluster: LocalSlurm
) -> None:
    name = unique("lend")
    held = ("gb200-003", "gb200-004")

    created = client.create_reservation(
        ReservationRequest(
            name=name,
            nodes=held,
            users=("root",),
            duration=timedelta(hours=1),
            flags=frozenset({ReservationFlag.IGNORE_JOBS}),
        )
    )

    assert created.nodes == held
    assert "IGNORE_JOBS" in created.flags
    assert created.duration == timedelta(hours=1)
    assert created.users == ("root",)
    shown = cluster.run("scontrol", "show", "reservation", name)
    assert "Nodes=gb200-[003-004]" in shown
    assert "NodeCnt=2" in shown
    # slurmctld marks the nodes RESERVED on its next reservation pass.
    eventually(
        lambda: {n.name for n in client.list_nodes() if n.reservation == name} == set(held),
        "nodes to show the reservation",
        timeout=90,
    )
    # Outside the reservation a job asking for a reserved node waits ...
    outside = submit(cluster, "-p", "gb200", "-N", "1", "-w", "gb200-003")
    # ... while one inside it runs there.
    inside = submit(cluster, "-p", "gb200", "-N", "2", f"--reservation={name}")
    assert sorted(wait_running(cluster, inside).replace("gb200-[", "").split("-")) == [
        "003",
        "004]",
    ]
    state, _, reason = job_state(cluster, outside)
    assert state == "PENDING"
    assert "Reserved" in reason or "ReqNodeNotAvail" in reason
    assert [j.reservation for j in client.list_jobs() if j.job_id == inside] == [name]


def test_reservation_can_be_updated_and_deleted(client: SlurmClient, cluster: LocalSlurm) -> None:
    check_reservation_update_and_delete(
        client,
        ("gb200-019", "gb200-020"),
        "root",
        lambda: cluster.run("scontrol", "show", "reservation"),
    )


def test_bad_reservations_are_rejected_with_slurms_message(
    client: SlurmClient, cluster: LocalSlurm
) -> None:
    job = submit(cluster, "-p", "hgx", "-N", "1", "-w", "hgx-01")
    wait_running(cluster, job)
    check_bad_reservations_are_rejected(client, "hgx-01", ("cpu-01", "gb200-021"), "root")


# --- drain ---


def test_drain_keeps_running_job_and_node_ends_drained(
    client: SlurmClient, cluster: LocalSlurm
) -> None:
    node = "gb200-021"
    job = submit(cluster, "-p", "gb200", "-N", "1", "-w", node, seconds=8)
    wait_running(cluster, job)

    drain(client, node, "lent to workload w-1")

    during = client.get_node(node)
    assert during.draining
    assert during.reason == f"{DRAIN_REASON_PREFIX} lent to workload w-1"
    assert job_state(cluster, job)[0] == "RUNNING"
    eventually(lambda: job_state(cluster, job)[0] == "", f"job {job} done", timeout=60)
    eventually(lambda: client.get_node(node).drained, f"{node} drained")
    assert cluster.node_states()[node] == "drained"

    assert resume_if_ours(client, node) is True

    after = client.get_node(node)
    assert not after.drain
    assert after.base_state == "IDLE"
    assert resume_if_ours(client, node) is False


def test_resume_if_ours_never_clears_an_admins_drain(
    client: SlurmClient, cluster: LocalSlurm
) -> None:
    node = "gb200-022"
    cluster.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=admin: bad gpu")

    assert resume_if_ours(client, node) is False

    kept = client.get_node(node)
    assert kept.drained
    assert kept.reason == "admin: bad gpu"


def test_reasons_cannot_smuggle_another_keyword(client: SlurmClient, cluster: LocalSlurm) -> None:
    node = "gb200-020"
    cluster.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=admin: rma")

    for reason in ("x State=RESUME", 'x" State=RESUME', "x\nState=RESUME"):
        with pytest.raises(InvalidValue):
            drain(client, node, reason)
        with pytest.raises(InvalidValue):
            client.update_node_state(node, NodeStateChange.DRAIN, reason)

    assert client.get_node(node).reason == "admin: rma"


# --- controller ---


def test_reconfigure_rereads_the_config(client: SlurmClient, cluster: LocalSlurm) -> None:
    def loaded_at() -> str:
        out = cluster.run("scontrol", "show", "config")
        return next(line for line in out.splitlines() if "Configuration data as of" in line)

    before = loaded_at()
    time.sleep(1.1)  # the timestamp has one-second resolution

    client.reconfigure()

    eventually(lambda: loaded_at() != before, "slurmctld to reload its config")
    eventually(lambda: any(p.responding for p in client.ping()), "slurmctld up again")
    cluster.wait_nodes_idle(timeout=60)


# --- typed errors ---


def test_unknown_node_is_not_found(client: SlurmClient) -> None:
    with pytest.raises(SlurmNotFound):
        client.get_node("gb200-999")
    with pytest.raises(SlurmNotFound):
        client.update_node_state("gb200-999", NodeStateChange.RESUME)
    with pytest.raises(SlurmNotFound):
        drain(client, "gb200-999", "gone")


@pytest.mark.parametrize(
    "credential",
    [
        {"jwt_key": secrets.token_bytes(32)},
        {"token": "not-a-jwt"},
    ],
    ids=["wrong-key", "garbage-token"],
)
def test_rest_with_a_wrong_jwt_is_an_auth_error(
    cluster: LocalSlurm, credential: dict[str, object]
) -> None:
    with rest_client(cluster, jwt_key_file=None, **credential) as rest:
        with pytest.raises(SlurmAuthError):
            rest.list_nodes()
        with pytest.raises(SlurmAuthError):
            rest.ping()


def test_rest_on_a_port_nobody_serves_is_unreachable(cluster: LocalSlurm) -> None:
    (port,) = free_ports(1)
    with (
        RestClient(
            f"http://127.0.0.1:{port}", jwt_key_file=cluster.conf_dir / "jwt.key", attempts=2
        ) as rest,
        pytest.raises(SlurmUnreachable),
    ):
        rest.list_nodes()


def test_cli_with_a_wrong_jwt_is_an_auth_error(cluster: LocalSlurm) -> None:
    # SLURM_JWT makes scontrol authenticate with auth/jwt (jwt.html); the key
    # variable would override it with auth/slurm.
    env = {k: v for k, v in cluster.env.items() if k != "SLURM_SACK_KEY"}
    env["SLURM_JWT"] = "not-a-jwt"
    with pytest.raises(SlurmAuthError):
        cli_client(cluster, env=env).list_nodes()


def test_cli_with_no_controller_is_unreachable(cluster: LocalSlurm, tmp_path: Path) -> None:
    (port,) = free_ports(1)
    conf = (cluster.conf_dir / "slurm.conf").read_text()
    # No slurmctld on that port; scontrol tries to reach one for MessageTimeout.
    settings = {"SlurmctldPort": str(port), "MessageTimeout": "3"}
    lines = [
        f"{key}={settings[key]}" if (key := line.split("=", 1)[0]) in settings else line
        for line in conf.splitlines()
    ]
    (tmp_path / "slurm.conf").write_text("\n".join(lines) + "\n")
    env = {**cluster.env, "SLURM_CONF": str(tmp_path / "slurm.conf")}
    with pytest.raises(SlurmUnreachable):
        cli_client(cluster, env=env).list_nodes()


def test_scontrol_outside_the_cluster_writes_reservations_with_a_jwt_alone(
    cluster: LocalSlurm, tmp_path: Path
) -> None:
    """What the operator does (slurmkube.slurm.jwt_cli): a generated client config and
    SLURM_JWT; no slurm.key, no sack socket, not inside the cluster's namespace."""
    conf = (cluster.conf_dir / "slurm.conf").read_text()
    ctld = re.search(r"^SlurmctldHost=([^(\s]+)\(([^)]+)\)", conf, re.MULTILINE)
    port = re.search(r"^SlurmctldPort=(\d+)", conf, re.MULTILINE)
    name = re.search(r"^ClusterName=(\S+)", conf, re.MULTILINE)
    assert ctld and port and name
    config = client_config(name.group(1), ctld.group(1), ctld.group(2), int(port.group(1)))

    def client(key: bytes) -> CliClient:
        return jwt_cli_client(
            config=config,
            config_dir=tmp_path,
            jwt_key=key,
            user="root",
            bin_dir=cluster.prefix / "bin",
        )

    cli = client((cluster.conf_dir / "jwt.key").read_bytes())
    node = cluster.nodes[-1]
    made = cli.create_reservation(
        ReservationRequest(
            name="slurmkube-jwt-only",
            nodes=(node,),
            users=("root",),
            flags=frozenset({ReservationFlag.IGNORE_JOBS}),
        )
    )
    assert made.nodes == (node,)
    assert "IGNORE_JOBS" in made.flags
    cli.delete_reservation("slurmkube-jwt-only")
    with pytest.raises(SlurmNotFound):
        cli.get_reservation("slurmkube-jwt-only")
    with pytest.raises(SlurmAuthError):
        client(secrets.token_bytes(32)).list_nodes()


def test_the_node_change_probe_answers_no_change_until_a_node_changes(
    cluster: LocalSlurm,
) -> None:
    """What the autoscale poll asks every 2 s: slurmrestd's 304 when nothing changed."""
    node = sample_fleet()[0].metadata.name
    with rest_client(cluster) as rest:
        for _ in range(20):  # until the nodes are quiet (a test before may still settle)
            since = rest.node_list().update_time
            time.sleep(1.1)
            if not rest.nodes_changed_since(since):
                break
        else:
            pytest.fail("Slurm's nodes never stopped changing")
        cluster.run("scontrol", "update", f"nodename={node}", "state=drain", "reason=probe")
        try:
            assert rest.nodes_changed_since(since)
        finally:
            cluster.run("scontrol", "update", f"nodename={node}", "state=resume")


def quiet_node_list(rest: RestClient) -> NodeList:
    """A full node list that current_nodes gives back unchanged a second later."""
    for _ in range(20):  # until the nodes are quiet (a test before may still settle)
        listed = rest.node_list()
        time.sleep(1.1)
        if rest.current_nodes() is listed:
            return listed
    pytest.fail("Slurm's nodes never stopped changing")


def test_current_nodes_is_the_last_list_until_a_node_changes(cluster: LocalSlurm) -> None:
    """What a reconcile and a bridge round read: the full list only after a change."""
    node = sample_fleet()[0].metadata.name
    with rest_client(cluster) as rest:
        listed = quiet_node_list(rest)
        cluster.run("scontrol", "update", f"nodename={node}", "state=drain", "reason=probe")
        try:
            after = rest.current_nodes()
            assert after is not listed
            assert next(n for n in after.nodes if n.name == node).drain
        finally:
            cluster.run("scontrol", "update", f"nodename={node}", "state=resume")


class _NodeAnswers(httpx.HTTPTransport):
    """Records the status slurmrestd gave each `/nodes/` request (probe or full read)."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[tuple[bool, int]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.url.path.endswith("/nodes/"):
            self.answers.append(("update_time" in request.url.params, response.status_code))
        return response


def test_a_client_made_again_answers_from_the_last_list_after_a_304(cluster: LocalSlurm) -> None:
    """The operator's client for a cluster is made again (a new key, the 10-minute
    refresh) with the cluster's lists: its first read is a 304 and the kept list,
    and a drain is read in full."""
    node = sample_fleet()[0].metadata.name
    lists = SlurmLists()
    with rest_client(cluster, lists=lists) as first:
        listed = quiet_node_list(first)
    seen = _NodeAnswers()
    with rest_client(cluster, lists=lists, transport=seen) as again:
        assert again.current_nodes() is listed
        assert seen.answers == [(True, 304)]  # asked with update_time, nothing decoded
        cluster.run("scontrol", "update", f"nodename={node}", "state=drain", "reason=probe")
        try:
            after = again.current_nodes()
        finally:
            cluster.run("scontrol", "update", f"nodename={node}", "state=resume")
    assert next(n for n in after.nodes if n.name == node).drain
    assert after.update_time >= listed.update_time
    probe, full = seen.answers[1:]
    assert probe[0] and probe[1] != 304  # the change is told...
    assert full == (False, 200)  # ...and read in full once
    assert lists.nodes.kept is after


def test_jobs_listed_again_are_the_last_list_until_a_job_changes(cluster: LocalSlurm) -> None:
    held = submit(cluster, "-p", "hgx", "-N", "1", "--hold")
    with rest_client(cluster) as rest:
        first = rest.list_jobs()
        assert held in {j.job_id for j in first}
        time.sleep(1.1)  # slurmctld counts a change in the listed second as a change
        assert rest.list_jobs() == first
        cluster.run("scontrol", "update", f"JobId={held}", "Name=renamed")
        assert {j.job_id: j.name for j in rest.list_jobs()}[held] == "renamed"


def test_the_job_change_probe_answers_no_change_until_a_job_changes(cluster: LocalSlurm) -> None:
    """What the poll asks first every 2 s (controllers/slurm_poll.py): no job, and no
    update time, when none changed; a later update time once one did."""
    held = submit(cluster, "-p", "hgx", "-N", "1", "--hold")
    with rest_client(cluster) as rest:
        for _ in range(20):  # until the jobs are quiet (a test before may still settle)
            since = rest.jobs_changed_since(0)
            assert since
            time.sleep(1.1)
            if not rest.jobs_changed_since(since):
                break
        else:
            pytest.fail("Slurm's jobs never stopped changing")
        cluster.run("scontrol", "update", f"JobId={held}", "Name=probed")
        assert rest.jobs_changed_since(since) >= since
        cluster.run("scancel", str(held))


def test_rest_after_slurmrestd_stopped_is_unreachable(cluster: LocalSlurm) -> None:
    """Last in the module: it stops this module's slurmrestd."""
    with rest_client(cluster, attempts=2) as rest:
        assert rest.list_nodes()
        cluster.stop("slurmrestd")
        with pytest.raises(SlurmUnreachable):
            rest.list_nodes()
        with pytest.raises(SlurmUnreachable):
            rest.ping()
    assert os.environ.get("SLURM_JWT") is None  # the REST env never leaked into ours
