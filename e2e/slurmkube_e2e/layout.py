"""Where the local cluster keeps things, and which loopback ports it uses.

One place for paths and ports so the cluster scripts, the pytest fixtures and
the docs agree. Builds live in the cache (reused across clones), runtime state
in the checkout's git-ignored `.run/`. Ports sit away from the components'
defaults so a developer's own cluster or another build on the machine does not
collide with ours; every one is bound to 127.0.0.1.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from slurmkube_runtime.layout import SLOT

LOOPBACK = "127.0.0.1"
# SLURMKUBE_SLOT=N (0-9) shifts every port by 100*N, so several checkouts (one
# per developer or worktree) can each run a cluster on the same machine; the
# runtime's bridge and subnet follow the same slot.
SLOT_PORT_STRIDE = 100


@dataclass(frozen=True)
class Ports:
    """Loopback ports of the local control plane."""

    etcd_client: int = 23791
    etcd_peer: int = 23792
    apiserver: int = 26443
    controller_manager: int = 20257
    scheduler: int = 20259
    kwok: int = 20247
    kueue_webhook: int = 29443
    kueue_metrics: int = 28080
    kueue_health: int = 28081
    demo_operator_metrics: int = 28090
    demo_prometheus: int = 28091

    def all(self) -> dict[str, int]:
        return dict(vars(self))

    @classmethod
    def for_slot(cls, slot: int) -> Ports:
        shift = SLOT_PORT_STRIDE * slot
        return cls(**{name: port + shift for name, port in cls().all().items()})


@dataclass(frozen=True)
class Layout:
    """Paths of one local cluster: the cache with builds, the runtime folder with state."""

    root: Path
    cache: Path
    run: Path
    ports: Ports

    @classmethod
    def from_env(cls) -> Layout:
        root = Path(__file__).resolve().parents[2]
        cache = Path(os.environ.get("SLURMKUBE_CACHE", Path.home() / ".cache" / "slurmkube"))
        run = Path(os.environ.get("SLURMKUBE_RUN", root / ".run"))
        return cls(root=root, cache=cache, run=run, ports=Ports.for_slot(SLOT))

    @property
    def bin(self) -> Path:
        return self.cache / "bin"

    @property
    def k8s_binary(self) -> Path:
        return self.bin / "slurmkube-k8s"

    @property
    def kubectl(self) -> Path:
        return self.bin / "kubectl"

    @property
    def pki(self) -> Path:
        return self.run / "pki"

    @property
    def logs(self) -> Path:
        return self.run / "logs"

    @property
    def pids(self) -> Path:
        return self.run / "pids"

    @property
    def etcd_data(self) -> Path:
        return self.run / "etcd"

    @property
    def config(self) -> Path:
        return self.run / "config"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log: the e2e operators' requests (slurmkube_e2e/audit.py)."""
        return self.run / "audit" / "kube-apiserver.log"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig users and tests point KUBECONFIG at."""
        return self.run / "kubeconfig"

    def component_kubeconfig(self, name: str) -> Path:
        return self.pki / f"{name}.kubeconfig"

    @property
    def apiserver_url(self) -> str:
        return f"https://{LOOPBACK}:{self.ports.apiserver}"

    @property
    def versions_file(self) -> Path:
        return self.root / "e2e" / "local" / "versions.env"


def read_versions(path: Path) -> dict[str, str]:
    """Parse versions.env (KEY=value lines, # comments): the pins shared with the build scripts."""
    versions: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            versions[key.strip()] = value.strip()
    return versions


def go_module_dir(module: str, version: str) -> Path:
    """Where `go install` unpacked module@version: upstream manifests are read from there."""
    gomodcache = subprocess.run(
        ["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return Path(gomodcache) / f"{module}@{version}"
