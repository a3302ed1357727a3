"""The reason a held team's pending Slurm jobs wait, on the jobs themselves.

Past 120% of its budget a team's `GrpTRES` is what it runs, so its new jobs wait
with Slurm's own reason (`AssocGrpGRES`), which names no allocation. Their
AdminComment, which `scontrol show job` and `squeue -O admincomment` show every
user and only SlurmUser or an admin may set, carries the policy's reason
without this period's figures (they change at every sync; one write per job).
It is prefixed, so slurmkube takes back only its own when the hold ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from slurmkube.plan.policy.gates import TeamGates
from slurmkube.plan.policy.ledger import BudgetLevel
from slurmkube.plan.policy.usage import JobUse

PREFIX = "slurmkube: "


def plan_hold_comments(
    gates: Mapping[str, TeamGates], jobs: Iterable[JobUse]
) -> list[tuple[int, str]]:
    """(job id, AdminComment) to write: the reason on a held team's waiting jobs,
    "" where slurmkube's comment outlived the hold. Running jobs are left alone."""
    out = []
    for job in jobs:
        if not job.pending:
            continue
        gate = gates.get(job.account)
        held = gate is not None and gate.level == BudgetLevel.HOLD
        want = f"{PREFIX}{gate.notice}" if held and gate is not None else ""
        if job.admin_comment != want and (want or job.admin_comment.startswith(PREFIX)):
            out.append((job.job_id, want))
    return out
