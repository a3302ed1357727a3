"""slurm.conf(5) HealthCheckProgram: slurmd's own GPU check, on with
`spec.health.nodeCheck.enabled`.

The program is the Slurm image's `slurmkube-gpu-check` (images/slurm/bin); on a
failure it drains the node with a `slurmkube:health:` reason, which the health
planner (plan.health) owns: it resumes the node only after its active check.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmkube.api import grammar
from slurmkube.api.grammar import SlurmToken
from slurmkube.api.models import NodeCheckSpec
from slurmkube.render.context import RenderContext


@dataclass(frozen=True, slots=True)
class NodeHealthCheck:
    program: SlurmToken
    interval: int  # HealthCheckInterval, seconds
    node_state: SlurmToken  # HealthCheckNodeState


def node_health_check(spec: NodeCheckSpec, ctx: RenderContext) -> NodeHealthCheck | None:
    if not spec.enabled:
        return None
    return NodeHealthCheck(
        program=grammar.file_path(ctx.health_check_program, "context.health_check_program"),
        interval=spec.interval_seconds,
        # A Literal of the model: one of slurm.conf(5)'s words.
        node_state=SlurmToken(spec.node_state),
    )
