"""Writing a comparison out: results.json, PNG plots (matplotlib, Agg) and report.md.

The only module of the simulator besides the loader and the CLI that does I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from slurmkube.goodput import SIZE_BUCKETS
from slurmkube_sim.engine import SimOutcome
from slurmkube_sim.policy import Sharing, StaticSplit
from slurmkube_sim.scenario import Comparison, worst_p95

PLOTS = (
    "occupancy_over_time.png",
    "time_to_start_cdf.png",
    "waste_breakdown.png",
    "static_sweep.png",
)
WASTE_KEYS = ("idle_healthy", "drained_down", "reserved_unused", "fragmentation")


def _clean(value: object) -> object:
    """JSON has no NaN: a percentile of nothing is null."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def outcome_dict(outcome: SimOutcome) -> dict[str, object]:
    result: dict[str, object] = {"label": outcome.label}
    result.update(outcome.report.as_dict())
    result.update(
        {
            "single_block_straddles": outcome.single_block_straddles,
            "extra_block_spans": outcome.extra_block_spans,
            "lends": outcome.lends,
            "lend_decision_ms_p50": outcome.lend_decision_ms_p50,
            "preemptions": outcome.preemptions,
            "jobs_killed": outcome.jobs_killed,
            "lost_gpu_hours": outcome.lost_gpu_hours,
            "jobs_total": outcome.jobs_total,
            "jobs_finished": outcome.jobs_finished,
            "simulated_days": outcome.simulated_s / 86400.0,
            "wall_s": outcome.wall_s,
        }
    )
    return result


def margins(comparison: Comparison) -> dict[str, object]:
    static, sharing = (
        comparison.static_best().report,
        comparison.by_label(comparison.scenario.sharing.label).report,
    )
    return {
        "occupancy_points": 100.0 * (sharing.occupancy - static.occupancy),
        "tts_p95_s_64plus_delta": sharing.tts_p95_s_64plus - static.tts_p95_s_64plus,
        "tts_p95_s_64plus_ratio": (
            sharing.tts_p95_s_64plus / static.tts_p95_s_64plus
            if static.tts_p95_s_64plus
            else math.nan
        ),
        "waste_points": {
            k: 100.0 * (sharing.waste.as_dict()[k] - static.waste.as_dict()[k]) for k in WASTE_KEYS
        },
        "worst_bucket_p95_s": {"static_best": worst_p95(static), "sharing": worst_p95(sharing)},
    }


def results(comparison: Comparison, runtime: Mapping[str, object]) -> dict[str, object]:
    scenario = comparison.scenario
    sharing_label = scenario.sharing.label
    best = comparison.static_best()
    sweep = []
    sensitivity = []
    for o, policy in zip(comparison.outcomes, scenario.policies(), strict=True):
        if isinstance(policy, StaticSplit):
            entry = outcome_dict(o)
            entry["kubernetes_blocks"] = policy.kubernetes_blocks
            entry["kubernetes_share"] = policy.kubernetes_blocks / scenario.fleet.blocks
            sweep.append(entry)
        elif isinstance(policy, Sharing):
            entry = outcome_dict(o)
            entry["drain_s"] = policy.drain_s
            sensitivity.append(entry)
    invariants = {
        "single_block_straddles": sum(o.single_block_straddles for o in comparison.outcomes),
        "extra_block_spans": sum(o.extra_block_spans for o in comparison.outcomes),
    }
    fleet = scenario.fleet
    return _clean(
        {
            "scenario": scenario.name,
            "seed": comparison.seed,
            "fleet": {
                "nodes": fleet.nodes,
                "gpus_per_node": fleet.gpus_per_node,
                "nodes_per_block": fleet.nodes_per_block,
                "blocks": fleet.blocks,
                "blocks_per_leaf": fleet.blocks_per_leaf,
                "leaves_per_spine": fleet.leaves_per_spine,
            },
            "workload": {
                "jobs": len(comparison.workload.jobs),
                "slurm_jobs": comparison.workload.slurm_jobs,
                "kubernetes_jobs": comparison.workload.kubernetes_jobs,
                "horizon_s": comparison.workload.horizon_s,
                "offered_load": {
                    "slurm": scenario.slurm_load,
                    "kubernetes": scenario.kubernetes_load,
                },
            },
            "policies": {
                "static_best": outcome_dict(best)
                | {"kubernetes_blocks": int(best.label.split("-")[1])},
                "sharing": outcome_dict(comparison.by_label(sharing_label)),
                "upper_bound": outcome_dict(comparison.by_label("upper-bound")),
            },
            "static_sweep": sweep,
            "drain_sensitivity": sorted(sensitivity, key=lambda e: float(str(e["drain_s"]))),
            "margins": margins(comparison),
            "invariants": invariants,
            "runtime": dict(runtime),
        }
    )  # type: ignore[return-value]


