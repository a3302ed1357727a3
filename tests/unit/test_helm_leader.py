"""The chart's replicas and leader-election durations reach the operator's settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmkube.controllers.settings import Settings
from slurmkube.kube.leader_election import Timing
from tests.unit.test_helm import helm, one, operator_container, render  # noqa: F401


def operator_settings(helm: Path, *args: str) -> Settings:  # noqa: F811
    env = operator_container(render(helm, *args))["env"]
    return Settings.from_environment({e["name"]: e["value"] for e in env if "value" in e})


def test_two_replicas_elect_a_leader_with_the_default_durations(helm: Path) -> None:  # noqa: F811
    assert one(render(helm), "Deployment")["spec"]["replicas"] == 2
    assert operator_settings(helm).lease_timing == Timing()


def test_the_lease_durations_are_values(helm: Path) -> None:  # noqa: F811
    settings = operator_settings(
        helm,
        "--set",
        "leaderElection.leaseDurationSeconds=30",
        "--set",
        "leaderElection.renewDeadlineSeconds=20",
        "--set",
        "leaderElection.retryPeriodSeconds=4",
    )
    assert settings.lease_timing == Timing(30.0, 20.0, 4.0)


@pytest.mark.parametrize("value", ["0", "-3", "soon"])
def test_a_lease_duration_that_is_no_positive_number_is_refused(
    helm: Path,  # noqa: F811
    value: str,
) -> None:
    with pytest.raises(AssertionError, match="leaseDurationSeconds"):
        render(helm, "--set", f"leaderElection.leaseDurationSeconds={value}")
