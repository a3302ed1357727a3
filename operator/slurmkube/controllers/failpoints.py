"""Named crash points between the steps of lending a node to Kueue and giving it back.

Test only. Issue 7 is judged by "killing the operator between any two steps
converges: no leaked reservation, lease label or missing slurmd pod". A SIGKILL
at a random moment rarely lands between two particular writes, so the
controllers call `reached(step)` right after each write of the lend/return
sequence, and an operator started with

    SLURMKUBE_FAILPOINT=<step>[:<n>]

(the entry point arms it with `arm`, from `Settings.failpoint`) exits at
once (`os._exit`: no cleanup handler, no flush, as after SIGKILL) right
after the n-th time (default the first) it completes that step, with exit
code `EXIT_CODE` so a test can tell the fail point from a crash.
`e2e/tests/test_kueue_bridge.py` loops over `STEPS`, so a step added here is
tested without touching the test.

Unarmed (production) `reached` is one comparison with None.
"""

from __future__ import annotations

import enum
import itertools
import logging
import os
import threading

log = logging.getLogger(__name__)

ENV = "SLURMKUBE_FAILPOINT"
# Distinct from Python's 1 (traceback) and the -9 of SIGKILL.
EXIT_CODE = 86


class Step(enum.StrEnum):
    """The writes of one lend and its return, in the order they happen."""

    # Lending (controllers/lending.py, then the cluster reconcile in controllers/apply.py).
    RESERVATION_CREATED = "reservation-created"
    WAITING_FOR_IDLE = "waiting-for-idle"  # check Pending: Slurm jobs still run there
    LEASE_LABELLED = "lease-labelled"
    SLURMD_DRAINED = "slurmd-drained"
    SLURMD_POD_DELETED = "slurmd-pod-deleted"
    CHECK_READY = "check-ready"
    # Returning.
    LEASE_UNLABELLED = "lease-unlabelled"
    RESERVATION_DELETED = "reservation-deleted"
    SLURMD_POD_CREATED = "slurmd-pod-created"
    SLURMD_UNDRAINED = "slurmd-undrained"


STEPS = tuple(Step)
# Steps done once per node: a crash can also fall between two nodes.
PER_NODE = frozenset(
    {
        Step.LEASE_LABELLED,
        Step.SLURMD_DRAINED,
        Step.SLURMD_POD_DELETED,
        Step.LEASE_UNLABELLED,
        Step.SLURMD_POD_CREATED,
        Step.SLURMD_UNDRAINED,
    }
)


def failpoint_value(step: Step, hit: int = 1) -> str:
    """The `SLURMKUBE_FAILPOINT` value that exits after the `hit`-th `step`."""
    return f"{step.value}:{hit}"


def _armed(value: str) -> tuple[Step, int] | None:
    if not value:
        return None
    name, _, hit = value.partition(":")
    try:
        return Step(name), _positive(hit or "1")
    except ValueError:
        raise ValueError(
            f"{ENV}={value!r}: expected <step>[:<n>] with step one of "
            f"{', '.join(STEPS)} and n a positive integer"
        ) from None


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise ValueError(text)
    return n


# The armed (step, hit), or None; a one-item list so `arm` needs no `global`.
_ARMED: list[tuple[Step, int] | None] = [None]
_lock = threading.Lock()
_hits = itertools.count(1)


def arm(value: str) -> None:
    """Arm the fail point `value` names (`<step>[:<n>]`; "" disarms)."""
    _ARMED[0] = _armed(value)


def reached(step: Step) -> None:
    """Mark `step` as done; exits the process if it is the armed fail point."""
    armed = _ARMED[0]
    if armed is None or armed[0] is not step:
        return
    with _lock:  # the bridge and the cluster reconciles run in worker threads
        hit = next(_hits)
        if hit < armed[1]:
            return
        log.critical("fail point reached step=%s hit=%d", step.value, hit)
        logging.shutdown()
        os._exit(EXIT_CODE)
