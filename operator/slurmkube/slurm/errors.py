"""What can go wrong talking to Slurm, as types a caller can act on.

Controllers map these onto kopf's retry vocabulary: `SlurmUnreachable` is
transient (retry later), `SlurmAuthError` needs an operator to fix a key or
token, `SlurmNotFound` usually means the cache is stale, and `SlurmRejected`
carries Slurm's own message, which is what a user needs to see in a condition.
Invalid *arguments* (a reason with `=` in it) are not Slurm errors: they raise
`slurmkube.api.grammar.InvalidValue` before anything is sent.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "SlurmAuthError",
    "SlurmError",
    "SlurmNotFound",
    "SlurmRejected",
    "SlurmUnreachable",
    "missing_or_rejected",
]


class SlurmError(Exception):
    """Base of every error the adapter raises about Slurm itself."""

    def __init__(self, message: str, *, operation: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.operation = operation

    def __str__(self) -> str:
        return f"{self.operation}: {self.message}" if self.operation else self.message


class SlurmUnreachable(SlurmError):
    """slurmrestd or slurmctld did not answer (connection refused, timeout, 502/503/504)."""


class SlurmAuthError(SlurmError):
    """The credential was refused: a bad or expired JWT, a wrong key, no permission."""


class SlurmNotFound(SlurmError):
    """The node, job or reservation named does not exist in slurmctld."""


class SlurmRejected(SlurmError):
    """slurmctld understood the request and refused it; `message` is Slurm's own text."""


def missing_or_rejected(
    change: Callable[[], object], look_up: Callable[[], object], what: str, operation: str
) -> None:
    """Run `change`. Slurm refuses a change to a missing reservation with the same
    'Requested reservation is invalid' (ESLURM_RESERVATION_INVALID) as a bad
    change, over scontrol and slurmrestd alike: when refused, `look_up` tells
    which it was (it raises SlurmNotFound for a missing one)."""
    try:
        change()
    except SlurmRejected as err:
        try:
            look_up()
        except SlurmNotFound:
            raise SlurmNotFound(f"{what} not found", operation=operation) from err
        raise
