"""Slurm's answers about jobs, parsed and judged (pure).

A job is lost when Slurm ended it some other way than by itself (NODE_FAIL,
CANCELLED, FAILED, ...) or requeued it, and the test asked for neither. Job
states: squeue(1) and sacct(1) "JOB STATE CODES"; with `sacct --duplicates` a
requeued job's earlier runs show as REQUEUED rows of the same JobID.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slurmkube.plan.health_state import JOB_FAILED_STATES

# Ended, and not by the job's own doing (the states the health checks count as
# a failed job, and a revoked federation sibling).
LOST_STATES = JOB_FAILED_STATES | {"REVOKED"}
ENDED_WELL = "COMPLETED"
NO_RECORD = "(no record)"


@dataclass(frozen=True, slots=True)
class JobRecord:
    job_id: str
    state: str  # the first word: "CANCELLED by 0" is CANCELLED
    exit_code: str = ""
    nodes: str = ""
    requeued: bool = False

    @property
    def lost(self) -> bool:
        return self.requeued or self.state in LOST_STATES

    @property
    def ended(self) -> bool:
        return self.state == ENDED_WELL or self.state in LOST_STATES

    def as_dict(self) -> dict[str, str | bool]:
        return {
            "job": self.job_id,
            "state": self.state,
            "exit_code": self.exit_code,
            "nodes": self.nodes,
            "requeued": self.requeued,
        }


def _state(text: str) -> str:
    words = text.split(maxsplit=1)
    return words[0] if words else "?"


def parse_sacct(text: str) -> dict[str, JobRecord]:
    """`sacct -n -D -X -P --format=JobID,State,ExitCode,NodeList` rows, one record
    per job id: its last row that is not a REQUEUED run, requeued if any row was.
    (An id slurmctld handed out twice, having forgotten the first job, has two
    rows too; the first job is reported by JobBook as vanished.)"""
    rows: dict[str, list[tuple[str, str, str]]] = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 4 or not fields[0]:
            continue
        job, state, exit_code, nodes = fields[:4]
        rows.setdefault(job, []).append((_state(state), exit_code, nodes))
    out = {}
    for job, runs in rows.items():
        final = [r for r in runs if r[0] != "REQUEUED"] or runs
        state, exit_code, nodes = final[-1]
        requeued = any(r[0] == "REQUEUED" for r in runs)
        out[job] = JobRecord(job, state, exit_code, nodes, requeued)
    return out


_FIELD = re.compile(r"(?:^|\s)(JobId|JobState|ExitCode|NodeList|Restarts)=(\S*)")


def parse_scontrol_jobs(text: str) -> dict[str, JobRecord]:
    """`scontrol -o show job` lines (jobs slurmctld still holds, MinJobAge), one
    record each; Restarts above 0 is a requeue."""
    out = {}
    for line in text.splitlines():
        fields = dict(_FIELD.findall(line))
        if "JobId" not in fields:
            continue
        job = fields["JobId"]
        nodes = fields.get("NodeList", "")
        out[job] = JobRecord(
            job,
            fields.get("JobState", "?"),
            fields.get("ExitCode", ""),
            "" if nodes == "(null)" else nodes,
            requeued=int(fields.get("Restarts", "0") or 0) > 0,
        )
    return out


def newly_lost(
    records: Mapping[str, JobRecord], ours: Iterable[str], known: Iterable[str]
) -> list[JobRecord]:
    """Our jobs that are lost now and were not counted yet (`known`)."""
    seen = set(known)
    return [
        records[job]
        for job in sorted(set(ours) - seen, key=_job_order)
        if job in records and records[job].lost
    ]


def not_completed(records: Mapping[str, JobRecord], ours: Iterable[str]) -> list[JobRecord]:
    """At the end, when every job of ours has ended: those without a COMPLETED
    record, run once (no record or a record still running counts)."""
    out = []
    for job in sorted(ours, key=_job_order):
        record = records.get(job, JobRecord(job, NO_RECORD))
        if record.state != ENDED_WELL or record.requeued:
            out.append(record)
    return out


def _job_order(job: str) -> tuple[int, str]:
    return (int(job), job) if job.isdigit() else (0, job)


_DURATION = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)$")


def elapsed_seconds(text: str) -> int:
    """squeue's %M ([days-][hours:]minutes:seconds) in seconds."""
    found = _DURATION.match(text.strip())
    if found is None:
        raise ValueError(f"not a Slurm elapsed time: {text!r}")
    days, hours, minutes, seconds = (int(g or 0) for g in found.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds
