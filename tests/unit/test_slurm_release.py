"""Slurm versions from image tags, and which upgrades Slurm allows (plan/slurm_release.py)."""

from __future__ import annotations

import pytest

from slurmkube.plan.slurm_release import Release, release_of, upgrade_refusal


@pytest.mark.parametrize(
    ("image", "release"),
    [
        ("slurmkube/slurm:26.05.5", Release(26, 5, 5)),
        ("registry.local:5000/team/slurm:24.11.5-1", Release(24, 11, 5)),
        ("slurm:v25.11", Release(25, 11, 0)),
        ("slurm:23.02.7", Release(23, 2, 7)),
        ("slurm:latest", None),
        ("slurm", None),
        ("registry.local:5000/slurm", None),
        ("slurm@sha256:abc", None),
        ("slurm:25.08.1", None),  # no such major
        ("slurm:24.11.5.2", None),
        ("slurm:2024.11", None),
    ],
)
def test_the_version_comes_from_the_image_tag(image: str, release: Release | None) -> None:
    assert release_of(image) == release


@pytest.mark.parametrize(
    ("old", "new", "allowed"),
    [
        ("24.11.5", "26.05.5", True),  # three releases: 25.05, 25.11, 26.05
        ("25.05.1", "26.05.5", True),
        ("24.11.5", "24.11.6", True),
        ("24.11.5", "24.11.5", True),
        ("24.05.1", "26.05.5", False),  # four
        ("22.05.1", "23.11.1", True),  # two, before 24.11
        ("22.05.1", "24.05.1", False),  # three, before 24.11
        ("23.11.1", "25.05.1", True),  # 25.05 accepts 24.11, 24.05, 23.11
        ("26.05.5", "24.11.5", False),
        ("24.11.5", "24.11.4", False),
    ],
)
def test_slurm_accepts_upgrades_within_its_compatibility_window(
    old: str, new: str, allowed: bool
) -> None:
    refusal = upgrade_refusal(
        release_of(f"s:{old}") or Release(0, 0), release_of(f"s:{new}") or Release(0, 0), "f"
    )
    assert (refusal is None) == allowed


def test_a_refusal_names_the_field_and_the_release_to_go_through() -> None:
    refusal = upgrade_refusal(Release(22, 5, 1), Release(26, 5, 5), "SlurmCluster a spec.image")
    assert refusal is not None
    assert refusal.startswith("SlurmCluster a spec.image:")
    # 23.11 accepts 23.02 and 22.05 (upgrades.html, "Compatibility Window").
    assert "upgrade to 23.11 first" in refusal