def write_all(
    comparison: Comparison, out: Path, runtime: Mapping[str, object]
) -> dict[str, object]:
    out.mkdir(parents=True, exist_ok=True)
    data = results(comparison, runtime)
    (out / "results.json").write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    write_plots(comparison, out)
    (out / "report.md").write_text(render_report(comparison, runtime))
    return data


def _headline(comparison: Comparison) -> list[tuple[str, SimOutcome]]:
    return [
        ("static best (" + comparison.static_best().label + ")", comparison.static_best()),
        ("sharing", comparison.by_label(comparison.scenario.sharing.label)),
        ("upper bound", comparison.by_label("upper-bound")),
    ]


def write_plots(comparison: Comparison, out: Path) -> None:
    import matplotlib  # only where plots are drawn: matplotlib is the sim extra

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    headline = _headline(comparison)
    fig, ax = plt.subplots(figsize=(9, 4))
    for name, o in headline:
        series = o.report.occupancy_series
        ax.plot([t / 86400.0 for t, _ in series], [v for _, v in series], label=name, lw=1)
    ax.set(xlabel="day", ylabel="occupancy (allocated / healthy GPUs)", ylim=(0, 1.02))
    ax.set_title("Occupancy over time, hourly")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / PLOTS[0], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(SIZE_BUCKETS), figsize=(14, 3.6), sharey=True)
    for ax, bucket in zip(axes, SIZE_BUCKETS, strict=True):
        for name, o in headline:
            waits = o.report.waits_by_bucket.get(bucket, ())
            if waits:
                ys = [(i + 1) / len(waits) for i in range(len(waits))]
                ax.plot([max(w, 1.0) for w in waits], ys, label=name, lw=1)
        ax.set_xscale("log")
        ax.set(title=f"{bucket} GPUs", xlabel="time to start (s, log)")
    axes[0].set_ylabel("fraction of gangs")
    for ax in axes:
        if ax.get_lines():
            ax.legend(fontsize=7)
            break
    fig.tight_layout()
    fig.savefig(out / PLOTS[1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    names = [n for n, _ in headline]
    bottom = [0.0] * len(headline)
    for key in WASTE_KEYS:
        values = [100.0 * o.report.waste.as_dict()[key] for _, o in headline]
        ax.bar(names, values, bottom=bottom, label=key.replace("_", " "))
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set(ylabel="% of all GPU-seconds", title="Waste by cause")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / PLOTS[2], dpi=110)
    plt.close(fig)

    sweep = comparison.static_split_runs()
    blocks = comparison.scenario.fleet.blocks
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [100.0 * int(o.label.split("-")[1]) / blocks for o in sweep]
    ax.plot(xs, [o.report.occupancy for o in sweep], "o-", label="static split")
    for name, o in headline[1:]:
        ax.axhline(
            o.report.occupancy, ls="--", lw=1, label=name, color="C1" if name == "sharing" else "C2"
        )
    ax.set(
        xlabel="% of NVLink blocks given to Kubernetes",
        ylabel="occupancy",
        title="Static split sweep",
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / PLOTS[3], dpi=110)
    plt.close(fig)


def _fmt_s(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if value >= 3600:
        return f"{value / 3600:.1f} h"
    if value >= 60:
        return f"{value / 60:.1f} min"
    return f"{value:.0f} s"


def _pct(value: float, digits: int = 1) -> str:
    return f"{100 * value:.{digits}f}%"


def render_report(comparison: Comparison, runtime: Mapping[str, object]) -> str:
    scenario, workload, fleet = comparison.scenario, comparison.workload, comparison.scenario.fleet
    static = comparison.static_best()
    sharing = comparison.by_label(scenario.sharing.label)
    lines = [
        f"# Fleet simulation: {scenario.name} scenario, seed {comparison.seed}",
        "",
        f"{fleet.nodes} nodes x {fleet.gpus_per_node} GPUs in {fleet.blocks} NVLink blocks of "
        f"{fleet.nodes_per_block}; {len(workload.jobs)} jobs ({workload.slurm_jobs} Slurm gangs, "
        f"{workload.kubernetes_jobs} Kubernetes pods resampled from the Alibaba GPU trace v2023) "
        f"over {workload.horizon_s / 86400:.1f} days, offered load {_pct(scenario.slurm_load, 0)} "
        f"Slurm + {_pct(scenario.kubernetes_load, 0)} Kubernetes. Metrics: docs/goodput.md.",
        "",
        "| policy | occupancy | p95 start, 64+ GPU gangs | idle | drained/down | reserved "
        "| fragmentation | Jain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, o in _headline(comparison):
        r = o.report
        waste = r.waste.as_dict()
        lines.append(
            f"| {name} | {_pct(r.occupancy)} | {_fmt_s(r.tts_p95_s_64plus)} | "
            + " | ".join(_pct(waste[k]) for k in WASTE_KEYS)
            + f" | {r.jain_index:.3f} |"
        )
    delta = sharing.report.tts_p95_s_64plus - static.report.tts_p95_s_64plus
    static_waste, sharing_waste = static.report.waste.as_dict(), sharing.report.waste.as_dict()
    points = 100.0 * (sharing.report.occupancy - static.report.occupancy)
    lines += [
        "",
        "## Margin of sharing over the best static split",
        "",
        f"- Occupancy: {points:+.2f} points "
        f"({_pct(static.report.occupancy, 2)} -> {_pct(sharing.report.occupancy, 2)}).",
        f"- p95 time to start of 64+ GPU gangs: {_fmt_s(abs(delta))} "
        f"{'longer' if delta > 0 else 'shorter'} ({_fmt_s(static.report.tts_p95_s_64plus)} -> "
        f"{_fmt_s(sharing.report.tts_p95_s_64plus)}).",
        "- Waste, points of all GPU-seconds: "
        + ", ".join(
            f"{k.replace('_', ' ')} {100 * (sharing_waste[k] - static_waste[k]):+.2f}"
            for k in WASTE_KEYS
        )
        + ".",
        f"- Worst gang-size bucket at p95: {_fmt_s(worst_p95(static.report))} -> "
        f"{_fmt_s(worst_p95(sharing.report))}.",
        "",
        "The best static split is the one within half an occupancy point of the sweep's best "
        "whose worst gang-size bucket waits least at p95 (the sweep is below). A static split "
        "counts a free GPU of one side as idle while only the other side queues (nobody who "
        "could use it waits); under sharing any queued job could use an empty node, so what "
        "stays free while the queue waits (for a whole NVLink block, or held for the head "
        "gang's reservation) is fragmentation.",
        "",
        "## Sensitivity of sharing to the drain delay",
        "",
        "| drain delay | occupancy | p95 start, 64+ | p95 start, 1-7 GPU pods "
        "| reserved-but-unused | lends |",
        "|---|---|---|---|---|---|",
    ]
    runs = list(zip(comparison.outcomes, scenario.policies(), strict=True))
    for o, policy in sorted(
        ((o, p) for o, p in runs if isinstance(p, Sharing)), key=lambda op: op[1].drain_s
    ):
        r = o.report
        lines.append(
            f"| {_fmt_s(policy.drain_s)} | {_pct(r.occupancy, 2)} | {_fmt_s(r.tts_p95_s_64plus)} | "
            f"{_fmt_s(r.time_to_start['1-7'].p95_s)} | {_pct(r.waste.reserved_unused, 3)} | "
            f"{o.lends} |"
        )
    lines += [
        "",
        "## Static split sweep",
        "",
        "| Kubernetes blocks | occupancy | p95 start, 64+ | p95 start, 1-7 GPU pods |",
        "|---|---|---|---|",
    ]
    for o, split in runs:
        if isinstance(split, StaticSplit):
            r = o.report
            share = split.kubernetes_blocks / fleet.blocks
            lines.append(
                f"| {split.kubernetes_blocks} ({_pct(share, 0)}) | {_pct(r.occupancy, 2)} | "
                f"{_fmt_s(r.tts_p95_s_64plus)} | {_fmt_s(r.time_to_start['1-7'].p95_s)} |"
            )
    straddles = sum(o.single_block_straddles for o in comparison.outcomes)
    extra = sum(o.extra_block_spans for o in comparison.outcomes)
    lines += [
        "",
        "## Invariants and runtime",
        "",
        f"- Single-block gangs placed across NVLink blocks, all runs: {straddles} (must be 0); "
        f"gangs on more blocks than the free state needed: {extra} (must be 0).",
        f"- {runtime.get('runs')} runs in {runtime.get('wall_s')} s wall with "
        f"{runtime.get('workers')} worker process(es), load average "
        f"{runtime.get('load_average_1m')}; "
        f"peak RSS {runtime.get('max_rss_mb')} MB (largest process). Per run: "
        + ", ".join(f"{o.label} {o.wall_s:.1f} s" for o in comparison.outcomes)
        + ".",
        "",
        "![occupancy](occupancy_over_time.png)",
        "![time to start](time_to_start_cdf.png)",
        "![waste](waste_breakdown.png)",
        "![sweep](static_sweep.png)",
        "",
    ]
    return "\n".join(lines)
