"""The live goodput exporter: a cluster's Slurm jobs and nodes, Nodes and Workloads
through the translator and the ledger to the metrics, read back from the registry."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterator
from typing import Any

import pytest

from slurmkube.api import well_known as wk
from slurmkube.controllers import goodput as exporter
from slurmkube.controllers import handlers
from slurmkube.controllers import policy as policy_controller
from slurmkube.controllers.goodput_observe import kueue_gang, slurm_gang
from slurmkube.controllers.observe import node_entry
from slurmkube.goodput import Side
from slurmkube.goodput.handovers import BACK, LEASE_ENDED, LENT, Handover
from slurmkube.goodput.ledger import ENTITLEMENT_RESOLUTION_S
from slurmkube.goodput.live import LiveNode
from slurmkube.goodput.live_ledger import STATES
from slurmkube.goodput.offline import recompute
from slurmkube.goodput.stranded import StrandGang, StrandNode, stranded_by_domain
from slurmkube.metrics import REGISTRY
from slurmkube.slurm.models import Job, Node, NodeList
from slurmkube_local.builders import NodeBuilder, cluster_docs
from tests.unit.policy_builders import two_teams

KEY = ("ns", "c1")
CHECK = "slurm-lend"
S, K = Side.SLURM, Side.KUBERNETES


def at(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, dt.UTC)


def slurm_node(name: str, *state: str) -> Node:
    states = frozenset(state or ("IDLE",))
    return Node(name, states, next(iter(sorted(states))), gpus=8)


def job(job_id: int, state: str, *, submit: float, start: float | None = None, **kw: Any) -> Job:
    return Job(
        job_id=job_id,
        name=f"j{job_id}",
        user="u",
        state=frozenset({state}),
        partition="gpu",
        priority=1,
        account=kw.pop("account", "physics"),
        submit_time=at(submit),
        start_time=at(start) if start is not None else None,
        **kw,
    )


def workload(uid: str, *, created: float, admitted: float, pods: int, gpus: int) -> dict[str, Any]:
    stamp = at(admitted).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {
            "name": f"w-{uid}",
            "namespace": "ml",
            "uid": uid,
            "creationTimestamp": at(created).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "spec": {
            "podSets": [
                {
                    "name": "main",
                    "count": pods,
                    "template": {
                        "spec": {
                            "containers": [
                                {"resources": {"requests": {wk.RESOURCE_GPU: str(gpus)}}}
                            ]
                        }
                    },
                }
            ]
        },
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "lastTransitionTime": stamp},
                {"type": "Admitted", "status": "True", "lastTransitionTime": stamp},
            ],
            "admissionChecks": [{"name": CHECK, "state": "Ready"}],
        },
    }


class FakeRest:
    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.jobs: list[Job] = []

    def current_nodes(self) -> NodeList:
        return NodeList(tuple(self.nodes), 1)

    def list_jobs(self, states: Collection[str]) -> tuple[Job, ...]:
        return tuple(j for j in self.jobs if j.state & frozenset(states))


class FakeClients:
    def __init__(self, rest: FakeRest) -> None:
        self._rest = rest

    def rest(self, kube: object, cluster: object) -> FakeRest:
        return self._rest


@pytest.fixture
def rest(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRest]:
    fake = FakeRest()
    monkeypatch.setattr(handlers.State, "clients", FakeClients(fake))
    yield fake
    exporter.EXPORTER.fleets.pop(KEY, None)
    exporter.metrics.forget(KEY)


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"namespace": "ns", "cluster": "c1", **labels})


def fleet_nodes(lease: str = "") -> dict[str, Any]:
    nodes = {}
    for name, domain in (("n1", "a"), ("n2", "a"), ("n3", "b"), ("n4", "b")):
        builder = NodeBuilder(name).clique(f"dom-{domain}").gpus(8)
        if name == "n4" and lease:
            builder.label(wk.LABEL_LEASE, lease)
        nodes[name] = node_entry(builder.dict())
    return nodes


def tick(
    now: float,
    *,
    nodes: dict[str, Any],
    workloads: tuple[dict[str, Any], ...] = (),
    lends: bool = True,
) -> None:
    raw = {**cluster_docs()[0], "metadata": {"name": "c1", "namespace": "ns"}}
    lenders = {CHECK: KEY} if lends else {}
    exporter.export_cluster(
        object(), KEY, raw, nodes=nodes, workloads=workloads, lenders=lenders, now=now
    )  # type: ignore[arg-type]


def test_a_cluster_tick_publishes_occupancy_waste_stranded_and_starts(rest: FakeRest) -> None:
    # n1 runs job 1 (8 GPUs), n3 is drained, n4 is lent to workload w1 (2 pods x 4
    # GPUs, admitted), job 2 waits for 3 whole nodes: only n2 is Slurm's and free.
    rest.nodes = [
        slurm_node("n1", "ALLOCATED"),
        slurm_node("n2"),
        slurm_node("n3", "IDLE", "DRAIN"),
        slurm_node("n4", "DOWN", "DRAIN"),
    ]
    rest.jobs = [
        job(1, "RUNNING", submit=900, start=950, nodes=("n1",), node_count=1, gpus_per_node=8),
        job(2, "PENDING", submit=990, node_count=3, gpus_per_node=8),
    ]
    nodes = fleet_nodes(lease="w1")
    lent = (workload("w1", created=980, admitted=990, pods=2, gpus=4),)
    tick(1000.0, nodes=nodes, workloads=lent)
    assert sample("slurmkube_goodput_occupancy_ratio") == pytest.approx(16 / 24)
    assert sample("slurmkube_goodput_stranded_gpus", domain="dom-a") == 8
    assert sample("slurmkube_goodput_stranded_gpus", domain="dom-b") is None  # nothing free
    assert sample("slurmkube_goodput_gpus", state="drained_down") == 8

    # Job 3 (one node) came at 1002 and started at 1005 on n2.
    rest.jobs.append(
        job(3, "RUNNING", submit=1002, start=1005, nodes=("n2",), node_count=1, gpus_per_node=8)
    )
    rest.nodes[1] = slurm_node("n2", "ALLOCATED")
    tick(1010.0, nodes=nodes, workloads=lent)
    seconds = "slurmkube_goodput_gpu_seconds_total"
    assert sample(seconds, state="allocated") == pytest.approx(16 * 10 + 8 * 5)
    assert sample(seconds, state="fragmentation") == pytest.approx(8 * 5)
    assert sample(seconds, state="drained_down") == pytest.approx(8 * 10)
    assert sample(seconds, state="idle") == 0
    assert sample(seconds, state="reserved_in_transfer") == 0
    assert sample("slurmkube_goodput_stranded_gpus", domain="dom-a") is None
    tts = "slurmkube_goodput_time_to_start_seconds"
    assert sample(f"{tts}_count", scheduler="slurm", gang_size="8-63") == 1
    assert sample(f"{tts}_sum", scheduler="slurm", gang_size="8-63") == 3
    assert sample(f"{tts}_count", scheduler="kueue", gang_size="8-63") is None  # before start
    assert sample("slurmkube_goodput_fair_share_ratio", team="physics") is not None
    assert sample("slurmkube_goodput_last_update_timestamp_seconds") == 1010.0

    # The same state again adds time, not jobs.
    tick(1020.0, nodes=nodes, workloads=lent)
    assert sample(f"{tts}_count", scheduler="slurm", gang_size="8-63") == 1
    assert sample(seconds, state="allocated") == pytest.approx(200 + 24 * 10)


def test_a_lent_node_is_reserved_until_its_workload_is_admitted(rest: FakeRest) -> None:
    rest.nodes = [slurm_node(n) for n in ("n1", "n2", "n3")] + [slurm_node("n4", "DOWN", "DRAIN")]
    pending = workload("w1", created=995, admitted=995, pods=2, gpus=4)
    pending["status"]["conditions"] = pending["status"]["conditions"][:1]  # quota only
    tick(1000.0, nodes=fleet_nodes(lease="w1"), workloads=(pending,))
    assert sample("slurmkube_goodput_gpus", state="reserved_in_transfer") == 8
    admitted = workload("w1", created=995, admitted=1003, pods=2, gpus=4)
    tick(1010.0, nodes=fleet_nodes(lease="w1"), workloads=(admitted,))
    assert sample("slurmkube_goodput_gpus", state="reserved_in_transfer") == 0
    assert sample("slurmkube_goodput_gpus", state="allocated") == 8
    count = "slurmkube_goodput_time_to_start_seconds_count"
    assert sample(count, scheduler="kueue", gang_size="8-63") is None  # created before start


def test_metric_names_units_and_labels_are_bounded() -> None:
    allowed = {"namespace", "cluster", "state", "domain", "scheduler", "gang_size", "team", "kind"}
    units = ("_total", "_seconds", "_ratio", "_gpus")
    found = []
    for collector in list(REGISTRY._collector_to_names):
        for family in collector.describe():
            if family.name.startswith("slurmkube_goodput_"):
                labels = set(getattr(collector, "_labelnames", ()))
                assert labels <= allowed, family.name
                assert family.name.endswith(units) or family.type == "counter", family.name
                found.append(family.name)
    assert sorted(found) == [
        "slurmkube_goodput_fair_share_ratio",
        "slurmkube_goodput_gpu_seconds",
        "slurmkube_goodput_gpus",
        "slurmkube_goodput_last_update_timestamp_seconds",
        "slurmkube_goodput_observe_errors",
        "slurmkube_goodput_occupancy_ratio",
        "slurmkube_goodput_stranded_gpus",
        "slurmkube_goodput_team_share_ratio",
        "slurmkube_goodput_time_to_start_seconds",
    ]


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("PENDING", (None, None)),
        ("RUNNING", (950.0, None)),
        ("COMPLETED", (950.0, 970.0)),
    ],
)
def test_slurm_job_times(state: str, expected: tuple[float | None, float | None]) -> None:
    ran = job(7, state, submit=900, start=950, nodes=("n1",), node_count=1, end_time=at(970))
    gang = slurm_gang(ran, now=1000.0)
    assert (gang.started, gang.ended) == expected
    assert gang.key == "slurm/7" and gang.team == "physics"


# --- stranded GPUs ------------------------------------------------------------------------


def free(domain: str, gpus: int = 8, owner: Side = S, **kw: Any) -> StrandNode:
    return StrandNode(domain, "fleet", owner, kw.get("transferable", False), gpus, gpus == 8, True)


STRANDED: dict[str, tuple[list[StrandNode], list[StrandGang], dict[str, int]]] = {
    "nothing queued strands nothing": ([free("a")], [], {"a": 0}),
    "a gang that fits uses every free node": (
        [free("a"), free("b")],
        [StrandGang("fleet", S, 2, 8, False)],
        {"a": 0, "b": 0},
    ),
    "a gang too big for the pool strands all": (
        [free("a"), free("b")],
        [StrandGang("fleet", S, 3, 8, False)],
        {"a": 8, "b": 8},
    ),
    "a single-domain gang strands the domains too small for it": (
        [free("a"), free("a"), free("b")],
        [StrandGang("fleet", S, 2, 8, True)],
        {"a": 0, "b": 8},
    ),
    "partly used nodes too small for a member are stranded": (
        [free("a", 4, K), free("b", 8, K)],
        [StrandGang("fleet", K, 1, 8, False)],
        {"a": 4, "b": 0},
    ),
    "pods share a node while its GPUs last": (
        [free("a", 8, K)],
        [StrandGang("fleet", K, 4, 2, True)],
        {"a": 0},
    ),
    "another side's queue strands nothing it cannot take": (
        [free("a", 4, K)],
        [StrandGang("fleet", S, 1, 4, False)],
        {"a": 0},
    ),
    "an empty transferable node serves the other side's queue": (
        [free("a", 8, K, transferable=True)],
        [StrandGang("fleet", S, 2, 8, False)],
        {"a": 8},
    ),
}


@pytest.mark.parametrize("name", list(STRANDED))
def test_stranded_gpus_per_domain(name: str) -> None:
    nodes, gangs, expected = STRANDED[name]
    assert stranded_by_domain(nodes, gangs) == expected


# --- Workloads as gangs -------------------------------------------------------------------


def test_workload_members_spread_over_its_lent_nodes() -> None:
    raw = workload("w1", created=980, admitted=990, pods=3, gpus=4)
    gang = kueue_gang(raw, CHECK, "ml", [("n2", 8), ("n1", 8)], now=1000.0)
    assert gang is not None
    assert (gang.members, gang.gpus_per_member, gang.side) == (3, 4, K)
    assert gang.nodes == ("n1", "n1", "n2")
    assert (gang.submitted, gang.started, gang.ended) == (980.0, 990.0, None)


def test_workload_with_pods_of_different_sizes_is_one_gpu_members() -> None:
    raw = workload("w1", created=980, admitted=990, pods=2, gpus=4)
    second = {**raw["spec"]["podSets"][0], "name": "workers", "count": 1}
    second["template"] = {
        "spec": {"containers": [{"resources": {"requests": {wk.RESOURCE_GPU: "2"}}}]}
    }
    raw["spec"]["podSets"].append(second)
    gang = kueue_gang(raw, CHECK, "ml", [("n1", 8), ("n2", 8)], now=1000.0)
    assert gang is not None
    assert (gang.members, gang.gpus_per_member, len(gang.nodes)) == (10, 1, 10)


@pytest.mark.parametrize(
    ("condition", "started", "ended"),
    [("Evicted", None, None), ("Finished", 990.0, 995.0)],
)
def test_workload_evicted_or_finished(
    condition: str, started: float | None, ended: float | None
) -> None:
    raw = workload("w1", created=980, admitted=990, pods=1, gpus=8)
    stamp = at(995).strftime("%Y-%m-%dT%H:%M:%SZ")
    raw["status"]["conditions"].append(
        {"type": condition, "status": "True", "lastTransitionTime": stamp}
    )
    gang = kueue_gang(raw, CHECK, "ml", [("n1", 8)], now=1000.0)
    assert gang is not None
    assert (gang.started, gang.ended) == (started, ended)


def test_workload_without_gpus_is_no_gang() -> None:
    raw = workload("w1", created=980, admitted=990, pods=1, gpus=0)
    assert kueue_gang(raw, CHECK, "ml", [], now=1000.0) is None


def test_fair_share_follows_the_policy_teams_and_namespaces(
    rest: FakeRest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # team-a (weight 2, namespace "team-a") and team-b (weight 1) hold a node each and
    # each wait for 4 more: 32 healthy GPUs are theirs 2:1. A third account uses a node.
    memory = policy_controller._Source(cluster_keys=("c1", 168), policy=two_teams())
    monkeypatch.setitem(policy_controller.SOURCES, ("ns", "fleet"), memory)
    rest.nodes = [
        slurm_node("n1", "ALLOCATED"),
        slurm_node("n2"),
        slurm_node("n3"),
        slurm_node("n4", "DOWN", "DRAIN"),
    ]
    rest.jobs = [
        job(
            1,
            "RUNNING",
            submit=900,
            start=950,
            nodes=("n1",),
            node_count=1,
            gpus_per_node=8,
            account="team-b",
        ),
        job(
            2,
            "RUNNING",
            submit=900,
            start=950,
            nodes=("n2",),
            node_count=1,
            gpus_per_node=8,
            account="other",
        ),
        job(3, "PENDING", submit=900, node_count=4, gpus_per_node=8, account="team-a"),
        job(4, "PENDING", submit=900, node_count=4, gpus_per_node=8, account="team-b"),
    ]
    lent = workload("w1", created=980, admitted=990, pods=1, gpus=8)
    lent["metadata"]["namespace"] = "team-a"
    tick(1000.0, nodes=fleet_nodes(lease="w1"), workloads=(lent,))
    tick(1100.0, nodes=fleet_nodes(lease="w1"), workloads=(lent,))
    share = "slurmkube_goodput_team_share_ratio"
    assert sample(share, team="team-a", kind="entitlement") == pytest.approx(2 / 3)
    assert sample(share, team="team-b", kind="entitlement") == pytest.approx(1 / 3)
    # "other" used a third of the GPU-seconds: its usage counts, it is owed nothing.
    assert sample(share, team="team-a", kind="usage") == pytest.approx(1 / 3)
    assert sample(share, team="other", kind="usage") is None
    assert sample("slurmkube_goodput_fair_share_ratio", team="team-b") == pytest.approx(1.0)
    assert sample("slurmkube_goodput_fair_share_ratio", team="team-a") == pytest.approx(0.5)


def test_a_new_clusters_fair_share_appears_one_entitlement_resolution_after_its_first_tick(
    rest: FakeRest,
) -> None:
    # The first tick shares the fleet with no team known yet; jobs come at 1010 and
    # the next sharing, by their demand, waits for the resolution to pass.
    rest.nodes = [slurm_node(n) for n in ("n1", "n2", "n3", "n4")]
    first, fair = 1000.0, "slurmkube_goodput_fair_share_ratio"
    seen = []
    for t in range(int(first), int(first + ENTITLEMENT_RESOLUTION_S) + 10, 2):
        if t == 1010:
            rest.jobs = [
                job(
                    1,
                    "RUNNING",
                    submit=1008,
                    start=1009,
                    nodes=("n1", "n2"),
                    node_count=2,
                    gpus_per_node=8,
                ),
                job(2, "PENDING", submit=1010, node_count=3, gpus_per_node=8),
            ]
            rest.nodes[:2] = [slurm_node("n1", "ALLOCATED"), slurm_node("n2", "ALLOCATED")]
        tick(float(t), nodes=fleet_nodes())
        seen.append((t, sample(fair, team="physics")))
    appeared = next(t for t, value in seen if value is not None)
    assert appeared == first + ENTITLEMENT_RESOLUTION_S + 2


def test_a_returned_node_is_reserved_until_slurm_has_it_up(rest: FakeRest) -> None:
    rest.nodes = [slurm_node(n) for n in ("n1", "n2", "n3")] + [slurm_node("n4", "DOWN", "DRAIN")]
    admitted = workload("w1", created=995, admitted=996, pods=1, gpus=8)
    tick(1000.0, nodes=fleet_nodes(lease="w1"), workloads=(admitted,))
    assert sample("slurmkube_goodput_gpus", state="allocated") == 8
    # The workload is gone and its lease with it; slurmd is not back yet.
    tick(1010.0, nodes=fleet_nodes())
    assert sample("slurmkube_goodput_gpus", state="reserved_in_transfer") == 8
    assert sample("slurmkube_goodput_gpus", state="drained_down") == 0
    rest.nodes[3] = slurm_node("n4")
    tick(1020.0, nodes=fleet_nodes())
    assert sample("slurmkube_goodput_gpus", state="reserved_in_transfer") == 0
    assert sample("slurmkube_goodput_gpus", state="idle") == 32
    seconds = "slurmkube_goodput_gpu_seconds_total"
    assert sample(seconds, state="reserved_in_transfer") == pytest.approx(8 * 10)


# --- a lend timed by the operator's handovers ---------------------------------------

# Each way within one 5 s tick: lent and admitted between 1000 and 1005, finished,
# lease ended and back between 1030 and 1035.
LENT_AT, ADMITTED_AT, FINISHED_AT, ENDED_AT, BACK_AT = 1001.2, 1004.0, 1031.0, 1031.6, 1034.3


def _lend_world(t: float) -> tuple[dict[str, Any], tuple[dict[str, Any], ...], list[Handover]]:
    """n4 lent to w1 (one 8-GPU pod) as the operator made it, seen at time `t`: the
    Nodes, the Workload and the handovers recorded by then; Slurm's side in `rest`."""
    raw = workload("w1", created=1001, admitted=ADMITTED_AT, pods=1, gpus=8)
    conditions = raw["status"]["conditions"]
    if t < ADMITTED_AT:
        del conditions[1:]
    if t >= FINISHED_AT:
        stamp = at(FINISHED_AT).strftime("%Y-%m-%dT%H:%M:%SZ")
        conditions.append({"type": "Finished", "status": "True", "lastTransitionTime": stamp})
    recorded = [
        Handover(LENT_AT, "n4", LENT, "w1"),
        Handover(ENDED_AT, "n4", LEASE_ENDED, "w1"),
        Handover(BACK_AT, "n4", BACK, "w1"),
    ]
    lent = LENT_AT <= t < ENDED_AT
    return fleet_nodes(lease="w1" if lent else ""), (raw,), [h for h in recorded if h.t <= t]


