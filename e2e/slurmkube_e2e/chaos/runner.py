"""Runs faults one after another against a live SlurmCluster and writes the
report: after each fault the convergence wait, the jobs lost since the last
check, the leaks; slurmd pods and (with two operators) leadership are sampled
the whole time. A fault that leaves the cluster unconverged stops the run."""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurmkube_e2e.chaos.checks import PodSampler, leaks, slurm_nodes, wait_converged
from slurmkube_e2e.chaos.faults import FAULTS, Chaos
from slurmkube_e2e.chaos.jobs import ctld
from slurmkube_e2e.chaos.records import JobRecord, newly_lost, not_completed
from slurmkube_e2e.chaos.report import ChaosReport, FaultReport, markdown_table
from slurmkube_e2e.replicas import Replica, Sampler

CONVERGE_SECONDS = 300
# A job whose id slurmctld gave to a later job: it forgot the first.
VANISHED = "VANISHED"
REPAIR_SECONDS = 120
SETTLE_SECONDS = 15
# Every job of the mix ends within this once no more are submitted.
DRAIN_QUEUE_SECONDS = 400
# The subset inside `make test`, the fault a busy node meets most; the other one a
# busy node meets runs beside it under `make e2e-extended`, for CI's time.
SUBSET = ("busy_node_relabelled",)
SUBSET_EXTENDED = ("busy_node_drained",)


def report_path(root: Path, default: str = "chaos-report.json") -> Path:
    """SLURMKUBE_CHAOS_REPORT, else .run/<default> of the checkout."""
    return Path(os.environ.get("SLURMKUBE_CHAOS_REPORT") or root / ".run" / default)


def chosen_faults() -> list[str]:
    """SLURMKUBE_CHAOS_FAULTS=a,b runs those (in the suite's order), else every fault."""
    wanted = [f for f in os.environ.get("SLURMKUBE_CHAOS_FAULTS", "").split(",") if f]
    unknown = sorted(set(wanted) - set(FAULTS))
    if unknown:
        raise ValueError(f"SLURMKUBE_CHAOS_FAULTS: unknown {unknown}; known: {list(FAULTS)}")
    return [f for f in FAULTS if f in wanted] if wanted else list(FAULTS)


def _error(err: BaseException) -> str:
    tail = "".join(traceback.format_exception(err)[-3:])
    return f"{type(err).__name__}: {err}"[:1500] + f"\n{tail[-1500:]}"


@dataclass
class Tally:
    """What the run carries from fault to fault."""

    pods: PodSampler
    budgets: set[str]  # the PodDisruptionBudgets before the first fault
    counted: set[str] = field(default_factory=set)  # jobs already reported lost
    vanished: int = 0  # of ctx.jobs.vanished, how many are reported

    def new_vanished(self, ctx: Chaos) -> list[JobRecord]:
        """Jobs slurmctld forgot (their ids handed out again) not reported yet."""
        new = ctx.jobs.vanished[self.vanished :]
        self.vanished += len(new)
        return [JobRecord(job, VANISHED) for job in new]


def run_fault(ctx: Chaos, name: str, tally: Tally) -> tuple[FaultReport, bool]:
    """The fault's report, and whether the cluster is usable for the next one."""
    rep = FaultReport(name)
    tally.pods.fault = name
    settled = None
    try:
        if name != "cluster_deleted_and_recreated":
            ctx.jobs.top_up()
        settled = FAULTS[name](ctx, rep)
    except Exception as err:  # the fault could not finish: reported, then converge
        rep.error = _error(err)
    rep.converge_seconds, why = wait_converged(
        ctx.kube, ctx.namespace, ctx.replicas, CONVERGE_SECONDS, settled
    )
    usable = not why
    if why:
        rep.observations.append(f"not converged after {CONVERGE_SECONDS}s: {why}")
        try:
            usable = repair(ctx, rep)
        except Exception as err:
            rep.observations.append(f"repair failed: {_error(err)}")
    # Slurm acts on some faults after the cluster looks converged (a restarted
    # slurmctld relaunching a job it lost track of, then requeueing it).
    time.sleep(SETTLE_SECONDS)
    try:
        lost = newly_lost(ctx.jobs.records(), ctx.jobs.specs, tally.counted)
        rep.jobs_lost = lost + tally.new_vanished(ctx)
        tally.counted.update(j.job_id for j in lost)
        held = ctx.holder.uid if ctx.holder else ""
        rep.leaks = leaks(ctx.kube, ctx.namespace, tally.budgets, held)
        if ctx.holder is not None:
            rep.violations += [f"lent holder: {v}" for v in ctx.holder.broken()]
    except Exception as err:  # Slurm unreadable after the fault: that is the finding
        rep.error = (rep.error or "") + "\nchecks: " + _error(err)
    rep.duplicate_pods = sorted(tally.pods.duplicates.get(name, ()))
    return rep, usable


