"""The Node watcher's memory when the label keys the configs read change (a
cluster made, its topology labels changed): each node's next event counts only
if it changed what the new keys read."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from slurmkube.controllers.memory import State, relabel_nodes_seen
from slurmkube.topology.fleet import (
    config_label_keys,
    config_part,
    node_changed,
    node_fingerprint,
    relabelled,
)
from slurmkube_local.builders import NodeBuilder, bundle

CHURN = "nvidia.com/gfd.timestamp"


def labels_of(node: NodeBuilder) -> dict[str, str]:
    return dict(node.dict()["metadata"]["labels"])


@pytest.mark.parametrize(
    ("before", "change", "counts"),
    [
        (frozenset(), lambda b: b.label(CHURN, "2"), False),
        (None, lambda b: b.label(CHURN, "2"), False),
        (frozenset(), lambda b: b.clique(2), True),
        (None, lambda b: b.clique(2), True),
        (frozenset(), lambda b: b.gpus(2), True),
    ],
    ids=[
        "no cluster yet, churn",
        "every label, churn",
        "no cluster yet, new domain",
        "every label, new domain",
        "no cluster yet, GPUs",
    ],
)
def test_after_new_keys_a_node_counts_only_for_what_they_read(
    before: frozenset[str] | None, change: Callable[[NodeBuilder], NodeBuilder], counts: bool
) -> None:
    keys = config_label_keys(bundle())
    seen: dict[str, int] = {}
    node = NodeBuilder("g-1").clique(1).label(CHURN, "1")
    node_changed(seen, "ADDED", node.dict(), before)
    relabelled(seen, {"g-1": labels_of(node)}, keys)
    assert node_changed(seen, "MODIFIED", change(node).dict(), keys) is counts


def test_a_node_not_seen_yet_is_left_to_its_first_event() -> None:
    seen: dict[str, int] = {}
    relabelled(seen, {"g-1": labels_of(NodeBuilder("g-1").clique(1))}, frozenset())
    assert seen == {}


@pytest.mark.parametrize(
    ("change", "config_reads_it"),
    [
        (lambda b: b.clique(2), True),
        (lambda b: b.gpus(2), True),
        (lambda b: replace(b, ready=False), False),
    ],
    ids=["new domain", "GPUs", "NotReady"],
)
def test_only_labels_and_resources_are_what_a_config_reads(
    change: Callable[[NodeBuilder], NodeBuilder], config_reads_it: bool
) -> None:
    keys = config_label_keys(bundle())
    before = node_fingerprint(NodeBuilder("g-1").clique(1).dict(), keys)
    after = node_fingerprint(change(NodeBuilder("g-1").clique(1)).dict(), keys)
    assert before != after
    assert (config_part(before) != config_part(after)) is config_reads_it


def test_both_node_watchers_forget_the_old_keys_so_churn_wakes_neither() -> None:
    keys = config_label_keys(bundle())
    node = NodeBuilder("g-1").clique(1).label(CHURN, "1")
    State.nodes_seen.clear()
    State.bridge_nodes_seen.clear()
    for seen in (State.nodes_seen, State.bridge_nodes_seen):
        node_changed(seen, "ADDED", node.dict(), None)
    relabel_nodes_seen({"g-1": labels_of(node)}, keys)
    churned = node.label(CHURN, "2").dict()
    assert not node_changed(State.nodes_seen, "MODIFIED", churned, keys)
    assert not node_changed(State.bridge_nodes_seen, "MODIFIED", churned, keys)
