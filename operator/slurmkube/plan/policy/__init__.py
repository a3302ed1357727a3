"""The allocation policy: one allocation per team, enforced on Slurm and Kueue.

Pure: sources' answers -> `Policy` (`model`, `sources`, `coldfront`);
`Policy` -> Slurm accounting objects and their sacctmgr changes (`slurm`,
`slurm_diff`) and Kueue objects (`kueue`); usage on both schedulers -> one
ledger (`ledger`) -> admission gates per scheduler (`gates`). docs/policy.md
describes the model and what is not built yet.
"""

from slurmkube.plan.policy.gates import KueueGate, SlurmGate, TeamGates, plan_all_gates, plan_gates
from slurmkube.plan.policy.kueue import compile_kueue, kueue_configuration
from slurmkube.plan.policy.ledger import BudgetLevel, Observation, TeamUsage, accrue
from slurmkube.plan.policy.model import Policy, PolicyError, TeamAllocation, build_policy
from slurmkube.plan.policy.output import plan_text
from slurmkube.plan.policy.slurm import SlurmEntity, SlurmPolicy, compile_slurm
from slurmkube.plan.policy.slurm_diff import SlurmChange, diff_slurm, sacctmgr_commands
from slurmkube.plan.policy.sources import policy_from_object, policy_from_source

__all__ = [
    "BudgetLevel",
    "KueueGate",
    "Observation",
    "Policy",
    "PolicyError",
    "SlurmChange",
    "SlurmEntity",
    "SlurmGate",
    "SlurmPolicy",
    "TeamAllocation",
    "TeamGates",
    "TeamUsage",
    "accrue",
    "build_policy",
    "compile_kueue",
    "compile_slurm",
    "diff_slurm",
    "kueue_configuration",
    "plan_all_gates",
    "plan_gates",
    "plan_text",
    "policy_from_object",
    "policy_from_source",
    "sacctmgr_commands",
]
