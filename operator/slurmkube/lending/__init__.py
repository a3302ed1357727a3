"""Lending Slurm nodes to Kueue workloads (issue 7): the pure planner.

`plan_lending(LendingWorld) -> LendingPlan`. The controller
(`slurmkube.controllers.lending`) observes Workloads, Nodes and Slurm into a
`LendingWorld`, applies the plan (Slurm reservation, lease labels, the check's
state in the Workload's status) and nothing else; every decision is here,
table-tested without a cluster.
"""

from slurmkube.lending.fleet_view import placement_state
from slurmkube.lending.model import (
    CheckState,
    CheckUpdate,
    JobRequeue,
    Lend,
    LendingPlan,
    LendingPolicy,
    LendingWorld,
    NewReservation,
    NodeView,
    PodSetView,
    Release,
    RequeuePolicy,
    ReservationView,
    RunningJob,
    Sickness,
    SlurmState,
    WorkloadView,
    fold_slurm_state,
    reservation_name,
    sickness_of,
    uid_of_reservation,
)
from slurmkube.lending.plan import gang_of, plan_lending
from slurmkube.lending.requeue import judge_busy_nodes, protecting_priority
from slurmkube.lending.sizing import NodeSizing, size_lend
from slurmkube.lending.workload import our_check, workload_view

__all__ = [
    "CheckState",
    "CheckUpdate",
    "JobRequeue",
    "Lend",
    "LendingPlan",
    "LendingPolicy",
    "LendingWorld",
    "NewReservation",
    "NodeSizing",
    "NodeView",
    "PodSetView",
    "Release",
    "RequeuePolicy",
    "ReservationView",
    "RunningJob",
    "Sickness",
    "SlurmState",
    "WorkloadView",
    "fold_slurm_state",
    "gang_of",
    "judge_busy_nodes",
    "our_check",
    "placement_state",
    "plan_lending",
    "protecting_priority",
    "reservation_name",
    "sickness_of",
    "size_lend",
    "uid_of_reservation",
    "workload_view",
]
