"""The busy slurmd pod guard: the chart ships the objects build/admission.py makes
(the e2e applies the builder's, users install the chart's), and exempt names that
could break out of CEL are refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurmkube.build.admission import busy_pod_guard
from tests.unit.test_helm import HELM, RELEASE_NAMESPACE, one, render

OPERATOR_SA = f"system:serviceaccount:{RELEASE_NAMESPACE}:slurmkube"


@pytest.fixture
def chart_helm() -> Path:
    if not os.access(HELM, os.X_OK):
        pytest.fail(f"helm not found at {HELM}: run `make cluster-build` (it installs helm)")
    return HELM


def _without_labels(obj: dict[str, object]) -> dict[str, object]:
    meta = dict(obj["metadata"])  # type: ignore[call-overload]
    meta.pop("labels", None)
    return {**obj, "metadata": meta}


@pytest.mark.parametrize(
    ("values", "users", "groups"),
    [
        ((), [OPERATOR_SA], []),
        (
            (
                "--set",
                "busyPodGuard.exemptUsers[0]=ops",
                "--set",
                "busyPodGuard.exemptGroups[0]=sre",
            ),
            [OPERATOR_SA, "ops"],
            ["sre"],
        ),
    ],
)
def test_the_chart_ships_the_builders_guard(
    chart_helm: Path, values: tuple[str, ...], users: list[str], groups: list[str]
) -> None:
    objects = render(chart_helm, *values)
    policy, binding = busy_pod_guard(users, groups)
    assert _without_labels(one(objects, "ValidatingAdmissionPolicy")) == policy
    assert _without_labels(one(objects, "ValidatingAdmissionPolicyBinding")) == binding


def test_the_guard_can_be_turned_off(chart_helm: Path) -> None:
    objects = render(chart_helm, "--set", "busyPodGuard.enabled=false")
    assert not [o for o in objects if o["kind"].startswith("ValidatingAdmissionPolicy")]


@pytest.mark.parametrize("name", ["a'b", "a\\b", "a\nb"])
def test_a_name_that_could_leave_the_cel_string_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="cannot go into CEL"):
        busy_pod_guard([name])


def test_a_test_binding_selects_its_namespaces() -> None:
    _, binding = busy_pod_guard([], namespace_selector={"matchLabels": {"t": "1"}})
    assert binding["spec"]["matchResources"] == {"namespaceSelector": {"matchLabels": {"t": "1"}}}
