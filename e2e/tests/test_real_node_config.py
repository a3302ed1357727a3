"""The real nodes' pure part: names, addresses and config files (no cluster needed)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from slurmkube_runtime.layout import AGENT_POOL, BRIDGE_IP, SUBNET

from slurmkube_e2e import fleet
from slurmkube_e2e.cluster import SERVICE_CIDR
from slurmkube_e2e.realnode_config import (
    MAX_REAL_NODES,
    PAUSE_IMAGE,
    REAL_NODE_TAINT,
    cni_config,
    containerd_config,
    kube_proxy_config,
    kubelet_args,
    kubelet_config,
    node_labels,
    real_nodes,
)

NODE_DIR = Path("/x/real-nodes/n")


@pytest.mark.parametrize("count", [0, -1, MAX_REAL_NODES + 1, 3, 5])
def test_an_unusable_node_count_is_refused_with_its_value(count: int) -> None:
    with pytest.raises(ValueError, match=str(count)):
        real_nodes(count)


@given(st.sampled_from([1, 2, 4, 6, 8]))
def test_nodes_and_their_pods_get_disjoint_addresses_outside_the_agents_pool(count: int) -> None:
    nodes = real_nodes(count)
    taken: list[object] = [BRIDGE_IP]
    for node in nodes:
        first, last = node.pod_range
        block = [node.ip, *(first + i for i in range(int(last) - int(first) + 1))]
        assert all(a in SUBNET and a not in AGENT_POOL for a in block)
        assert SUBNET.broadcast_address not in block
        taken += block
    assert len(taken) == len(set(taken))


@given(st.sampled_from([2, 4, 6, 8]))
def test_nodes_split_into_two_nvlink_domains_labelled_like_the_kwok_fleet(count: int) -> None:
    nodes = real_nodes(count)
    labels = [node_labels(n) for n in nodes]
    cliques = [lbl[fleet.CLIQUE_LABEL] for lbl in labels]
    assert len(set(cliques)) == 2 and cliques.count(cliques[0]) == count // 2
    assert all(lbl[fleet.COUNT_LABEL] == "4" for lbl in labels)
    assert not any(k.startswith("kubernetes.io/") for lbl in labels for k in lbl)


def test_each_node_has_its_own_netns_veth_and_cgroup_root() -> None:
    nodes = real_nodes(8)
    for attr in ("name", "netns", "host_veth", "cgroup_root"):
        values = [getattr(n, attr) for n in nodes]
        assert len(set(values)) == len(values), attr
    assert all(len(n.host_veth) < 16 for n in nodes)


def test_kubelet_runs_on_cgroup_v1_with_its_own_root_and_a_taint() -> None:
    node = real_nodes(1)[0]
    cfg = kubelet_config(node, NODE_DIR, Path("/pki/ca.crt"))
    assert cfg["failCgroupV1"] is False
    assert cfg["cgroupRoot"] == node.cgroup_root
    assert cfg["containerRuntimeEndpoint"] == f"unix://{NODE_DIR}/containerd/containerd.sock"
    assert cfg["authentication"]["anonymous"]["enabled"] is False
    assert cfg["registerWithTaints"] == [
        {"key": REAL_NODE_TAINT, "value": "true", "effect": "NoSchedule"}
    ]
    args = kubelet_args(node, NODE_DIR)
    assert f"--node-ip={node.ip}" in args and f"--hostname-override={node.name}" in args


def test_containerd_config_parses_and_restricts_oom_score_adj() -> None:
    cfg = tomllib.loads(containerd_config(real_nodes(1)[0], NODE_DIR))
    assert cfg["version"] == 3
    assert cfg["grpc"]["address"] == f"{NODE_DIR}/containerd/containerd.sock"
    runtime = cfg["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    assert runtime["cni"]["conf_dir"] == f"{NODE_DIR}/cni"
    images = cfg["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == PAUSE_IMAGE


def test_cni_config_hands_out_only_the_nodes_pod_range() -> None:
    node = real_nodes(4)[2]
    conf = json.loads(cni_config(node, NODE_DIR))
    (bridge,) = conf["plugins"]
    # The node is its pods' gateway to the Service range only (kube-proxy), no NAT.
    assert bridge["isGateway"] is True and bridge["ipMasq"] is False
    (rng,) = bridge["ipam"]["ranges"][0:1]
    assert rng == [
        {
            "subnet": str(SUBNET),
            "rangeStart": str(node.pod_range[0]),
            "rangeEnd": str(node.pod_range[1]),
            "gateway": str(node.ip),
        }
    ]
    assert bridge["ipam"]["routes"] == [{"dst": SERVICE_CIDR}]
    assert bridge["ipam"]["dataDir"] == f"{NODE_DIR}/cni-ipam"


@given(st.sampled_from([2, 4, 6, 8]))
def test_the_first_domains_last_node_is_named_with_dots_like_an_eks_node(count: int) -> None:
    nodes = real_nodes(count)
    dotted = [n.name for n in nodes if "." in n.name]
    assert dotted == [nodes[count // 2 - 1].name]
    # Name order (a NodeSet's) puts the first domain first.
    first = {n.name for n in nodes if n.place.domain == 0}
    assert set(sorted(n.name for n in nodes)[: count // 2]) == first
    assert re.fullmatch(r"ip-10-250-\d+-\d+\.ec2\.internal", dotted[0]), dotted
    assert len({n.netns for n in nodes}) == count


def test_kube_proxy_masquerades_every_service_connection_as_its_node() -> None:
    node = real_nodes(4)[-1]
    cfg = kube_proxy_config(node, NODE_DIR)
    assert cfg["mode"] == "iptables" and cfg["hostnameOverride"] == node.name
    assert cfg["iptables"]["masqueradeAll"] is True
    # Host-wide conntrack settings are not a node's to change.
    assert cfg["conntrack"]["maxPerCore"] == 0
    assert cfg["clientConnection"]["kubeconfig"] == f"{NODE_DIR}/kube-proxy.kubeconfig"
