"""Live goodput on a real Prometheus: Debian's prometheus on loopback scrapes the
operator's /metrics every 2 s and evaluates the chart's goodput rules; PromQL
then finds occupancy, GPU-seconds by state, stranded GPUs per NVLink domain and
the time-to-start histogram of a Slurm job mix on the operator's pods.
"""

from __future__ import annotations

import functools
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from slurmkube.goodput.ledger import ENTITLEMENT_RESOLUTION_S
from slurmkube.goodput.node_history import SACCTMGR_ARGV, TIME_FORMAT, parse_events
from slurmkube_e2e.accounting import accounted_cluster
from slurmkube_e2e.demo_goodput import http_get
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.lending import (
    GPUS_PER_NODE,
    KUEUE,
    LEASE,
    gpu_job,
    lending_cluster,
    slurm_states,
)
from slurmkube_e2e.mariadb import MariaDB
from slurmkube_e2e.namespaces import delete_namespace
from slurmkube_e2e.operator import OperatorProcess, host_operator_env
from slurmkube_e2e.operator_cluster import (
    API,
    SAMPLE_REPLICAS,
    deployed_only,
    docs,
    in_ctld,
    ready_cluster,
    slurm_node,
    wait_job,
)
from slurmkube_e2e.operator_identity import operator_kubeconfig
from slurmkube_e2e.waiting import has_condition, wait_for, wait_gone

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "helm" / "slurmkube" / "files" / "goodput-rules.yaml"
DASHBOARD = ROOT / "helm" / "slurmkube" / "files" / "goodput-dashboard.json"
STARTED = "Activity 'startup' succeeded"
# The fair-share panel's series comes last: the ledger shares the fleet by the
# teams' demand at most once per ENTITLEMENT_RESOLUTION_S and did so first at the
# cluster's first tick, before any job, so the series appears a resolution and a
# tick or two after that tick. On real nodes the jobs start at once and the test
# reaches the panels within seconds of that tick.
PANEL_TIMEOUT_S = ENTITLEMENT_RESOLUTION_S + 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(what: str, probe: Callable[[], object], timeout: float = 120) -> object:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(1)
    raise AssertionError(f"{what}: still {last!r} after {timeout} s")


@pytest.fixture
def exporter(
    operator: OperatorProcess, kubeconfig: Path, namespace: str, tmp_path: Path
) -> Iterator[int]:
    """An operator serving /metrics, with its Lease in the test namespace and the
    exporter ticking every 2 s; the session's operator is stopped meanwhile (it
    would act on the same SlurmCluster). Yields the metrics port."""
    operator.stop()
    port = free_port()
    env = {
        **os.environ,
        **host_operator_env(
            operator_kubeconfig(kubeconfig, namespace, tmp_path), "e2e-goodput", namespace
        ),
        "SLURMKUBE_GOODPUT_SECONDS": "2",
    }
    own = OperatorProcess(env, tmp_path / "operator.log", ["--metrics-port", str(port)])
    own.start()
    try:
        wait_until("operator started", lambda: STARTED in own.tail(10**7), timeout=120)
        yield port
    finally:
        own.stop()
        operator.start()


def _delete_leased_namespace(kube: Kube, namespace: str) -> None:
    """The SlurmCluster first, while the exporter's operator still leads: its Lease
    is in this namespace, and once the namespace controller deleted it the operator
    would stop leading and never finish the cluster's finalizer."""
    kube.delete(API, "SlurmCluster", "local", namespace=namespace)
    wait_gone(kube, API, "SlurmCluster", "local", namespace=namespace, timeout=180)
    delete_namespace(kube, namespace)


