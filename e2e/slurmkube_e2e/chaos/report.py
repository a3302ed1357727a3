"""The chaos report (pure): per fault what was injected, what was seen, how long
until the cluster was Ready again, the jobs lost and the leaks; a summary; the
verdict (any job lost, leak, duplicate slurmd pod, two leaders at once, broken
expectation or fault that could not be injected fails the run)."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from slurmkube_e2e.chaos.records import JobRecord


@dataclass
class FaultReport:
    fault: str
    injected: bool = False
    detail: str = ""
    # What the suite saw (times, refusals, states), for the reader.
    observations: list[str] = field(default_factory=list)
    # What the fault's contract requires and did not hold (e.g. an eviction let through).
    violations: list[str] = field(default_factory=list)
    converge_seconds: float | None = None
    jobs_lost: list[JobRecord] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    duplicate_pods: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def passed(self) -> bool:
        return (
            self.injected
            and self.error is None
            and self.converge_seconds is not None
            and not (self.violations or self.jobs_lost or self.leaks or self.duplicate_pods)
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "fault": self.fault,
            "injected": self.injected,
            "passed": self.passed,
            "detail": self.detail,
            "converge_seconds": self.converge_seconds,
            "jobs_lost": [j.as_dict() for j in self.jobs_lost],
            "leaks": self.leaks,
            "duplicate_pods": self.duplicate_pods,
            "violations": self.violations,
            "observations": self.observations,
            "error": self.error,
        }


@dataclass
class ChaosReport:
    seed: int
    faults: list[FaultReport] = field(default_factory=list)
    jobs_submitted: int = 0
    # Jobs found lost at the end, not seen lost after any one fault.
    lost_at_end: list[JobRecord] = field(default_factory=list)
    leader_samples: int = 0
    two_leader_samples: int = 0
    # With a Kueue workload on lent nodes: seconds from its end until its
    # reservation and lease were gone (None: they stayed), and what stayed.
    holder_release_seconds: float | None = None
    end_leaks: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def jobs_lost(self) -> int:
        return sum(len(f.jobs_lost) for f in self.faults) + len(self.lost_at_end)

    @property
    def passed(self) -> bool:
        return (
            self.error is None
            and bool(self.faults)
            and all(f.passed for f in self.faults)
            and not self.lost_at_end
            and not self.end_leaks
            and self.two_leader_samples == 0
        )

    def summary(self) -> dict[str, Any]:
        times = [f.converge_seconds for f in self.faults if f.converge_seconds is not None]
        return {
            "passed": self.passed,
            "faults": len(self.faults),
            "injected": sum(f.injected for f in self.faults),
            "jobs_submitted": self.jobs_submitted,
            "jobs_lost": self.jobs_lost,
            "leaks": sum(len(f.leaks) for f in self.faults),
            "duplicate_pods": sum(len(f.duplicate_pods) for f in self.faults),
            "violations": sum(len(f.violations) for f in self.faults),
            "two_leader_samples": self.two_leader_samples,
            "holder_release_seconds": self.holder_release_seconds,
            "end_leaks": self.end_leaks,
            "converge_seconds_p50": round(statistics.median(times), 1) if times else None,
            "converge_seconds_max": round(max(times), 1) if times else None,
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "summary": self.summary(),
            "faults": [f.as_dict() for f in self.faults],
            "lost_at_end": [j.as_dict() for j in self.lost_at_end],
            "leader_samples": self.leader_samples,
            "error": self.error,
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)


def duplicate_slurmd(pods: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """(node, pod name) of every slurmd pod, terminating ones included -> nodes
    with more than one, and their pods: two slurmd daemons for one Slurm node."""
    pairs = list(pods)
    counts = Counter(node for node, _ in pairs)
    return {
        node: sorted(name for n, name in pairs if n == node)
        for node, count in sorted(counts.items())
        if node and count > 1
    }


def markdown_table(report: ChaosReport) -> str:
    """The report as the table docs/chaos.md shows."""
    rows = [
        "| fault | injected | converged (s) | jobs lost | leaks | duplicate pods | violations |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in report.faults:
        lost = ", ".join(
            f"{j.job_id} {j.state}{' requeued' if j.requeued else ''}" for j in f.jobs_lost
        )
        converged = "-" if f.converge_seconds is None else f"{f.converge_seconds:.1f}"
        rows.append(
            f"| {f.fault} | {'yes' if f.injected else 'no'} | {converged} | "
            f"{len(f.jobs_lost)}{f' ({lost})' if lost else ''} | {len(f.leaks)} | "
            f"{len(f.duplicate_pods)} | {len(f.violations)} |"
        )
    s = report.summary()
    rows.append(
        f"\nseed {report.seed}: {s['jobs_submitted']} jobs, {s['jobs_lost']} lost "
        f"({len(report.lost_at_end)} found only at the end), two leaders in "
        f"{s['two_leader_samples']} of {report.leader_samples} samples, convergence "
        f"p50 {s['converge_seconds_p50']} s, max {s['converge_seconds_max']} s: "
        f"{'PASSED' if s['passed'] else 'FAILED'}"
    )
    if report.holder_release_seconds is not None or report.end_leaks:
        rows.append(
            f"the Kueue workload on lent nodes released in {report.holder_release_seconds} s, "
            f"left behind: {', '.join(report.end_leaks) or 'nothing'}"
        )
    return "\n".join(rows)
