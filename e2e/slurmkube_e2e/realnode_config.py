"""What a real node of the local cluster is: its name, addresses and config files.

Pure: renders the kubelet, containerd and CNI configuration of one node from
its place in the fleet; `realnodes` writes them and starts the daemons
(docs/local-kubernetes.md, "Real nodes").

Addressing reuses the runtime's slot network: the host bridge `skbr<slot>`
with 10.250.<slot>.1/24. The runtime agent hands out pod addresses from the
low half; real node k owns the block of 16 addresses at 128 + 16*k: the first
is the node's own address (on the bridge `cni0` inside its network namespace,
whose uplink veth is enslaved to `skbr<slot>`), the next 14 are its pods'.
All pods and nodes of a slot share one L2 segment with no route off it.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmkube_runtime.layout import AGENT_POOL, BRIDGE_IP, SLOT, SUBNET

from slurmkube_e2e import fleet
from slurmkube_e2e.cluster import SERVICE_CIDR
from slurmkube_e2e.cluster_dns import CLUSTER_DOMAIN

REAL_FLEET = "real"
MAX_REAL_NODES = 8
FIRST_BLOCK = AGENT_POOL.num_addresses
BLOCK_SIZE = 16
PODS_PER_NODE = BLOCK_SIZE - 2
PAUSE_IMAGE = "localhost/slurmkube/pause:3.10.2"
# Only pods that tolerate this land on a real node, so the rest of the suite
# (and the kwok fleet's tests) never see their pods move here.
REAL_NODE_TAINT = "e2e.slurmkube.io/real-node"
NODE_BRIDGE = "cni0"
CNI_BIN_DIR = "/usr/lib/cni"
RUNC = "/usr/sbin/runc"


@dataclass(frozen=True)
class RealNode:
    """One real node: its fleet position (labels) and its addresses."""

    index: int
    place: fleet.SimulatedNode
    gpus: int
    # Named the way EKS names nodes (`ip-10-4-0-10.ec2.internal`): a Node name
    # with dots, which a pod's hostname may not have.
    dotted: bool = False

    @property
    def name(self) -> str:
        if self.dotted:
            return f"ip-{str(self.ip).replace('.', '-')}.ec2.internal"
        return self.place.name

    @property
    def netns(self) -> str:
        return f"sk{SLOT}-{self.name}"

    @property
    def host_veth(self) -> str:
        # IFNAMSIZ is 16: "skn" + slot + "r" + index.
        return f"skn{SLOT}r{self.index}"

    @property
    def ip(self) -> ipaddress.IPv4Address:
        return SUBNET.network_address + FIRST_BLOCK + BLOCK_SIZE * self.index

    @property
    def pod_range(self) -> tuple[ipaddress.IPv4Address, ipaddress.IPv4Address]:
        return self.ip + 1, self.ip + PODS_PER_NODE

    @property
    def cgroup_root(self) -> str:
        return f"/slurmkube-{SLOT}/{self.name}"


def real_nodes(count: int, gpus: int = 4) -> list[RealNode]:
    """`count` real nodes in two NVLink domains (one if count is 1), like the kwok fleet;
    of several, the last of the first domain has a dotted name.

    A dotted `ip-...` name sorts before `real-...`, and a NodeSet with fewer
    replicas than nodes gives its slurmd pods to the first ones in name order: the
    dotted node placed in the first domain keeps those the first domain (eight
    nodes, four replicas: the first domain whole, as on the local runtime)."""
    if not 1 <= count <= MAX_REAL_NODES:
        raise ValueError(f"REAL_NODES must be 1..{MAX_REAL_NODES}, got {count}")
    domains = 1 if count == 1 else 2
    if count % domains:
        raise ValueError(f"REAL_NODES must be even to split into two NVLink domains, got {count}")
    spec = fleet.FleetSpec(
        name=REAL_FLEET, nvl_domains=domains, nodes_per_domain=count // domains, gpus=gpus
    )
    return [
        RealNode(i, place, gpus, dotted=count > 1 and i == count // domains - 1)
        for i, place in enumerate(fleet.layout(spec))
    ]


def node_labels(node: RealNode) -> dict[str, str]:
    """The labels of a kwok GPU node at the same place, minus those the kubelet sets."""
    spec = fleet.FleetSpec(name=REAL_FLEET, gpus=node.gpus)
    return fleet.user_labels(fleet.node_manifest(spec, node.place))


def kubelet_config(node: RealNode, node_dir: Path, ca_file: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # This host is cgroup v1 (with cgroup2 at /sys/fs/cgroup/unified); 1.35+
        # refuses that unless told otherwise.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        # Several kubelets on one host: each under its own cgroup root.
        "cgroupRoot": node.cgroup_root,
        "containerRuntimeEndpoint": f"unix://{node_dir / 'containerd' / 'containerd.sock'}",
        "address": str(node.ip),
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca_file)},
        },
        # Only the API server holds a client certificate of this CA that reaches
        # the node's address (a private bridge): it may read logs and exec.
        "authorization": {"mode": "AlwaysAllow"},
        "failSwapOn": False,
        "maxPods": PODS_PER_NODE,
        # CoreDNS on the host's end of the slot bridge (cluster_dns).
        "clusterDNS": [str(BRIDGE_IP)],
        "clusterDomain": CLUSTER_DOMAIN,
        "registerWithTaints": [{"key": REAL_NODE_TAINT, "value": "true", "effect": "NoSchedule"}],
        # The host's disk is shared with everything else on it: evict only when
        # it is really full, never garbage-collect the imported images.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
    }


def kubelet_args(node: RealNode, node_dir: Path) -> list[str]:
    labels = ",".join(f"{k}={v}" for k, v in sorted(node_labels(node).items()))
    return [
        f"--config={node_dir / 'kubelet.yaml'}",
        f"--kubeconfig={node_dir / 'kubeconfig'}",
        f"--root-dir={node_dir / 'kubelet'}",
        f"--cert-dir={node_dir / 'kubelet' / 'pki'}",
        f"--hostname-override={node.name}",
        f"--node-ip={node.ip}",
        f"--node-labels={labels}",
    ]


def kube_proxy_config(node: RealNode, node_dir: Path) -> dict[str, Any]:
    """kube-proxy in iptables mode, in the node's network namespace.

    Every pod and node shares one L2 segment, so a backend would answer a client
    pod directly and bypass the DNAT: every Service connection is masqueraded to
    the node's address instead. Host-wide conntrack sysctls are left alone (the
    process may not set them, and they are not the node's)."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "hostnameOverride": node.name,
        "clientConnection": {"kubeconfig": str(node_dir / "kube-proxy.kubeconfig")},
        "clusterCIDR": str(SUBNET),
        "iptables": {"masqueradeAll": True, "localhostNodePorts": False},
        "conntrack": {
            "maxPerCore": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "oomScoreAdj": 0,
        "healthzBindAddress": f"{node.ip}:10256",
        "metricsBindAddress": f"{node.ip}:10249",
        "nodePortAddresses": [f"{node.ip}/32"],
    }


