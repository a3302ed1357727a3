"""The fleet topology model: grouping, fallbacks, and stability under churn."""

from __future__ import annotations

import difflib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkube.api import well_known as wk
from slurmkube.api.models import KubeNode, TopologySpec
from slurmkube.render import plan_config, render_files
from slurmkube.topology.fleet import (
    config_label_keys,
    fleet_node,
    node_changed,
    node_fingerprint,
)
from slurmkube.topology.model import FleetTopology, build_topology, default_base_block_size
from slurmkube_local.builders import NodeBuilder, bundle, nvl_fleet


def topology_of(nodes: list[NodeBuilder], **spec: object) -> FleetTopology:
    return build_topology([fleet_node(n.obj()) for n in nodes], TopologySpec.model_validate(spec))


def test_domains_smaller_than_the_base_block_stay_out_of_the_file() -> None:
    nodes = [NodeBuilder(f"g-{i}").clique(1 if i < 4 else 2) for i in range(6)]
    topo = topology_of(nodes, blockSize=4)
    assert [b.nodes for b in topo.blocks] == [("g-0", "g-1", "g-2", "g-3")]
    assert topo.undersized_blocks == ("3c9d6e2a-4b7f-4f3e-9a51-2d8c0e7b1f64.2",)


def test_default_block_size_of_equal_domains_is_their_size() -> None:
    nodes = [NodeBuilder(f"g-{i}").clique(1 + i // 18) for i in range(36)]
    assert topology_of(nodes).block_sizes == (18, 36)


def _fleet(*sizes: int) -> list[NodeBuilder]:
    """One NVLink domain per size, nodes numbered across the fleet."""
    nodes, n = [], 0
    for domain, size in enumerate(sizes, start=1):
        for _ in range(size):
            n += 1
            nodes.append(NodeBuilder(f"g-{n}").clique(domain))
    return nodes


@pytest.mark.parametrize(
    ("sizes", "base", "sizes_out", "left_out"),
    [
        pytest.param((18, 16), 16, (16, 32), 0, id="a-degraded-rack-lowers-the-base"),
        pytest.param((18, 18, 16), 16, (16, 32), 0, id="three-racks-one-degraded"),
        pytest.param((18, 18, 18, 4), 18, (18, 36), 1, id="a-stub-domain-stays-out"),
        pytest.param((4, 2), 4, (4,), 1, id="ties-go-to-the-larger-base"),
        pytest.param((8,), 8, (8,), 0, id="one-domain"),
        pytest.param((18, 17, 16, 15), 15, (15, 30, 60), 0, id="each-rack-missing-more"),
    ],
)
def test_default_base_block_size_offers_base_segments_the_most_nodes(
    sizes: tuple[int, ...], base: int, sizes_out: tuple[int, ...], left_out: int
) -> None:
    topo = topology_of(_fleet(*sizes))
    assert topo.block_sizes == sizes_out
    assert topo.block_sizes[0] == base
    assert len(topo.blocks) == len(sizes) - left_out
    assert len(topo.undersized_blocks) == left_out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 80), min_size=1, max_size=12))
def test_default_base_is_never_beaten_by_another_base(sizes: list[int]) -> None:
    base = default_base_block_size(sizes)

    def capacity(b: int) -> int:
        return b * sum(size >= b for size in sizes)

    assert base in sizes
    assert all(
        capacity(base) > capacity(b) or (capacity(base) == capacity(b) and base >= b)
        for b in range(1, max(sizes) + 1)
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 20), min_size=1, max_size=6))
def test_every_domain_is_in_a_block_or_reported_never_smaller_than_the_base(
    sizes: list[int],
) -> None:
    topo = topology_of(_fleet(*sizes))
    base = topo.block_sizes[0]
    assert all(len(b.nodes) >= base for b in topo.blocks)
    assert len(topo.blocks) + len(topo.undersized_blocks) == len(sizes)
    assert sum(size < base for size in sizes) == len(topo.undersized_blocks)


def test_nodes_without_labels_are_counted_and_fall_back() -> None:
    nodes = [NodeBuilder("g-1").clique(1).tiers("leaf-1", "spine-1"), NodeBuilder("g-2")]
    topo = topology_of(nodes, blockSize=1)
    assert topo.nodes_without_domain == ("g-2",)
    assert topo.nodes_without_tiers == ("g-2",)
    names = {str(s.name): s for s in topo.switches}
    assert names["leaf-unknown"].nodes == ("g-2",)
    assert names["root"].switches == ("spine-1", "spine-unknown")


def test_an_invalid_label_value_is_a_reported_problem_not_a_crash() -> None:
    nodes = [NodeBuilder("g-1").clique("a b"), NodeBuilder("g-2").clique(1)]
    topo = topology_of(nodes, blockSize=1)
    assert [p.node for p in topo.problems] == ["g-1"]
    assert topo.nodes_without_domain == ("g-1",)


