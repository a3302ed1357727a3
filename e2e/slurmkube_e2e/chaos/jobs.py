"""The seeded job mix and its book: which jobs the suite submitted, which run
where with how long left, and what Slurm says became of them."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from slurmkube.slurm.hostlist import expand
from slurmkube_e2e.chaos.records import (
    JobRecord,
    elapsed_seconds,
    parse_sacct,
    parse_scontrol_jobs,
)
from slurmkube_e2e.operator_cluster import in_ctld

JOB_NAME = "chaos"


@dataclass(frozen=True, slots=True)
class JobSpec:
    nodes: int
    seconds: int


def job_mix(
    rng: random.Random, count: int, max_nodes: int, seconds: tuple[int, int] = (20, 90)
) -> list[JobSpec]:
    """`count` multi-node sleep jobs: 1..max_nodes nodes, seconds in the range."""
    return [JobSpec(rng.randint(1, max_nodes), rng.randint(*seconds)) for _ in range(count)]


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A row of `squeue -o %i|%T|%N|%M|%r`."""

    job_id: str
    state: str
    nodes: str
    elapsed: str
    reason: str


@dataclass(frozen=True, slots=True)
class RunningJob:
    job_id: str
    nodes: tuple[str, ...]
    seconds_left: int


def ctld(namespace: str, *argv: str, retry_for: float = 90) -> str:
    """A Slurm command in the slurmctld pod, retried while slurmctld (or its pod,
    or the API server) is away for a moment during a fault."""
    deadline = time.monotonic() + retry_for
    while True:
        try:
            return in_ctld(namespace, *argv)
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


class JobBook:
    """The jobs the suite submitted; `records` asks sacct (accounting) or, without
    it, slurmctld (a job it forgot after MinJobAge keeps its last record)."""

    def __init__(
        self,
        namespace: str,
        rng: random.Random,
        *,
        max_nodes: int,
        accounted: bool,
        seconds: tuple[int, int] = (20, 90),
        pending: int = 2,
        outstanding: int = 8,
    ) -> None:
        self.namespace = namespace
        self.rng = rng
        self.max_nodes = max_nodes
        self.accounted = accounted
        self.seconds = seconds
        self.pending = pending  # jobs kept waiting by top_up
        self.outstanding = outstanding  # at most this many queued or running
        self.specs: dict[str, JobSpec] = {}
        self.seen: dict[str, JobRecord] = {}
        # Jobs whose id slurmctld handed out again: it forgot them (state lost).
        self.vanished: list[str] = []

    def submit(self, spec: JobSpec) -> str:
        # srun: every node of the allocation runs a step, so losing any node shows.
        job = ctld(
            self.namespace,
            "sbatch",
            "--parsable",
            f"-N{spec.nodes}",
            f"--job-name={JOB_NAME}",
            "--wrap",
            f"srun sleep {spec.seconds}",
        ).strip()
        if job in self.specs:
            self.vanished.append(job)
            self.seen.pop(job, None)
        self.specs[job] = spec
        return job

    def queue(self, retry_for: float = 90) -> list[QueuedJob]:
        """Our jobs slurmctld still queues or runs."""
        out = ctld(
            self.namespace,
            "squeue",
            "-h",
            "-n",
            JOB_NAME,
            "-o",
            "%i|%T|%N|%M|%r",
            retry_for=retry_for,
        )
        rows = [line.split("|") for line in out.splitlines() if line.count("|") == 4]
        return [QueuedJob(*row) for row in rows if row[0] in self.specs]

    def cancel_held(self) -> list[str]:
        """Cancel our jobs Slurm holds (a launch failed and was requeued held:
        they would never run) and name them; they are lost already."""
        held = [q.job_id for q in self.queue() if q.state == "PENDING" and "held" in q.reason]
        if held:
            ctld(self.namespace, "scancel", *held)
        return held

    def top_up(self) -> None:
        """Submit from the mix until `pending` jobs wait (at most `outstanding` in all)."""
        rows = self.queue()
        waiting = sum(1 for q in rows if q.state == "PENDING")
        count = max(0, min(self.pending - waiting, self.outstanding - len(rows)))
        for spec in job_mix(self.rng, count, self.max_nodes, self.seconds):
            self.submit(spec)

    def running(self) -> list[RunningJob]:
        out = []
        for q in self.queue():
            if q.state == "RUNNING" and q.nodes:
                left = self.specs[q.job_id].seconds - elapsed_seconds(q.elapsed)
                out.append(RunningJob(q.job_id, expand(q.nodes), left))
        return out

    def victim(self, min_seconds_left: int, timeout: float = 180) -> RunningJob:
        """The running job of ours with the least time left that is at least
        `min_seconds_left` (faults wait for it), topping the mix up while none has."""
        deadline = time.monotonic() + timeout
        while True:
            fit = [r for r in self.running() if r.seconds_left >= min_seconds_left]
            if fit:
                return min(fit, key=lambda r: (r.seconds_left, int(r.job_id)))
            assert time.monotonic() < deadline, (
                f"no job with {min_seconds_left}s left ran within {timeout:.0f}s"
            )
            self.top_up()
            time.sleep(2)

    def wait_ended(self, jobs: set[str], timeout: float) -> set[str]:
        """Wait until slurmctld queues none of `jobs`; those still queued then."""
        deadline = time.monotonic() + timeout
        while True:
            left = {q.job_id for q in self.queue()} & jobs
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(2)

    def records(self) -> dict[str, JobRecord]:
        if not self.specs:
            return {}
        if self.accounted:
            ids = ",".join(sorted(self.specs, key=int))
            text = ctld(
                self.namespace,
                "sacct",
                "-n",
                "-D",
                "-X",
                "-P",
                "--format=JobID,State,ExitCode,NodeList",
                "-j",
                ids,
            )
            found = parse_sacct(text)
        else:
            found = parse_scontrol_jobs(ctld(self.namespace, "scontrol", "-o", "show", "job"))
        self.seen.update({j: r for j, r in found.items() if j in self.specs})
        return dict(self.seen)
