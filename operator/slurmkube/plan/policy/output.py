"""What `slurmkube policy plan` prints: both schedulers' share of one policy.

Slurm: the slurm.conf keys and the `sacctmgr -i` commands that would create
everything from nothing (or bring an observed state to the policy); Kueue: the
objects and the Configuration fragment, as YAML documents.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from slurmkube.api.allocation_source import AllocationSourceStatus
from slurmkube.plan.policy.kueue import compile_kueue, kueue_configuration
from slurmkube.plan.policy.model import Policy
from slurmkube.plan.policy.slurm import SlurmEntity, compile_slurm
from slurmkube.plan.policy.slurm_diff import diff_slurm, sacctmgr_argv


def plan_text(policy: Policy, observed: Iterable[SlurmEntity] = ()) -> str:
    slurm = compile_slurm(policy)
    lines = [
        f"# slurmkube policy plan: {policy.source}, {len(policy.teams)} teams",
        "#",
        "# slurm.conf",
    ]
    lines += [f"#   {key}={value}" for key, value in slurm.config]
    lines += [
        f"# {t.name}: the members of groups {', '.join(t.groups)} join its users at each "
        "sync (spec.directory; not read here)"
        for t in policy.teams
        if t.groups
    ]
    lines.append("# sacctmgr (one command per line; argument lists, quoted here for reading)")
    for change in diff_slurm(slurm.entities, observed):
        lines.append(f"#   {shlex.join(sacctmgr_argv(change))}")
    documents = [*compile_kueue(policy), kueue_configuration(policy)]
    return (
        "\n".join(lines)
        + "\n"
        + yaml.safe_dump_all(documents, sort_keys=False, explicit_start=True)
    )


def status_text(obj: Mapping[str, Any]) -> str:
    """`slurmkube policy status`: a live AllocationSource's conditions and teams."""
    status = AllocationSourceStatus.model_validate(obj.get("status") or {})
    meta = obj.get("metadata") or {}
    lines = [f"AllocationSource {meta.get('namespace')}/{meta.get('name')}: "
             f"{status.teams} teams, last sync {status.last_sync_time or 'never'}"]  # fmt: skip
    lines += [f"  {c.type}={c.status} {c.reason}: {c.message}" for c in status.conditions]
    lines.append(
        f"  {'TEAM':<24} {'GPUS':>5} {'SLURM':>5} {'KUEUE':>5} {'HEAD':>5} "
        f"{'GPU-H USED':>10} {'OF':>8}  LEVEL       TIER"
    )
    for t in status.allocations:
        budget = f"{t.gpu_hours:.0f}" if t.gpu_hours is not None else "-"
        lines.append(
            f"  {t.name:<24} {t.gpus:>5} {t.usage.slurm_gpus:>5} {t.usage.kueue_gpus:>5} "
            f"{t.headroom:>5} {t.usage.period_gpu_hours:>10.1f} {budget:>8}  "
            f"{t.budget_level:<11} {t.tier}"
        )
        if t.reason:
            lines.append(f"    {t.reason}")
    return "\n".join(lines) + "\n"
