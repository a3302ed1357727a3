"""The bridge's fold of a cluster's nodes (`controllers.lending_observe.observe_nodes`)
reuses a node's view while its inputs stay, and folds again what changed: the
views always equal a fold from nothing."""

from __future__ import annotations

import copy
from typing import Any

from slurmkube.api import well_known as wk
from slurmkube.controllers import lending_observe
from slurmkube.controllers.lending_observe import Cache, observe_nodes
from slurmkube.controllers.node_entry import node_entry
from slurmkube.lending import NodeView
from slurmkube_local.builders import NodeBuilder, bundle, cluster_docs

BUNDLE = bundle(block_size=2)


def node_set(version: str, pool: str = "gpu") -> dict[str, Any]:
    raw = copy.deepcopy(cluster_docs(block_size=2)[1])
    raw["metadata"].update(namespace="default", resourceVersion=version)
    raw["spec"]["nodeSelector"] = {"matchLabels": {"slurmkube.io/pool": pool}}
    return raw


def fold(
    nodes: dict[str, NodeBuilder], version: str = "1", pool: str = "gpu"
) -> tuple[NodeView, ...]:
    cache = Cache(
        nodes={name: node_entry(b.dict()) for name, b in nodes.items()},
        slurmd_pods={},
        node_sets=(node_set(version, pool),),
        workloads=(),
    )
    return observe_nodes(None, BUNDLE.cluster, None, False, cache).nodes  # type: ignore[arg-type]


def fresh(
    nodes: dict[str, NodeBuilder], version: str = "1", pool: str = "gpu"
) -> tuple[NodeView, ...]:
    lending_observe._VIEWS.clear()
    return fold(nodes, version, pool)


def fleet(n: int) -> dict[str, NodeBuilder]:
    return {f"g-{i}": NodeBuilder(f"g-{i}").clique(i // 2).gpus(4) for i in range(n)}


def test_a_second_fold_reuses_every_view() -> None:
    nodes = fleet(6)
    first = fresh(nodes)
    entries = {name: node_entry(b.dict()) for name, b in nodes.items()}
    cache = Cache(nodes=entries, slurmd_pods={}, node_sets=(node_set("1"),), workloads=())
    again = observe_nodes(None, BUNDLE.cluster, None, False, cache)  # type: ignore[arg-type]
    assert again.nodes == first
    reused = observe_nodes(None, BUNDLE.cluster, None, False, cache)  # type: ignore[arg-type]
    assert all(a is b for a, b in zip(again.nodes, reused.nodes, strict=True))


def test_a_changed_node_is_folded_again_and_the_rest_stay() -> None:
    nodes = fleet(6)
    fresh(nodes)
    nodes["g-3"] = nodes["g-3"].label(wk.LABEL_LEASE, "uid-1").taint(wk.TAINT_UNHEALTHY)
    assert fold(nodes) == fresh(nodes)
    assert {v.name: v.lease for v in fold(nodes)}["g-3"] == "uid-1"


def test_nodes_gone_and_added_follow_the_cache() -> None:
    nodes = fleet(6)
    fresh(nodes)
    del nodes["g-0"]
    nodes["g-9"] = NodeBuilder("g-9").clique(9).gpus(4)
    assert [v.name for v in fold(nodes)] == [v.name for v in fresh(nodes)]
    assert "g-0" not in {v.name for v in fold(nodes)}


def test_a_changed_node_set_folds_every_node_again() -> None:
    nodes = fleet(4)
    assert len(fresh(nodes)) == 4
    assert fold(nodes, version="2", pool="other") == ()


def test_a_cluster_no_longer_lent_from_is_forgotten() -> None:
    fresh(fleet(2))
    assert lending_observe._VIEWS
    lending_observe.forget_views([("default", "elsewhere")])
    assert not lending_observe._VIEWS
