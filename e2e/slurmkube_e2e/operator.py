"""The slurmkube operator as a host process for e2e tests: start, kill, restart.

The suite runs one operator (outside the pod network, so it dials pod IPs) and
lets a test kill it with SIGKILL at any moment and start it again, which is how
crash-consistency is judged: a reconcile cut short must be finished by the next.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import yaml

from slurmkube.build.slurmd import slurmd_priority_class
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.operator_identity import operator_kubeconfig

# The operator on the host, every namespace; no /healthz (tests and the demo run
# several on one machine, and nothing probes them).
OPERATOR_ARGV = (
    sys.executable,
    "-m",
    "slurmkube.cli",
    "operator",
    "--all-namespaces",
    "--health-port",
    "0",
)


def host_operator_env(
    kubeconfig: Path, identity: str, namespace: str = "default"
) -> dict[str, str]:
    """What an operator on the host needs that one in a pod gets from its pod."""
    return {
        "KUBECONFIG": str(kubeconfig),
        "SLURMKUBE_OPERATOR_NAMESPACE": namespace,
        # The host is outside the pod network's DNS: the operator dials pod IPs.
        "SLURMKUBE_POD_IP_ENDPOINTS": "1",
        # Only the backstop reconfigure waits this long; the local runtime
        # refreshes ConfigMap volumes every 5 s, not the kubelet's minute.
        "SLURMKUBE_CONFIG_PROPAGATION_SECONDS": "12",
        # A restart keeps its leader lease, as a restarted container does.
        "SLURMKUBE_OPERATOR_IDENTITY": identity,
        # scontrol (reservations, topology and config reads): the local Slurm build.
        "SLURMKUBE_SLURM_PREFIX": os.environ.get(
            "SLURMKUBE_SLURM_PREFIX",
            str(Path.home() / ".cache" / "slurmkube" / "slurm" / "24.11.5"),
        ),
    }


class OperatorProcess:
    def __init__(self, env: Mapping[str, str], log: Path, args: Sequence[str] = ()) -> None:
        self.env = dict(env)
        self.log = log
        self.args = list(args)  # more `slurmkube operator` flags (e.g. --metrics-port)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, extra_env: Mapping[str, str] | None = None) -> None:
        """Start it; `extra_env` is for this run only (e.g. an armed fail point)."""
        assert self.proc is None or self.proc.poll() is not None, "operator already running"
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*OPERATOR_ARGV, *self.args],
                env={**self.env, **(extra_env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.starts += 1

    def kill(self) -> None:
        """SIGKILL: no cleanup handler runs, as when a node or the OOM killer takes it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def exit_code(self) -> int | None:
        """The return code once it has exited by itself, None while it runs."""
        return None if self.proc is None else self.proc.poll()

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


def install_for_host_operator(kube: Kube) -> None:
    """What the chart installs before its operator runs, for a host-run one: the
    CRDs and the PriorityClass slurmd pods name (build/slurmd.py)."""
    root = Path(__file__).resolve().parents[2]
    for path in sorted((root / "crds").glob("*.yaml")):
        kube.apply(yaml.safe_load(path.read_text()))
    kube.apply(slurmd_priority_class())
    kube._dynamic.resources.invalidate_cache()


@contextmanager
def running_operator(kube: Kube, kubeconfig: Path, directory: Path) -> Iterator[OperatorProcess]:
    """One host operator (log in `directory`) under its own user, so the API server's
    audit log holds its requests (test_rbac_audit.py); stopped afterwards."""
    install_for_host_operator(kube)
    identity = operator_kubeconfig(kubeconfig, "default", directory)
    env = dict(os.environ, **host_operator_env(identity, "e2e-operator", "default"))
    process = OperatorProcess(env, directory / "operator.log")
    process.start()
    try:
        yield process
    finally:
        if process.stop() not in (0, -15, None):
            print(process.tail())
