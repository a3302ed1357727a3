"""Fail points (slurmkube.controllers.failpoints): the process exits at the armed step's
n-th hit and nowhere else; a wrong value is refused with what would be accepted."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from slurmkube.controllers.failpoints import ENV, EXIT_CODE, STEPS, Step, failpoint_value


def run_steps(armed: str, *steps: Step) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter with `armed` in the environment, armed from it as the
    operator's entry point does, that reaches `steps` in order, printing each after
    it passed."""
    script = "\n".join(
        [
            "import os",
            "from slurmkube.controllers.failpoints import ENV, Step, arm, reached",
            "arm(os.environ.get(ENV, ''))",
            *(f"reached(Step({s.value!r})); print({s.value!r}, flush=True)" for s in steps),
        ]
    )
    return subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, ENV: armed},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("armed", "passed", "code"),
    [
        (failpoint_value(Step.LEASE_LABELLED, 1), [], EXIT_CODE),
        (failpoint_value(Step.LEASE_LABELLED, 2), ["lease-labelled", "check-ready"], EXIT_CODE),
        ("lease-labelled", [], EXIT_CODE),  # the first hit when n is left out
        (
            failpoint_value(Step.LEASE_LABELLED, 3),
            ["lease-labelled", "check-ready", "lease-labelled"],
            0,
        ),
        ("", ["lease-labelled", "check-ready", "lease-labelled"], 0),
    ],
)
def test_the_process_exits_right_after_the_armed_hit_of_its_step(
    armed: str, passed: list[str], code: int
) -> None:
    done = run_steps(armed, Step.LEASE_LABELLED, Step.CHECK_READY, Step.LEASE_LABELLED)
    assert (done.returncode, done.stdout.split()) == (code, passed), done.stderr


@pytest.mark.parametrize("armed", ["no-such-step", "check-ready:x", "check-ready:0"])
def test_a_wrong_value_names_the_steps_that_exist(armed: str) -> None:
    done = run_steps(armed)
    assert done.returncode == 1
    assert f"{ENV}={armed!r}" in done.stderr
    assert all(step.value in done.stderr for step in STEPS)