def containerd_config(node: RealNode, node_dir: Path) -> str:
    """containerd 2.x (config version 3) for one node: its own socket, root and state."""
    base = node_dir / "containerd"
    return f"""version = 3
root = "{base / "root"}"
state = "{base / "state"}"
# Plugins that need kernel features or files this host does not have.
disabled_plugins = [
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs", "io.containerd.internal.v1.opt",
  "io.containerd.nri.v1.nri",
]

[grpc]
  address = "{base / "containerd.sock"}"

[ttrpc]
  address = "{base / "containerd.sock.ttrpc"}"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    # No registry is reachable: the pause image is built here and imported.
    sandbox = "{PAUSE_IMAGE}"

[plugins.'io.containerd.cri.v1.runtime']
  # The process lacks CAP_SYS_RESOURCE: never ask for an oom_score_adj below ours.
  restrict_oom_score_adj = true
  tolerate_missing_hugetlb_controller = true
  disable_apparmor = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{CNI_BIN_DIR}"]
    conf_dir = "{node_dir / "cni"}"
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = "{RUNC}"
      SystemdCgroup = false

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
"""


def cni_config(node: RealNode, node_dir: Path) -> str:
    """The bridge plugin on the node's `cni0`, addresses from the node's block only."""
    first, last = node.pod_range
    conf = {
        "cniVersion": "1.0.0",
        "name": f"slurmkube-{node.name}",
        "plugins": [
            {
                "type": "bridge",
                "bridge": NODE_BRIDGE,
                # The node is its pods' gateway to Service addresses only
                # (kube-proxy's rules are in the node's netns); nothing else routes.
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(node_dir / "cni-ipam"),
                    "ranges": [
                        [
                            {
                                "subnet": str(SUBNET),
                                "rangeStart": str(first),
                                "rangeEnd": str(last),
                                "gateway": str(node.ip),
                            }
                        ]
                    ],
                    "routes": [{"dst": SERVICE_CIDR}],
                },
            }
        ],
    }
    return json.dumps(conf, indent=2) + "\n"


def apiserver_relay_url(port: int) -> str:
    """Where a node reaches the API server: the relay on the bridge's host address."""
    return f"https://{BRIDGE_IP}:{port}"
