"""What `slurmkube policy plan` prints: both schedulers' share of one policy.

Slurm: the slurm.conf keys and the `sacctmgr -i` commands that would create
everything from nothing (or bring an observed state to the policy); Kueue: the
objects and the Configuration fragment, as YAML documents.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

import yaml

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
    lines.append("# sacctmgr (one command per line; argument lists, quoted here for reading)")
    for change in diff_slurm(slurm.entities, observed):
        lines.append(f"#   {shlex.join(sacctmgr_argv(change))}")
    documents = [*compile_kueue(policy), kueue_configuration(policy)]
    return (
        "\n".join(lines)
        + "\n"
        + yaml.safe_dump_all(documents, sort_keys=False, explicit_start=True)
    )
