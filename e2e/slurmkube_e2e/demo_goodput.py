"""The demo's goodput on a real Prometheus: Debian's `prometheus` scrapes the demo
operator's /metrics, a short job mix runs on the demo cluster, and the exporter's
series over that window become `goodput.png` in the demo's folder (the picture in
docs/goodput.md is one such run) and a few PromQL answers on the terminal.
"""

from __future__ import annotations

import json
import random
import shutil
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from slurmkube_e2e import processes
from slurmkube_e2e.layout import LOOPBACK, Layout

SCRAPE_SECONDS = 2
# The demo's exporter ticks every 5 s (15 s by default) so a two-minute mix draws a line.
GOODPUT_SECONDS = "5"
STATE_ORDER = ("allocated", "fragmentation", "idle", "reserved_in_transfer", "drained_down")
# Slurm 25.11+'s own OpenMetrics, on slurmctld's port (metrics.html, "HTTP Endpoints").
SLURM_ENDPOINTS = ("jobs", "jobs-users-accts", "nodes", "partitions", "scheduler")
SLURM_TARGETS = "slurmctld-targets.json"


def prometheus_process(layout: Layout, demo_dir: Path) -> processes.Process:
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    return processes.Process(
        name="demo-prometheus",
        argv=(
            binary,
            f"--config.file={demo_dir / 'prometheus.yml'}",
            f"--storage.tsdb.path={demo_dir / 'tsdb'}",
            f"--web.listen-address={LOOPBACK}:{layout.ports.demo_prometheus}",
        ),
        pid_dir=layout.pids,
        log_dir=layout.logs,
    )


def start_prometheus(layout: Layout, demo_dir: Path, target: str) -> str:
    """Prometheus scraping the operator pod's /metrics (`target`, host:port) every 2 s,
    and slurmctld's endpoints once `scrape_slurmctld` names its pod; its URL once it
    is ready. Static and file targets: Debian's Prometheus is built without
    Kubernetes service discovery, and the host reaches pod addresses."""
    targets = demo_dir / SLURM_TARGETS
    slurm_jobs = [
        {
            "job_name": f"slurmctld-{endpoint}",
            "metrics_path": f"/metrics/{endpoint}",
            "file_sd_configs": [{"files": [str(targets)]}],
        }
        for endpoint in SLURM_ENDPOINTS
    ]
    config = {
        "global": {"scrape_interval": f"{SCRAPE_SECONDS}s"},
        "scrape_configs": [
            {"job_name": "slurmkube", "static_configs": [{"targets": [target]}]},
            *slurm_jobs,
        ],
    }
    demo_dir.mkdir(parents=True, exist_ok=True)
    targets.write_text("[]\n")
    (demo_dir / "prometheus.yml").write_text(yaml.safe_dump(config))
    processes.start(prometheus_process(layout, demo_dir))
    url = f"http://{LOOPBACK}:{layout.ports.demo_prometheus}"
    deadline = time.monotonic() + 60
    while http_get(f"{url}/-/ready") is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"prometheus not ready at {url}; see {layout.logs}")
        time.sleep(0.5)
    return url


def scrape_slurmctld(demo_dir: Path, target: str) -> None:
    """Point the slurmctld scrape jobs at `target` (pod address:6817); Prometheus
    watches the file."""
    (demo_dir / SLURM_TARGETS).write_text(json.dumps([{"targets": [target]}]) + "\n")


def slurm_metrics(url: str, timeout: float = 60) -> str:
    """Slurm's own metrics as Prometheus scraped them: each endpoint's `up`, and the
    GPU series slurmctld exports (summed per name). Raises when an endpoint is down
    or no GPU series came in `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        up = {r["metric"]["job"]: float(r["value"][1]) for r in _query(url, "query", query=_UP)}
        gpus = {
            r["metric"]["__name__"]: float(r["value"][1])
            for r in _query(url, "query", query=_GPU_SERIES)
        }
        if (len(up) == len(SLURM_ENDPOINTS) and all(up.values()) and gpus) or (
            time.monotonic() > deadline
        ):
            break
        time.sleep(SCRAPE_SECONDS)
    if len(up) != len(SLURM_ENDPOINTS) or not all(up.values()) or not gpus:
        raise RuntimeError(f"slurmctld's metrics not scraped: up {up}, GPU series {gpus}")
    series = {r["metric"]["job"]: float(r["value"][1]) for r in _query(url, "query", query=_SERIES)}
    lines = [
        "up: " + ", ".join(f"{job} {value:.0f}" for job, value in sorted(up.items())),
        "series: " + ", ".join(f"{job} {value:.0f}" for job, value in sorted(series.items())),
        *(f"{name}: {value:g}" for name, value in sorted(gpus.items())),
    ]
    if not any(gpus.values()):
        lines.append(
            "(Slurm counts GPUs here only as a tracked TRES, which needs accounting: "
            "spec.accounting renders AccountingStorageTRES=gres/gpu)"
        )
    return "\n".join(lines)


_UP = 'up{job=~"slurmctld-.*"}'
_SERIES = 'count by (job) ({job=~"slurmctld-.*"})'
_GPU_SERIES = 'sum by (__name__) ({job=~"slurmctld-.*", __name__=~"slurm_.*gpus.*"})'


def http_get(url: str) -> bytes | None:
    """The body of a GET on loopback; None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return bytes(resp.read())
    except OSError:
        return None


