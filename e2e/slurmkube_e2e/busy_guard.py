"""The chart's busy slurmd pod guard (build/admission.py) bound to one test
namespace, with the e2e operators' group exempt as the chart exempts the
operator's ServiceAccount."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from slurmkube.build.admission import busy_pod_guard
from slurmkube_e2e.audit import AUDITED_GROUP
from slurmkube_e2e.kube import Kube

GUARD_LABEL = "e2e.slurmkube.io/busy-guard"


@contextmanager
def busy_guard(kube: Kube, namespace: str) -> Iterator[None]:
    """The ValidatingAdmissionPolicy and its binding for `namespace`, removed after."""
    name = f"slurmkube-busy-guard-{namespace}"[:63]
    policy, binding = busy_pod_guard(
        [], [AUDITED_GROUP], namespace_selector={"matchLabels": {GUARD_LABEL: namespace}}
    )
    policy["metadata"]["name"] = binding["metadata"]["name"] = name
    binding["spec"]["policyName"] = name
    kube.patch("v1", "Namespace", namespace, {"metadata": {"labels": {GUARD_LABEL: namespace}}})
    try:
        kube.apply(policy)
        kube.apply(binding)
        yield
    finally:
        kube.delete(binding["apiVersion"], binding["kind"], name)
        kube.delete(policy["apiVersion"], policy["kind"], name)
