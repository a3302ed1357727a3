"""Trace-driven discrete-event simulator of one GPU fleet shared by Slurm and Kubernetes.

Issue 9: shows, on realistic traces, what slurmkube's sharing buys over a
static split, measured with `slurmkube.goodput` and placing lent nodes with
`slurmkube.placement`, the same code the operator runs. A package of its own beside `slurmkube`,
so the operator image does not carry it; `slurmkube sim` finds it when installed. Layers: `fleet`,
`workload` and `alibaba` (inputs), `policy`, `engine` (one run: the loop over `state`,
`slurm_side`, `pods`, `lending`, `failures` and `health_side`; faults from `faults`), `scenario`
(the comparison), `report` and `cli` (the only I/O besides the trace loader).
"""

from slurmkube_sim.engine import FailureModel, HealthAware, SimOutcome, simulate
from slurmkube_sim.fleet import REFERENCE_FLEET, FleetSpec
from slurmkube_sim.policy import Policy, Sharing, StaticSplit, UpperBound
from slurmkube_sim.scenario import SCENARIOS, Comparison, Scenario, build_workload, compare
from slurmkube_sim.workload import SimJob, SlurmWorkloadModel

__all__ = [
    "REFERENCE_FLEET",
    "SCENARIOS",
    "Comparison",
    "FailureModel",
    "FleetSpec",
    "HealthAware",
    "Policy",
    "Scenario",
    "Sharing",
    "SimJob",
    "SimOutcome",
    "SlurmWorkloadModel",
    "StaticSplit",
    "UpperBound",
    "build_workload",
    "compare",
    "simulate",
]