def _query(url: str, path: str, **params: str) -> list[dict[str, Any]]:
    body = http_get(f"{url}/api/v1/{path}?{urllib.parse.urlencode(params)}")
    if body is None:
        return []
    return list(json.loads(body)["data"]["result"])


def run_mix(in_ctld: Callable[..., str], seed: int = 1) -> list[str]:
    """Eight jobs of 1-4 nodes, 2 or 4 GPUs each, for 15-40 s, some submitted together,
    so gangs queue and free GPUs strand."""
    rng = random.Random(seed)
    jobs = []
    for _ in range(8):
        nodes, gpus, seconds = rng.randint(1, 4), rng.choice([2, 4]), rng.randint(15, 40)
        shape = (f"-N{nodes}", f"--gres=gpu:{gpus}")
        argv = ("sbatch", "--parsable", *shape, "--wrap", f"sleep {seconds}")
        jobs.append(in_ctld(*argv).strip())
        time.sleep(rng.choice([0, 0, 5, 10]))
    return jobs


def _counters(url: str, promql: str, label: str, at: float) -> dict[str, float]:
    return {
        r["metric"].get(label, ""): float(r["value"][1])
        for r in _query(url, "query", query=promql, time=str(at))
    }


def report(url: str, namespace: str, start: float, end: float, png: Path) -> str:
    """The window's occupancy, GPU-seconds by state and gangs started, as differences of
    the counters at its ends (PromQL's increase() misses a series born inside the
    window: a gang-size bucket's first start); and the PNG of GPUs by state, stranded
    GPUs and occupancy over it."""
    sel = f'namespace="{namespace}"'
    seconds = f"slurmkube_goodput_gpu_seconds_total{{{sel}}}"
    starts = f"sum(slurmkube_goodput_time_to_start_seconds_count{{{sel}}})"
    before, after = (_counters(url, seconds, "state", t) for t in (start, end))
    by_state = {k: v - before.get(k, 0.0) for k, v in after.items()}
    started = sum(_counters(url, starts, "", end).values()) - sum(
        _counters(url, starts, "", start).values()
    )
    healthy = sum(v for k, v in by_state.items() if k != "drained_down")
    occupancy = f"{by_state.get('allocated', 0.0) / healthy:.2f}" if healthy else "n/a"
    _plot(url, sel, start, end, png)
    return "\n".join(
        [
            f"occupancy over the window: {occupancy}",
            "GPU-seconds by state: "
            + ", ".join(f"{k} {by_state.get(k, 0.0):.0f}" for k in STATE_ORDER),
            f"gangs started: {started:.0f}",
            f"plot: {png}",
        ]
    )


def _plot(url: str, sel: str, start: float, end: float, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    step = str(SCRAPE_SECONDS)
    rng = {"start": str(start), "end": str(end), "step": step}
    gpus = {
        r["metric"]["state"]: r["values"]
        for r in _query(url, "query_range", query=f"slurmkube_goodput_gpus{{{sel}}}", **rng)
    }
    occupancy = _query(
        url, "query_range", query=f"slurmkube_goodput_occupancy_ratio{{{sel}}}", **rng
    )
    stranded = _query(
        url, "query_range", query=f"sum(slurmkube_goodput_stranded_gpus{{{sel}}})", **rng
    )
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=100)
    states = [s for s in STATE_ORDER if s in gpus]
    if states:
        times = [float(t) - start for t, _ in gpus[states[0]]]
        series = [[float(v) for _, v in gpus[s]] for s in states]
        ax.stackplot(times, series, labels=states, alpha=0.8)
    if stranded:
        points = stranded[0]["values"]
        xs, ys = [float(t) - start for t, _ in points], [float(v) for _, v in points]
        ax.plot(xs, ys, "k--", label="stranded GPUs")
    ax.set_xlabel("seconds since the job mix began")
    ax.set_ylabel("GPUs")
    ax.legend(loc="upper left", fontsize=8)
    if occupancy:
        right = ax.twinx()
        right.plot(
            [float(t) - start for t, _ in occupancy[0]["values"]],
            [float(v) for _, v in occupancy[0]["values"]],
            color="tab:red",
            label="occupancy",
        )
        right.set_ylim(0, 1.05)
        right.set_ylabel("occupancy (allocated / healthy)")
        right.legend(loc="upper right", fontsize=8)
    ax.set_title("slurmkube demo: live goodput from Prometheus (slurmkube_goodput_*)")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    plt.close(fig)
