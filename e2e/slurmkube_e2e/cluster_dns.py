"""Cluster DNS and Service routing for the real nodes: CoreDNS with its
`kubernetes` plugin, and what each node's kube-proxy reads as.

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
PROXY_ACCOUNT = "kube-proxy"
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


def proxy_rbac() -> list[dict[str, Any]]:
    """kube-proxy reads as `kube-system/kube-proxy`, bound to the built-in
    `system:node-proxier` (Services, EndpointSlices, Nodes)."""
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": PROXY_ACCOUNT, "namespace": NAMESPACE},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"slurmkube-e2e:{PROXY_ACCOUNT}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:node-proxier",
            },
            "subjects": [{"kind": "ServiceAccount", "name": PROXY_ACCOUNT, "namespace": NAMESPACE}],
        },
    ]


def apiserver_endpoints(relay: IPv4Address, port: int) -> dict[str, Any]:
    """The `kubernetes` Service's backend: the relay to the API server.

    The API server runs with `--endpoint-reconciler-type=none` (its address is
    loopback, which an EndpointSlice may not hold), so pods on the real nodes
    reach 10.96.0.1:443, as in-cluster clients do, through this slice."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kubernetes-relay",
            "namespace": "default",
            "labels": {
                "kubernetes.io/service-name": "kubernetes",
                "endpointslice.kubernetes.io/managed-by": "e2e.slurmkube.io",
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [str(relay)], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }


def token_kubeconfig(
    server: str, ca_file: Path, token: str, user: str, server_name: str | None = None
) -> dict[str, Any]:
    cluster: dict[str, Any] = {"server": server, "certificate-authority": str(ca_file)}
    if server_name:
        cluster["tls-server-name"] = server_name
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "local", "user": user}}],
        "current-context": user,
    }