def test_a_lends_transfers_are_timed_by_the_handovers_and_agree_with_the_offline_recompute(
    rest: FakeRest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ticks every 5 s see a lend's label, admission, finish, lease end and undrain;
    the exporter's GPU-seconds by state are those `slurmkube goodput` recomputes from
    the final records and the handover Events, to the microsecond, not to the tick."""
    job_1 = dict(submit=1000.5, nodes=("n1", "n2"), node_count=2, gpus_per_node=8)
    for t in [1000.0 + 5 * i for i in range(13)]:
        nodes, workloads, recorded = _lend_world(t)
        drained = LENT_AT <= t < BACK_AT
        rest.nodes = [slurm_node(n) for n in ("n1", "n2", "n3")]
        rest.nodes.append(slurm_node("n4", "DOWN", "DRAIN") if drained else slurm_node("n4"))
        state = "RUNNING" if t < 1050 else "COMPLETED"
        rest.jobs = [job(1, state, start=1001, end_time=at(1050) if t >= 1050 else None, **job_1)]
        monkeypatch.setattr(exporter.handovers, "LAST", {"n4": {h.kind: h for h in recorded}})
        tick(t, nodes=nodes, workloads=workloads)
    seconds = "slurmkube_goodput_gpu_seconds_total"
    live = {s: sample(seconds, state=s) or 0.0 for s in STATES.values()}
    # In whole seconds, rounded down, as Slurm's and Kueue's own times.
    lend, back = ADMITTED_AT - int(LENT_AT), int(BACK_AT) - FINISHED_AT
    assert live["reserved_in_transfer"] == pytest.approx(8 * (lend + back))
    _, workloads, recorded = _lend_world(1060.0)
    final = [slurm_gang(j, 1060.0) for j in rest.jobs]
    final.append(kueue_gang(workloads[0], CHECK, "ml", [("n4", 8)], now=1060.0))  # type: ignore[arg-type]
    fleet = [LiveNode(n, 8, transferable=True) for n in ("n1", "n2", "n3", "n4")]
    offline = recompute(fleet, final, (1000.0, 1060.0), handovers=recorded)
    assert offline.gpu_seconds == pytest.approx(live)


def test_lending_switched_on_makes_the_nodes_transferable(rest: FakeRest) -> None:
    """A Workload waiting under a check that lends from the cluster can use its empty
    Slurm nodes, so they are fragmentation, not idle, from the tick that sees the
    check (the ledger knows a node's transferability from when it joined)."""
    rest.nodes = [slurm_node(n) for n in ("n1", "n2", "n3", "n4")]
    waiting = workload("w1", created=1005, admitted=1005, pods=1, gpus=8)
    waiting["status"]["conditions"] = waiting["status"]["conditions"][:1]  # quota only
    tick(1000.0, nodes=fleet_nodes(), workloads=(waiting,), lends=False)
    tick(1010.0, nodes=fleet_nodes(), workloads=(waiting,), lends=False)
    seconds = "slurmkube_goodput_gpu_seconds_total"
    assert sample(seconds, state="idle") == pytest.approx(32 * 10)
    tick(1020.0, nodes=fleet_nodes(), workloads=(waiting,))
    tick(1030.0, nodes=fleet_nodes(), workloads=(waiting,))
    assert sample(seconds, state="idle") == pytest.approx(32 * 10)
    assert sample(seconds, state="fragmentation") == pytest.approx(32 * 20)


def test_a_handover_does_not_push_a_later_seen_admission_off_its_own_time(
    rest: FakeRest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lent at 1003.6, admitted at 1003.8 (Kueue says 1003), the admission seen a tick
    later than the label: the handover counts in whole seconds as Kueue's times do,
    so the workload's start stays at 1003 (a precise 1003.6 would have moved it)."""
    rest.nodes = [slurm_node(n) for n in ("n1", "n2", "n3", "n4")]
    lent = Handover(1003.6, "n4", LENT, "w1")
    for clock in (1000.0, 1002.0, 1004.0, 1006.0, 1008.0, 1010.0):
        raw = workload("w1", created=1001, admitted=1003, pods=1, gpus=8)
        if clock < 1006:  # the Workload cache has the admission from the tick at 1006
            del raw["status"]["conditions"][1:]
        labelled = clock >= lent.t
        monkeypatch.setattr(exporter.handovers, "LAST", {"n4": {LENT: lent}} if labelled else {})
        nodes = fleet_nodes(lease="w1" if labelled else "")
        tick(clock - 1.0, nodes=nodes, workloads=(raw,))  # the exporter's one-second lag
    seconds = "slurmkube_goodput_gpu_seconds_total"
    assert sample(seconds, state="allocated") == pytest.approx(8 * (1009 - 1003))
    assert sample(seconds, state="reserved_in_transfer") == 0
