"""The busy slurmd pod guard (pure): a ValidatingAdmissionPolicy that refuses to
delete a slurmd pod while Slurm runs a job in it.

A busy slurmd pod deleted by hand (`kubectl delete pod`) kills its job, and the
new slurmd re-registers while slurmctld still shows the job running for its
whole time limit (docs/chaos.md). Evictions (`kubectl drain`, autoscalers) are
the PodDisruptionBudget's (build/slurmd.py); this policy answers the plain
DELETE. It matches pods labelled `slurmkube.io/busy=true` (the operator keeps the
label in step with Slurm) and lets through: the operator itself and the
controllers that remove a whole cluster or a lost node (`exempt_users`,
`exempt_groups`), and a pod annotated `slurmkube.io/force-delete=true`, which a
person sets knowing the job dies. The chart ships the same objects
(templates/admissionpolicy.yaml, compared in tests/unit/test_admission_policy.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from slurmkube.api import well_known as wk
from slurmkube.build.names import Manifest

POLICY = "slurmkube-busy-slurmd-pods"
API = "admissionregistration.k8s.io/v1"
# Deleting these pods is the end of their cluster or node, not a person's mistake.
SYSTEM_USERS = (
    "system:serviceaccount:kube-system:namespace-controller",
    "system:serviceaccount:kube-system:generic-garbage-collector",
    "system:serviceaccount:kube-system:pod-garbage-collector",
)
SYSTEM_GROUPS = ("system:nodes",)


def _cel_list(items: Sequence[str]) -> str:
    # Kubernetes user and group names carry no quote or backslash (the API server
    # and authenticators refuse them); the check keeps a bad value out of CEL anyway.
    for item in items:
        if any(c in item for c in "'\\\n"):
            raise ValueError(f"busy pod guard: exempt name {item!r} cannot go into CEL")
    return "[" + ", ".join(f"'{item}'" for item in items) + "]"


def busy_pod_guard(
    exempt_users: Sequence[str],
    exempt_groups: Sequence[str] = (),
    namespace_selector: Manifest | None = None,
) -> tuple[Manifest, Manifest]:
    """The policy and its binding; `namespace_selector` limits the binding (a test's
    own namespace), none: every namespace."""
    users = _cel_list((*SYSTEM_USERS, *exempt_users))
    groups = _cel_list((*SYSTEM_GROUPS, *exempt_groups))
    force = wk.ANNOTATION_FORCE_DELETE
    policy: Manifest = {
        "apiVersion": API,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["DELETE"],
                        "resources": ["pods"],
                    }
                ],
                "objectSelector": {"matchLabels": {wk.LABEL_NAME: "slurmd", wk.LABEL_BUSY: "true"}},
            },
            "variables": [
                {
                    "name": "forced",
                    "expression": "has(oldObject.metadata.annotations) && "
                    f"'{force}' in oldObject.metadata.annotations && "
                    f"oldObject.metadata.annotations['{force}'] == 'true'",
                },
                {
                    "name": "exempt",
                    "expression": f"request.userInfo.username in {users} || "
                    f"request.userInfo.groups.exists(g, g in {groups})",
                },
            ],
            "validations": [
                {
                    "expression": "variables.forced || variables.exempt",
                    "messageExpression": "'slurmd pod ' + oldObject.metadata.name + "
                    "' runs a Slurm job (" + wk.LABEL_BUSY + "=true): drain its node in "
                    "Slurm and delete the pod once the job ends, or annotate it "
                    f"{force}=true to kill the job'",
                    "reason": "Forbidden",
                }
            ],
        },
    }
    binding_spec: Manifest = {"policyName": POLICY, "validationActions": ["Deny"]}
    if namespace_selector is not None:
        binding_spec["matchResources"] = {"namespaceSelector": namespace_selector}
    binding: Manifest = {
        "apiVersion": API,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY},
        "spec": binding_spec,
    }
    return policy, binding