def test_every_node_with_a_bad_value_is_reported_however_many_share_it() -> None:
    nodes = [
        NodeBuilder("g-1").clique("a b").tiers("leaf-1", "spine-1"),
        NodeBuilder("g-2").clique(1).tiers("leaf-1", "spine-1"),
        NodeBuilder("g-3").clique("a b").tiers("leaf-1", "spine-1"),
        NodeBuilder("g-4").clique(1).tiers("leaf-1", "spine-1"),
    ]
    topo = topology_of(nodes, blockSize=1)
    assert [p.node for p in topo.problems] == ["g-1", "g-3"]
    assert topo.nodes_without_domain == ("g-1", "g-3")
    assert [b.nodes for b in topo.blocks] == [("g-2", "g-4")]


def test_blocks_sharing_a_spine_are_adjacent_for_slurms_block_pairing() -> None:
    nodes = [
        NodeBuilder("a-1").clique("a").tiers("l1", "s2"),
        NodeBuilder("b-1").clique("b").tiers("l2", "s1"),
        NodeBuilder("c-1").clique("c").tiers("l3", "s2"),
    ]
    topo = topology_of(nodes, blockSize=1)
    assert [b.name for b in topo.blocks] == ["b", "a", "c"]


def _topology_lines(nodes: list[KubeNode]) -> list[str]:
    files = render_files(plan_config(bundle(block_size=4), nodes)).files
    return files["topology.conf"].splitlines()


@settings(max_examples=40, deadline=None)
@given(domain=st.integers(0, 4), per=st.integers(4, 8))
def test_adding_one_node_changes_only_the_line_of_its_block(domain: int, per: int) -> None:
    nodes = nvl_fleet(domains=5, per_domain=per)
    before = _topology_lines(nodes)
    extra = NodeBuilder("gpu-9999").clique(domain + 1).gpus(4).obj()
    after = _topology_lines([*nodes, extra])
    changed = [
        line
        for line in difflib.unified_diff(before, after, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert len(changed) == 2
    assert all(f".{domain + 1} Nodes=" in line for line in changed)


def _heartbeat(node: dict[str, object], stamp: str, version: str) -> dict[str, object]:
    status = dict(node["status"])  # type: ignore[arg-type]
    status["conditions"] = [
        {**c, "lastHeartbeatTime": stamp} for c in status.get("conditions") or []
    ]
    meta = {**node["metadata"], "resourceVersion": version}  # type: ignore[dict-item]
    return {**node, "metadata": meta, "status": status}


def test_node_fingerprint_ignores_heartbeats_and_sees_what_the_plan_reads() -> None:
    node = NodeBuilder("g-1").clique(1).dict()
    base = node_fingerprint(node)
    assert node_fingerprint(_heartbeat(node, "2026-12-03T08:00:00Z", "42")) == base
    relabelled = NodeBuilder("g-1").clique(2).dict()
    not_ready = NodeBuilder("g-1").clique(1)
    not_ready.ready = False
    cordoned = {**node, "spec": {"unschedulable": True}}
    fewer_gpus = NodeBuilder("g-1").clique(1).gpus(2).dict()
    for changed in (relabelled, not_ready.dict(), cordoned, fewer_gpus):
        assert node_fingerprint(changed) != base


def test_the_config_reads_its_topology_labels_and_its_selectors_keys() -> None:
    keys = config_label_keys(bundle())
    assert {
        wk.LABEL_GPU_CLIQUE,
        wk.LABEL_GPU_PRODUCT,
        wk.LABEL_GPU_COUNT,
        wk.LABEL_LEASE,
        wk.LABEL_LEAF,
        wk.LABEL_SPINE,
        "slurmkube.io/pool",
    } <= keys
    assert "nvidia.com/gfd.timestamp" not in keys


@pytest.mark.parametrize(
    ("change", "counts"),
    [
        (lambda b: b.label("nvidia.com/gfd.timestamp", "1765000030"), False),
        (lambda b: b.label("feature.node.kubernetes.io/cpu-model", "x"), False),
        (lambda b: b.clique(2), True),
        (lambda b: b.pool("other"), True),
        (lambda b: b.tiers("leaf-9"), True),
        (lambda b: b.gpus(2), True),
    ],
)
def test_only_a_change_the_config_reads_marks_clusters_dirty(
    change: Callable[[NodeBuilder], NodeBuilder], counts: bool
) -> None:
    keys = config_label_keys(bundle())
    seen: dict[str, int] = {}
    node = NodeBuilder("g-1").clique(1).label("nvidia.com/gfd.timestamp", "1765000000")
    assert node_changed(seen, "ADDED", node.dict(), keys)
    assert node_changed(seen, "MODIFIED", change(node).dict(), keys) is counts


def test_without_known_keys_every_label_counts() -> None:
    seen: dict[str, int] = {}
    node = NodeBuilder("g-1").clique(1)
    node_changed(seen, "ADDED", node.dict(), None)
    assert node_changed(seen, "MODIFIED", node.label("nvidia.com/gfd.timestamp", "2").dict())
