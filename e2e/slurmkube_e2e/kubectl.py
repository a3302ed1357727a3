"""Run the cluster's own kubectl (built with the control plane) against a kubeconfig.

Bootstrap objects (RBAC, Kueue's CRDs and webhooks) are applied with
`kubectl apply --server-side`: Kueue's Workload CRD is too large for
client-side apply's last-applied annotation, and server-side apply is
idempotent, which keeps `cluster-up` re-runnable.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

FIELD_MANAGER = "slurmkube-e2e"


class KubectlError(RuntimeError):
    """kubectl exited non-zero; the message carries its stderr."""


def kubectl(
    binary: Path,
    kubeconfig: Path,
    args: Sequence[str],
    stdin: str | None = None,
    timeout: float = 120,
) -> str:
    cmd = [str(binary), f"--kubeconfig={kubeconfig}", *args]
    done = subprocess.run(
        cmd, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise KubectlError(f"{' '.join(cmd[:1] + list(args))} failed: {done.stderr.strip()}")
    return done.stdout


def apply(binary: Path, kubeconfig: Path, manifests: Iterable[dict[str, Any]]) -> str:
    """Server-side apply of manifests, taking ownership of conflicting fields."""
    stream = yaml.safe_dump_all(list(manifests), sort_keys=False)
    return kubectl(
        binary,
        kubeconfig,
        [
            "apply",
            "--server-side",
            "--force-conflicts",
            f"--field-manager={FIELD_MANAGER}",
            "-f",
            "-",
        ],
        stdin=stream,
    )
