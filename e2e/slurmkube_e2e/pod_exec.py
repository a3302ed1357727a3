"""A command in a pod on a real node: `kubectl exec`, API server -> kubelet -> containerd."""

from __future__ import annotations

from slurmkube_e2e.kubectl import kubectl
from slurmkube_e2e.layout import Layout


def kubectl_exec(namespace: str, pod: str, *argv: str, container: str | None = None) -> str:
    """Its stdout; in /tmp, which a job's user may write on every node (not so `/`).
    Raises KubectlError with stderr when the command fails."""
    layout = Layout.from_env()
    return kubectl(
        layout.kubectl,
        layout.kubeconfig,
        [
            "exec", "-n", namespace, pod, *(["-c", container] if container else []), "--",
            "bash", "-c", 'cd /tmp && exec "$@"', "-", *argv,
        ],
    )  # fmt: skip
