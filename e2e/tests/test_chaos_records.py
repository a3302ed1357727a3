"""The chaos suite's pure part: Slurm's job answers parsed and judged, the report
and its verdict, the seeded job mix (no cluster needed)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkube_e2e.chaos import jobs as jobs_module
from slurmkube_e2e.chaos.jobs import JobBook, JobSpec, RunningJob, job_mix
from slurmkube_e2e.chaos.records import (
    NO_RECORD,
    JobRecord,
    elapsed_seconds,
    newly_lost,
    not_completed,
    parse_sacct,
    parse_scontrol_jobs,
)
from slurmkube_e2e.chaos.report import (
    ChaosReport,
    FaultReport,
    duplicate_slurmd,
    markdown_table,
)

SACCT = {
    "completed": ("7|COMPLETED|0:0|local-[0-1]", JobRecord("7", "COMPLETED", "0:0", "local-[0-1]")),
    "node fail": ("8|NODE_FAIL|0:0|local-2", JobRecord("8", "NODE_FAIL", "0:0", "local-2")),
    "cancelled by root": (
        "9|CANCELLED by 0|0:15|local-3",
        JobRecord("9", "CANCELLED", "0:15", "local-3"),
    ),
    "requeued then completed": (
        "10|REQUEUED|0:0|local-1\n10|COMPLETED|0:0|local-2",
        JobRecord("10", "COMPLETED", "0:0", "local-2", requeued=True),
    ),
    "pending": ("11|PENDING|0:0|None assigned", JobRecord("11", "PENDING", "0:0", "None assigned")),
    "id handed out twice": (
        "12|PENDING|0:0|None assigned\n12|COMPLETED|0:0|local-[0-2]",
        JobRecord("12", "COMPLETED", "0:0", "local-[0-2]"),
    ),
}


@pytest.mark.parametrize("case", SACCT)
def test_sacct_rows_become_one_record_per_job(case: str) -> None:
    text, record = SACCT[case]
    assert parse_sacct(text + "\n\n") == {record.job_id: record}


SCONTROL = {
    "running": (
        "JobId=3 JobName=chaos UserId=root(0) JobState=RUNNING Reason=None Requeue=1 "
        "Restarts=0 ExitCode=0:0 NodeList=local-[0-1] BatchHost=local-0",
        JobRecord("3", "RUNNING", "0:0", "local-[0-1]"),
    ),
    "requeued": (
        "JobId=4 JobName=chaos JobState=PENDING Reason=BeginTime Restarts=1 ExitCode=0:0 "
        "NodeList=(null)",
        JobRecord("4", "PENDING", "0:0", "", requeued=True),
    ),
}


@pytest.mark.parametrize("case", SCONTROL)
def test_scontrol_lines_become_records_and_restarts_are_requeues(case: str) -> None:
    text, record = SCONTROL[case]
    assert parse_scontrol_jobs(text) == {record.job_id: record}


LOSS = {
    "completed": (JobRecord("1", "COMPLETED", "0:0"), False),
    "running": (JobRecord("1", "RUNNING"), False),
    "pending": (JobRecord("1", "PENDING"), False),
    "node fail": (JobRecord("1", "NODE_FAIL"), True),
    "cancelled": (JobRecord("1", "CANCELLED"), True),
    "failed": (JobRecord("1", "FAILED", "1:0"), True),
    "requeued, running again": (JobRecord("1", "RUNNING", requeued=True), True),
}


@pytest.mark.parametrize("case", LOSS)
def test_a_job_is_lost_when_slurm_ended_or_requeued_it(case: str) -> None:
    record, lost = LOSS[case]
    assert record.lost is lost
    assert newly_lost({"1": record}, ["1"], known=[]) == ([record] if lost else [])


def test_a_lost_job_is_counted_once_and_only_ours() -> None:
    records = {j: JobRecord(j, "NODE_FAIL") for j in ("1", "2", "3")}
    assert [r.job_id for r in newly_lost(records, ["1", "2", "10"], known=["1"])] == ["2"]


def test_at_the_end_a_job_without_a_completed_record_is_not_completed() -> None:
    records = {
        "1": JobRecord("1", "COMPLETED", "0:0"),
        "2": JobRecord("2", "RUNNING"),
        "3": JobRecord("3", "COMPLETED", "0:0", requeued=True),
    }
    assert not_completed(records, ["1", "2", "3", "4"]) == [
        records["2"],
        records["3"],
        JobRecord("4", NO_RECORD),
    ]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0:05", 5), ("1:05", 65), ("1:00:05", 3605), ("2-01:00:00", 176400)],
)
def test_squeue_elapsed_times_are_read_in_seconds(text: str, seconds: int) -> None:
    assert elapsed_seconds(text) == seconds


def test_an_elapsed_time_that_is_not_one_is_refused_with_its_text() -> None:
    with pytest.raises(ValueError, match="INVALID"):
        elapsed_seconds("INVALID")


def fault(**changes: object) -> FaultReport:
    rep = FaultReport("busy_node_drained", injected=True, converge_seconds=3.0)
    for key, value in changes.items():
        setattr(rep, key, value)
    return rep


FAULT_VERDICTS = {
    "clean": (fault(), True),
    "not injected": (fault(injected=False), False),
    "not converged": (fault(converge_seconds=None), False),
    "job lost": (fault(jobs_lost=[JobRecord("4", "NODE_FAIL")]), False),
    "leak": (fault(leaks=["reservation: slurmkube-x"]), False),
    "duplicate pod": (fault(duplicate_pods=["local-1: a, b"]), False),
    "violation": (fault(violations=["the eviction was admitted"]), False),
    "error": (fault(error="TimeoutError"), False),
}


@pytest.mark.parametrize("case", FAULT_VERDICTS)
def test_a_fault_passes_only_injected_converged_and_clean(case: str) -> None:
    rep, passed = FAULT_VERDICTS[case]
    assert rep.passed is passed
    report = ChaosReport(seed=1, faults=[rep])
    assert report.passed is passed
    assert report.as_dict()["summary"]["passed"] is passed


def test_the_run_fails_on_a_loss_found_at_the_end_or_two_leaders() -> None:
    assert not ChaosReport(seed=1, faults=[fault()], lost_at_end=[JobRecord("9", "RUNNING")]).passed
    assert not ChaosReport(seed=1, faults=[fault()], two_leader_samples=1).passed
    assert not ChaosReport(seed=1).passed  # nothing injected is no evidence


def test_the_run_fails_when_the_lent_workload_leaves_its_reservation_behind() -> None:
    left = ChaosReport(seed=1, faults=[fault()], end_leaks=["reservation slurmkube-u1"])
    assert not left.passed
    assert "left behind: reservation slurmkube-u1" in markdown_table(left)
    released = ChaosReport(seed=1, faults=[fault()], holder_release_seconds=4.0)
    assert released.passed
    assert "released in 4.0 s, left behind: nothing" in markdown_table(released)


def test_summary_has_convergence_p50_and_max_and_the_table_a_row_per_fault() -> None:
    report = ChaosReport(
        seed=7,
        faults=[fault(converge_seconds=s) for s in (2.0, 10.0, 4.0)]
        + [fault(jobs_lost=[JobRecord("5", "NODE_FAIL")])],
    )
    summary = report.summary()
    assert (summary["converge_seconds_p50"], summary["converge_seconds_max"]) == (3.5, 10.0)
    assert summary["jobs_lost"] == 1
    table = markdown_table(report)
    assert table.count("| busy_node_drained |") == 4
    assert "1 (5 NODE_FAIL)" in table and "FAILED" in table


def test_two_slurmd_pods_on_one_node_are_duplicates_terminating_or_not() -> None:
    pods = [("local-0", "a"), ("local-1", "b"), ("local-1", "c"), ("", "pending")]
    assert duplicate_slurmd(pods) == {"local-1": ["b", "c"]}


@given(st.integers(0, 2**32), st.integers(1, 20), st.integers(1, 8))
def test_the_job_mix_is_seeded_and_within_its_bounds(seed: int, count: int, nodes: int) -> None:
    mix = job_mix(random.Random(seed), count, nodes, (20, 90))
    assert mix == job_mix(random.Random(seed), count, nodes, (20, 90))
    assert len(mix) == count
    assert all(1 <= j.nodes <= nodes and 20 <= j.seconds <= 90 for j in mix)


class FakeSlurm:
    """Answers JobBook's commands as slurmctld would: sbatch hands out `ids`,
    squeue lists `queue` rows, scancel is recorded."""

    def __init__(self, ids: list[str], queue: str = "") -> None:
        self.ids = iter(ids)
        self.queue = queue
        self.cancelled: list[str] = []

    def __call__(self, namespace: str, *argv: str, retry_for: float = 90) -> str:
        if argv[0] == "sbatch":
            return next(self.ids) + "\n"
        if argv[0] == "squeue":
            return self.queue
        if argv[0] == "scancel":
            self.cancelled += argv[1:]
            return ""
        raise AssertionError(f"unexpected command {argv}")


def book(monkeypatch: pytest.MonkeyPatch, slurm: FakeSlurm) -> JobBook:
    monkeypatch.setattr(jobs_module, "ctld", slurm)
    return JobBook("ns", random.Random(1), max_nodes=2, accounted=False)


def test_a_job_id_handed_out_twice_means_the_first_job_vanished(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jobs = book(monkeypatch, FakeSlurm(["5", "6", "6", "7"]))
    for _ in range(4):
        jobs.submit(JobSpec(1, 30))
    assert jobs.vanished == ["6"]
    assert sorted(jobs.specs) == ["5", "6", "7"]


def test_held_jobs_of_ours_are_cancelled_and_others_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queue = (
        "5|PENDING||0:00|launch failed requeued held\n"
        "6|PENDING||0:00|Resources\n"
        "7|RUNNING|local-[0-1]|0:40|None\n"
        "99|PENDING||0:00|JobHeldUser\n"
    )
    slurm = FakeSlurm(["5", "6", "7"], queue)
    jobs = book(monkeypatch, slurm)
    for _ in range(3):
        jobs.submit(JobSpec(2, 60))
    assert jobs.cancel_held() == ["5"]
    assert slurm.cancelled == ["5"]
    assert jobs.running() == [RunningJob("7", ("local-0", "local-1"), 20)]
