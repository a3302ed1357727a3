"""Slurm adapter: one `SlurmClient` Protocol, two backends.

`RestClient` talks to slurmrestd (JWT, data_parser v0.0.40-v0.0.45) and hands
what the data_parser cannot do (24.11: reservation writes, requeue) to a
`CliClient`, which runs scontrol. `drain` and `resume_if_ours` keep slurmkube's drains apart from an
admin's. Parsing (`parse`) and argument validation (`arguments`) are pure.
"""

from slurmkube.slurm.cli import CliClient
from slurmkube.slurm.drain import drain, is_ours, resume_if_ours
from slurmkube.slurm.errors import (
    SlurmAuthError,
    SlurmError,
    SlurmNotFound,
    SlurmRejected,
    SlurmUnreachable,
)
from slurmkube.slurm.models import (
    ControllerPing,
    Job,
    Node,
    NodeStateChange,
    Reservation,
    ReservationFlag,
    ReservationRequest,
    ReservationUpdate,
)
from slurmkube.slurm.protocol import ACTIVE_JOB_STATES, SlurmClient
from slurmkube.slurm.rest import RestClient
from slurmkube.slurm.tokens import JwtMinter

__all__ = [
    "ACTIVE_JOB_STATES",
    "CliClient",
    "ControllerPing",
    "Job",
    "JwtMinter",
    "Node",
    "NodeStateChange",
    "Reservation",
    "ReservationFlag",
    "ReservationRequest",
    "ReservationUpdate",
    "RestClient",
    "SlurmAuthError",
    "SlurmClient",
    "SlurmError",
    "SlurmNotFound",
    "SlurmRejected",
    "SlurmUnreachable",
    "drain",
    "is_ours",
    "resume_if_ours",
]
