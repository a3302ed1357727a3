"""Where the runtime keeps its state, and the names and addresses it owns.

The agent, the `logs`/`exec` CLI and the make targets all read these, so they
agree on where a pod's sandbox is. State lives in the checkout's git-ignored
`.run/runtime/`. Every interface and address here is one the agent creates:
the bridge `skbr<slot>` with 10.250.<slot>.1/24 and pod addresses from the same /24
(slot: SLURMKUBE_SLOT, 0 by default).
That subnet has no route off the machine (pods get only the connected route,
the host does not forward), so nothing a pod does can reach another network.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path


def _slot() -> int:
    # SLURMKUBE_SLOT (0-9): one bridge, /24 and port range (slurmkube_e2e.layout)
    # per cluster slot, so clusters of several checkouts never share a link or port.
    raw = os.environ.get("SLURMKUBE_SLOT", "0")
    if not raw.isdigit() or not 0 <= int(raw) <= 9:
        raise ValueError(f"SLURMKUBE_SLOT must be a digit 0-9, got {raw!r}")
    return int(raw)


SLOT = _slot()
BRIDGE = f"skbr{SLOT}"
SUBNET = ipaddress.IPv4Network(f"10.250.{SLOT}.0/24")
BRIDGE_IP = SUBNET.network_address + 1
# The agent's pods take addresses from the low half; real nodes (make real-nodes,
# slurmkube_e2e.realnode_config) own the high half.
AGENT_POOL = next(SUBNET.subnets(prefixlen_diff=1))
# Host ends of pod veths: "skv" + slot + 8 hex digits of the pod UID (IFNAMSIZ is 16).
VETH_PREFIX = f"skv{SLOT}"
NODE_PREFIX = "local"
# SLURMKUBE_RUNTIME_NODES: how many local nodes (8 by default; benchmarks use 64).
NODE_COUNT = int(os.environ.get("SLURMKUBE_RUNTIME_NODES", "8"))
NODES_PER_CLIQUE = 4
GPUS_PER_NODE = 4
# Steering (docs/local-runtime.md): local nodes carry this label and a NoSchedule
# taint with the same key, so only pods that ask for real processes land here.
RUNTIME_LABEL = "e2e.slurmkube.io/runtime"
RUNTIME_LABEL_VALUE = "local"
RUNTIME_TAINT = "e2e.slurmkube.io/local-runtime"
IMAGE_REPOSITORY = "slurmkube/slurm"
# Tags of this series run on the host's Slurm build (SLURMKUBE_SLURM_PREFIX);
# other tags run in that image's own root filesystem (imagespec.image_source).
HOST_BUILD_SERIES = "24.11"
AGENT_NAME = "slurmkube-runtime"
CLUSTER_DOMAIN = "cluster.local"


@dataclass(frozen=True)
class RuntimeLayout:
    """Paths of one runtime: its state folder, the Slurm build that backs the
    host-build image, the cache of images' root filesystems."""

    root: Path
    run: Path
    slurm_prefix: Path
    kubeconfig: Path
    cache: Path

    @classmethod
    def from_env(cls) -> RuntimeLayout:
        root = Path(__file__).resolve().parents[4]
        run = Path(os.environ.get("SLURMKUBE_RUN", root / ".run"))
        cache = Path(os.environ.get("SLURMKUBE_CACHE", Path.home() / ".cache" / "slurmkube"))
        prefix = Path(os.environ.get("SLURMKUBE_SLURM_PREFIX", cache / "slurm" / "24.11.5"))
        kubeconfig = Path(os.environ.get("SLURMKUBE_RUNTIME_KUBECONFIG", run / "kubeconfig"))
        return cls(root=root, run=run, slurm_prefix=prefix, kubeconfig=kubeconfig, cache=cache)

    @property
    def image_roots(self) -> Path:
        """Root filesystems of the project's images, one folder per image ID, shared
        by every runtime of the machine (images.py)."""
        return self.cache / "runtime" / "images"

    @property
    def image_tool(self) -> Path:
        """images/build.py: its `podman` command runs podman on the project's store."""
        return self.root / "images" / "build.py"

    @property
    def state(self) -> Path:
        return self.run / "runtime"

    @property
    def pods(self) -> Path:
        """One folder per sandbox, named by pod UID; removed when the sandbox is."""
        return self.state / "pods"

    @property
    def logs(self) -> Path:
        """Container logs, `<namespace>_<pod>_<uid>/<container>.log`; kept after the pod."""
        return self.state / "logs"

    @property
    def agent_log(self) -> Path:
        return self.state / "agent.log"

    @property
    def agent_script(self) -> Path:
        return self.root / "e2e" / "local" / "runtime" / "run_agent.py"

    def pod_dir(self, uid: str) -> Path:
        return self.pods / uid

    def log_dir(self, namespace: str, name: str, uid: str) -> Path:
        return self.logs / f"{namespace}_{name}_{uid}"


def node_names() -> list[str]:
    return [f"{NODE_PREFIX}-{i}" for i in range(NODE_COUNT)]


def veth_name(uid: str) -> str:
    return VETH_PREFIX + uid.replace("-", "")[:8]
