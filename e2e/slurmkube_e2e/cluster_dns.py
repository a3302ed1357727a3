"""Cluster DNS for the real nodes: CoreDNS with its `kubernetes` plugin.

Pods on a real kubelet resolve names the way they do on any cluster: the
kubelet writes `nameserver <clusterDNS>` and the `<ns>.svc.cluster.local`
search path into their resolv.conf, and CoreDNS answers from the API server's
Services and EndpointSlices (a headless Service's pods by hostname, which is
how slurmd and sackd find slurmctld). One CoreDNS per slot listens on the
host's end of the slot bridge (10.250.<slot>.1:53), which every node's pods
reach on their L2 segment. It answers the cluster's zone and its reverse zone
and nothing else: there is no upstream, so no name leaves the machine.

CoreDNS reads the API as the ServiceAccount `kube-system/coredns` with the
ClusterRole a kubeadm cluster gives it (list/watch Services, EndpointSlices,
Namespaces), through a bound token the test bed requests.
"""

from __future__ import annotations

from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

CLUSTER_DOMAIN = "cluster.local"
NAMESPACE = "kube-system"
ACCOUNT = "coredns"
TOKEN_SECONDS = 7 * 24 * 3600


def corefile(listen: IPv4Address, kubeconfig: Path) -> str:
    """Answers for the cluster's zones only; every other name is NXDOMAIN."""
    return (
        f"{CLUSTER_DOMAIN}:53 in-addr.arpa:53 {{\n"
        f"    bind {listen}\n"
        "    errors\n"
        f"    kubernetes {CLUSTER_DOMAIN} in-addr.arpa {{\n"
        f"        kubeconfig {kubeconfig}\n"
        "        pods disabled\n"
        "        ttl 5\n"
        "    }\n"
        "}\n"
        ".:53 {\n"
        f"    bind {listen}\n"
        "    template ANY ANY {\n"
        "        rcode NXDOMAIN\n"
        "    }\n"
        "}\n"
    )


def rbac() -> list[dict[str, Any]]:
    """What CoreDNS's kubernetes plugin reads (the ClusterRole kubeadm installs)."""
    role = f"system:{ACCOUNT}"
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": ACCOUNT, "namespace": NAMESPACE},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["services", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}],
        },
    ]


def token_kubeconfig(server: str, ca_file: Path, token: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "local", "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": ACCOUNT, "context": {"cluster": "local", "user": ACCOUNT}}],
        "current-context": ACCOUNT,
    }