@pytest.fixture
def prometheus(exporter: int, tmp_path: Path) -> Iterator[str]:
    """Debian's prometheus on loopback, scraping the operator; yields its URL."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus not found: run `make promtool` (Debian's prometheus package)")
    port = free_port()
    config = {
        "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {"job_name": "slurmkube", "static_configs": [{"targets": [f"127.0.0.1:{exporter}"]}]}
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until("prometheus ready", lambda: http_get(f"{url}/-/ready") is not None, timeout=60)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def query(url: str, promql: str) -> dict[tuple[tuple[str, str], ...], float]:
    """An instant query: each series' labels (without __name__) -> its value."""
    body = http_get(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
    if body is None:
        return {}
    data = json.loads(body)["data"]["result"]
    return {
        tuple(sorted((k, v) for k, v in r["metric"].items() if k != "__name__")): float(
            r["value"][1]
        )
        for r in data
    }


def scalar(url: str, promql: str) -> float | None:
    found = query(url, promql)
    return next(iter(found.values())) if len(found) == 1 else None


# In `make e2e-extended` for CI's warm budget (its longest e2e tests).
@pytest.mark.extended
def test_prometheus_reads_occupancy_waste_stranded_and_time_to_start(
    kube: Kube, namespace: str, prometheus: str
) -> None:
    try:
        for doc in docs(namespace):
            kube.apply(doc)
        ready_cluster(kube, namespace)
        # Two of the four deployed 4-GPU nodes run a 2-node job; a 3-node gang then
        # waits (kept off the powered-down CLOUD nodes, `deployed_only`, which Slurm
        # would try to resume): the two free nodes are stranded, too few for it.
        deployed = ("--gres=gpu:4", *deployed_only(), "--wrap")
        ns = f'namespace="{namespace}"'
        # The exporter counts a gang's time to start only when it was submitted
        # after its first tick (a series of this cluster in Prometheus).
        wait_until(
            "the exporter's first tick",
            lambda: scalar(prometheus, f"slurmkube_goodput_occupancy_ratio{{{ns}}}") is not None,
        )
        running = in_ctld(namespace, "sbatch", "--parsable", "-N2", *deployed, "sleep 300")
        wait_job(namespace, running.strip(), {"RUNNING"})
        waiting = in_ctld(namespace, "sbatch", "--parsable", "-N3", *deployed, "sleep 10")
        wait_job(namespace, waiting.strip(), {"PENDING"})

        occupancy = wait_until(
            "occupancy of the job's 8 of 16 GPUs",
            lambda: scalar(prometheus, f"slurmkube_goodput_occupancy_ratio{{{ns}}}") == 0.5,
        )
        assert occupancy
        stranded = f"sum(slurmkube_goodput_stranded_gpus{{{ns}}})"
        wait_until("8 stranded GPUs", lambda: scalar(prometheus, stranded) == 8)
        allocated = f'slurmkube_goodput_gpu_seconds_total{{{ns},state="allocated"}}'
        wait_until("allocated GPU-seconds", lambda: (scalar(prometheus, allocated) or 0) > 0)
        wasted = query(prometheus, f"slurmkube_goodput_gpu_seconds_total{{{ns}}}")
        states = {dict(labels)["state"] for labels in wasted}
        assert states == {
            "allocated",
            "idle",
            "fragmentation",
            "reserved_in_transfer",
            "drained_down",
        }
        started = (
            f'slurmkube_goodput_time_to_start_seconds_count{{{ns},scheduler="slurm",'
            f'gang_size="8-63"}}'
        )
        assert scalar(prometheus, started) == 1
        recorded = f"namespace_cluster:slurmkube_goodput_occupancy:ratio_rate5m{{{ns}}}"
        rate = wait_until("the recorded occupancy", lambda: scalar(prometheus, recorded))
        assert 0 < float(rate) <= 1  # type: ignore[arg-type]
        # Every panel of the chart's dashboard answers, and finds series.
        board = json.loads(DASHBOARD.read_text())
        for panel in board["panels"]:
            for target in panel["targets"]:
                answers = functools.partial(query, prometheus, target["expr"])
                wait_until(panel["title"], answers, timeout=PANEL_TIMEOUT_S)
        in_ctld(namespace, "scancel", running.strip(), waiting.strip())
    finally:
        _delete_leased_namespace(kube, namespace)


# --- live vs offline ------------------------------------------------------------------

GOODPUT_SEED = int(os.environ.get("SLURMKUBE_GOODPUT_SEED", "7"))
LENDERS = sorted(slurm_node(i) for i in range(4))  # one NVLink block (lending_cluster)
STATES = ("allocated", "idle", "fragmentation", "reserved_in_transfer", "drained_down")


def _exporter_reading(port: int, namespace: str) -> dict[str, float]:
    """The cluster's goodput counters as one tick left them: read until two reads agree
    (a tick publishing mid-read would mix two ticks), keyed by state and bucket."""
    from prometheus_client.parser import text_string_to_metric_families

    def read() -> dict[str, float]:
        body = http_get(f"http://127.0.0.1:{port}/metrics") or b""
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(body.decode()):
            for s in family.samples:
                if s.labels.get("namespace") != namespace:
                    continue
                if s.name == "slurmkube_goodput_gpu_seconds_total":
                    out[s.labels["state"]] = s.value
                elif s.name == "slurmkube_goodput_last_update_timestamp_seconds":
                    out["at"] = s.value
                elif s.name.startswith("slurmkube_goodput_time_to_start_seconds_"):
                    kind = s.name.rsplit("_", 1)[1]
                    if kind in ("count", "sum"):  # both schedulers': the recompute pools them
                        key = f"tts.{s.labels['gang_size']}.{kind}"
                        out[key] = out.get(key, 0.0) + s.value
        return out

    first = read()
    while (second := read()) != first:
        time.sleep(0.3)
        first = second
    return second


def _job_mix(seed: int) -> list[tuple[int, int, int, float]]:
    """(nodes, GPUs per node, seconds, pause before submitting) per job: a queue deep
    enough that gangs wait and free GPUs strand, over about two minutes."""
    rng = random.Random(seed)
    return [
        (rng.randint(1, 4), rng.choice([1, 2, 4]), rng.randint(20, 45), rng.choice([0, 0, 3, 8]))
        for _ in range(8)
    ]


@pytest.mark.extended
def test_live_figures_equal_the_offline_recompute_from_slurms_records(
    kube: Kube, namespace: str, exporter: int, tmp_path: Path
) -> None:
    """A seeded Slurm job mix: the exporter's counters over the window equal
    `slurmkube goodput` recomputed from Slurm's job and node lists, within 2% (or one
    second of the fleet's GPUs: Slurm reports whole seconds)."""
    try:
        for doc in docs(namespace):
            kube.apply(doc)
        ready_cluster(kube, namespace)
        wait_until(
            "the exporter's first tick", lambda: "at" in _exporter_reading(exporter, namespace)
        )
        before = _exporter_reading(exporter, namespace)
        jobs = []
        for nodes, gpus, seconds, pause in _job_mix(GOODPUT_SEED):
            time.sleep(pause)
            argv = (f"-N{nodes}", f"--gres=gpu:{gpus}", *deployed_only())
            jobs.append(
                in_ctld(
                    namespace, "sbatch", "--parsable", *argv, "--wrap", f"sleep {seconds}"
                ).strip()
            )
        for job in jobs:
            wait_job(namespace, job, {"COMPLETED"}, timeout=600)
        after = _close_window(exporter, namespace, tmp_path)
        _assert_live_equals_offline(tmp_path, before, after, {"jobs": len(jobs)})
    finally:
        _delete_leased_namespace(kube, namespace)


@pytest.mark.extended
def test_live_figures_equal_the_offline_recompute_with_a_node_drained_from_slurmdbd(
    kube: Kube, exporter: int, database: MariaDB, tmp_path: Path
) -> None:
    """The seeded Slurm job mix on a cluster with accounting, one node drained from the
    first submission to the sixth: the exporter counts the drain from Slurm's reason
    time, and `slurmkube goodput` from slurmdbd's node events (`sacctmgr list event`);
    the two agree within 2%, drained GPU-seconds included."""
    with accounted_cluster(kube, database, "e2e-goodhealth", replicas=SAMPLE_REPLICAS) as ns:
        # The recompute takes the nodes as present the whole window: it opens on a
        # tick after every slurmd registered (Slurm powers the CLOUD nodes up first).
        wait_until("every slurmd registered", lambda: _all_up(ns))
        registered = time.time()
        wait_until(
            "a tick after", lambda: _exporter_reading(exporter, ns).get("at", 0) > registered
        )
        before = _exporter_reading(exporter, ns)
        drained = slurm_node(SAMPLE_REPLICAS - 1)
        jobs = []
        for i, (nodes, gpus, seconds, pause) in enumerate(_job_mix(GOODPUT_SEED)):
            time.sleep(pause)
            if i == 0:  # idle, so drained at once (slurmdbd records DRAINED, not DRAINING)
                in_ctld(ns, "scontrol", "update", f"nodename={drained}", "state=drain",
                        "reason=e2e goodput drain")  # fmt: skip
            argv = (f"-N{nodes}", f"--gres=gpu:{gpus}", *deployed_only())
            jobs.append(
                in_ctld(ns, "sbatch", "--parsable", *argv, "--wrap", f"sleep {seconds}").strip()
            )
            if i == 5:
                in_ctld(ns, "scontrol", "update", f"nodename={drained}", "state=resume")
        for job in jobs:
            wait_job(ns, job, {"COMPLETED"}, timeout=600)
        after = _close_window(exporter, ns, tmp_path)
        events = wait_until(
            "slurmdbd's record of the drain, ended",
            lambda: _node_events(ns, drained),
            timeout=120,
        )
        (tmp_path / "node-events.txt").write_text(str(events))
        assert after["drained_down"] > before["drained_down"]
        _assert_live_equals_offline(tmp_path, before, after, {"jobs": len(jobs)})


def _all_up(namespace: str) -> bool:
    states = slurm_states(namespace, [slurm_node(i) for i in range(SAMPLE_REPLICAS)])
    return len(states) == SAMPLE_REPLICAS and set(states.values()) == {"idle"}


def _node_events(namespace: str, drained: str) -> str:
    """slurmdbd's node events once it holds the drain's end (records reach it
    asynchronously); "" until then."""
    listed = in_ctld(namespace, "env", f"SLURM_TIME_FORMAT={TIME_FORMAT}", *SACCTMGR_ARGV)
    ended = [
        o
        for o in parse_events(listed)
        if o.node == drained and o.end is not None and not o.powered_down
    ]
    return listed if ended else ""


def _close_window(port: int, namespace: str, records: Path) -> dict[str, float]:
    """The exporter's reading at its first tick after now (the window's end), and
    Slurm's job and node lists written into `records`."""
    ended = time.time()
    wait_until("a tick after the mix", lambda: _exporter_reading(port, namespace)["at"] > ended + 1)
    after = _exporter_reading(port, namespace)
    for what in ("job", "node"):
        listed = in_ctld(namespace, "scontrol", "show", what, "--json")
        (records / f"{what}s.json").write_text(listed)
    return after


def _assert_live_equals_offline(
    records: Path, before: dict[str, float], after: dict[str, float], mix: dict[str, int]
) -> None:
    """The exporter's counters between two readings against `slurmkube goodput` over
    the same window from the records in `records`: every GPU-second state and the
    occupancy within 2% (or one second of the fleet's GPUs: Slurm and Kueue report
    whole seconds), per gang-size bucket the same starts and summed waits."""
    argv = ["--from", str(before["at"]), "--to", str(after["at"])]
    for name in ("jobs", "nodes", "workloads", "events"):
        if (records / f"{name}.json").exists():
            argv += [f"--{name}", str(records / f"{name}.json")]
    if (records / "check").exists():
        argv += ["--check", (records / "check").read_text()]
    if (records / "node-events.txt").exists():
        argv += ["--node-events", str(records / "node-events.txt")]
    recomputed = subprocess.run(
        [sys.executable, "-m", "slurmkube.cli", "goodput", *argv],
        capture_output=True,
        text=True,
        check=True,
    )
    offline = json.loads(recomputed.stdout)
    live = {state: after[state] - before[state] for state in STATES}
    second = 16.0  # one second of four 4-GPU nodes
    figures = {"live": live, "offline": offline["gpu_seconds"], "waits": offline["waits_s"]}
    print(json.dumps({"seed": GOODPUT_SEED, **mix, **figures}, sort_keys=True))
    for state in STATES:
        assert live[state] == pytest.approx(offline["gpu_seconds"][state], rel=0.02, abs=second), (
            state
        )
    healthy = sum(live[s] for s in STATES if s != "drained_down")
    assert live["allocated"] / healthy == pytest.approx(offline["occupancy"], rel=0.02)
    for bucket, waits in offline["waits_s"].items():
        count = after.get(f"tts.{bucket}.count", 0) - before.get(f"tts.{bucket}.count", 0)
        total = after.get(f"tts.{bucket}.sum", 0) - before.get(f"tts.{bucket}.sum", 0)
        assert count == len(waits), bucket
        assert total == pytest.approx(sum(waits), rel=0.02, abs=len(waits)), bucket


def _lending_mix(seed: int) -> list[tuple[str, int, int, int, float]]:
    """(scheduler, members, GPUs per member, seconds, pause before submitting): five
    Slurm jobs and three Kueue jobs of whole 4-GPU pods, in a seeded order, so Slurm's
    queue and the workloads contend for the block's four nodes."""
    rng = random.Random(seed)
    kinds = ["slurm"] * 5 + ["kueue"] * 3
    rng.shuffle(kinds)
    return [
        (
            kind,
            rng.randint(1, 2),
            GPUS_PER_NODE if kind == "kueue" else rng.choice([2, 4]),
            rng.randint(20, 40),
            rng.choice([0, 0, 3, 8]),
        )
        for kind in kinds
    ]


@pytest.mark.extended
def test_live_figures_equal_the_offline_recompute_with_kueue_borrowing_slurm_nodes(
    kube: Kube, exporter: int, tmp_path: Path
) -> None:
    """A seeded mix of Slurm jobs and Kueue workloads on one NVLink block, the bridge
    lending nodes (Kubernetes entitled to two): the exporter's counters over the
    window equal `slurmkube goodput` recomputed from Slurm's job and node lists, the
    Workloads and the operator's handover Events, within 2%."""
    with lending_cluster(kube, "e2e-goodlend") as bridge:
        ns = bridge.namespace
        kube.patch(API, "SlurmReservationCheck", bridge.check, {"spec": {"entitledNodes": 2}})
        lending_on = time.time()
        # The first tick that sees the check restarts the cluster's ledger with its
        # nodes transferable; the window opens after it.
        wait_until(
            "a tick with lending on",
            lambda: _exporter_reading(exporter, ns).get("at", 0) > lending_on,
        )
        before = _exporter_reading(exporter, ns)
        jobs, workloads = [], []
        for i, (kind, members, gpus, seconds, pause) in enumerate(_lending_mix(GOODPUT_SEED)):
            time.sleep(pause)
            if kind == "kueue":
                workloads.append(f"mix-{i}")
                kube.create(gpu_job(f"mix-{i}", pods=members, seconds=seconds), namespace=ns)
                continue
            argv = (f"-N{members}", f"--gres=gpu:{gpus}", "-t", "1", "--wrap")
            jobs.append(in_ctld(ns, "sbatch", "--parsable", *argv, f"sleep {seconds}").strip())
        for job in jobs:
            wait_job(ns, job, {"COMPLETED"}, timeout=600)
        for name in workloads:
            wait_for(kube, "batch/v1", "Job", name, lambda j: has_condition(j, "Complete"),
                     namespace=ns, timeout=600)  # fmt: skip
        # Every lent node back in Slurm: the window closes with no transfer open.
        wait_until(
            "every lent node back in Slurm",
            lambda: (
                not kube.list("v1", "Node", label_selector=LEASE)
                and set(slurm_states(ns, LENDERS).values()) == {"idle"}
            ),
            timeout=180,
        )
        after = _close_window(exporter, ns, tmp_path)
        for name, kind_api in (("workloads", (KUEUE, "Workload")), ("events", ("v1", "Event"))):
            items = kube.list(*kind_api, namespace=ns)
            (tmp_path / f"{name}.json").write_text(json.dumps({"items": items}))
        (tmp_path / "check").write_text(bridge.check)
        lent = [e for e in kube.list("v1", "Event", namespace=ns) if e.get("reason") == "Lent"]
        assert lent, "the mix borrowed no Slurm node"
        _assert_live_equals_offline(
            tmp_path, before, after, {"jobs": len(jobs), "workloads": len(workloads)}
        )