def repair(ctx: Chaos, rep: FaultReport) -> bool:
    """What an admin would do after a fault the cluster did not recover from by
    itself (the fault has failed already): resume nodes left down or drained, so
    the faults after it still find a working cluster."""
    for node, (state, reason) in sorted(slurm_nodes(ctx.namespace).items()):
        if any(word in state for word in ("down", "drain", "fail")):
            ctld(ctx.namespace, "scontrol", "update", f"nodename={node}", "state=resume")
            rep.observations.append(f"resumed {node} ({state}: {reason}) by hand")
    _, why = wait_converged(ctx.kube, ctx.namespace, ctx.replicas, REPAIR_SECONDS)
    rep.observations.append(f"after the repair: {why or 'converged'}")
    return not why


def run_chaos(
    ctx: Chaos,
    faults: Sequence[str],
    seed: int,
    out: Path,
    pair: list[Replica] | None = None,
) -> ChaosReport:
    report = ChaosReport(seed)
    pods = PodSampler(ctx.kube, ctx.namespace)
    leaders = Sampler(pair, interval=0.25) if pair else None
    budgets = {
        pdb["metadata"]["name"]
        for pdb in ctx.kube.list("policy/v1", "PodDisruptionBudget", namespace=ctx.namespace)
    }
    tally = Tally(pods, budgets)
    pods.start()
    if leaders is not None:
        leaders.start()
    try:
        for name in faults:
            started = time.monotonic()
            rep, usable = run_fault(ctx, name, tally)
            report.faults.append(rep)
            print(f"chaos: {name} passed={rep.passed} in {time.monotonic() - started:.0f}s")
            write(report, ctx, out, leaders)
            if not usable:
                report.error = f"{name}: the cluster did not converge; later faults not run"
                break
        pods.fault = "end"
        ctx.jobs.cancel_held()
        left = ctx.jobs.wait_ended(set(ctx.jobs.specs), DRAIN_QUEUE_SECONDS)
        report.lost_at_end = [
            r
            for r in not_completed(_settled_records(ctx), ctx.jobs.specs)
            if r.job_id not in tally.counted
        ] + tally.new_vanished(ctx)
        if left:
            report.error = (report.error or "") + f" jobs {sorted(left)} never ended"
        if ctx.holder is not None:
            report.holder_release_seconds, report.end_leaks = ctx.holder.release()
            report.end_leaks += leaks(ctx.kube, ctx.namespace, budgets)
    except Exception as err:
        report.error = _error(err)
    finally:
        pods.done.set()
        if leaders is not None:
            leaders.done.set()
            leaders.join(5)
        write(report, ctx, out, leaders)
    return report


def _settled_records(ctx: Chaos, timeout: float = 120) -> dict[str, JobRecord]:
    """Records once sacct shows every job ended (it writes asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        records = ctx.jobs.records()
        if all(r.ended for r in records.values()) and len(records) == len(ctx.jobs.specs):
            return dict(records)
        if time.monotonic() > deadline:
            return dict(records)
        time.sleep(5)


def write(report: ChaosReport, ctx: Chaos, out: Path, leaders: Sampler | None) -> None:
    report.jobs_submitted = len(ctx.jobs.specs)
    if leaders is not None:
        report.leader_samples = leaders.samples
        report.two_leader_samples = len(leaders.overlaps)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report.to_json() + "\n")
    out.with_suffix(".md").write_text(markdown_table(report) + "\n")
