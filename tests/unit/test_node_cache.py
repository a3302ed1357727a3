"""The Node cache: what the Node reflector's sink makes of pages and watch events,
and what the Node subscribers are told (controllers/caches.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from slurmkube.controllers import caches
from slurmkube.kube.client import Manifest


def node(name: str, rack: str = "r1", *, heartbeat: str = "t0") -> Manifest:
    return {
        "metadata": {
            "name": name,
            "labels": {"topology.kubernetes.io/rack": rack},
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {"unschedulable": False},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}],
            "allocatable": {"cpu": "8", "memory": "32Gi"},
            "capacity": {"cpu": "8", "memory": "32Gi"},
            "images": [{"names": ["a big image"]}],
        },
    }


@pytest.fixture
def told() -> Iterator[list[tuple[str, Manifest]]]:
    """Every Node event a subscriber is told of, on a fresh cache."""
    seen: list[tuple[str, Manifest]] = []
    saved = caches.NODES
    caches.NODES = caches._Nodes()
    caches.on_node(lambda event_type, body: seen.append((event_type, body)))
    try:
        yield seen
    finally:
        caches.NODES = saved


def feed(calls: list[tuple[str, Any]]) -> None:
    """Hand the sink pages and events from another thread, as the reflector does."""

    async def main() -> None:
        sink = caches.NodeSink(asyncio.get_running_loop())

        def reflector() -> None:
            for method, argument in calls:
                getattr(sink, method)(*argument)

        thread = threading.Thread(target=reflector)
        thread.start()
        while thread.is_alive():
            await asyncio.sleep(0.001)
        await asyncio.sleep(0)  # events posted without a wait run now

    asyncio.run(main())


def test_the_fleet_is_there_only_once_its_first_list_is_through(
    told: list[tuple[str, Manifest]],
) -> None:
    feed([("listed_page", ([node("a"), node("b")],))])
    assert not caches.NODES.listed
    feed([("listed_page", ([node("c")],)), ("listed", (frozenset("abc"),))])
    assert caches.NODES.listed
    assert sorted(caches.NODES.entries) == ["a", "b", "c"]
    assert [event_type for event_type, _ in told] == ["ADDED"] * 3


def test_subscribers_get_the_node_without_what_none_of_them_reads(
    told: list[tuple[str, Manifest]],
) -> None:
    feed([("listed_page", ([node("a")],)), ("listed", (frozenset("a"),))])
    (_, body) = told[0]
    assert body["metadata"] == {
        "name": "a",
        "labels": {"topology.kubernetes.io/rack": "r1"},
    }
    assert "images" not in body["status"]
    assert body["status"]["allocatable"] == {"cpu": "8", "memory": "32Gi"}


def test_a_list_after_the_watch_lost_its_place_deletes_what_went(
    told: list[tuple[str, Manifest]],
) -> None:
    feed(
        [
            ("listed_page", ([node("a"), node("b")],)),
            ("listed", (frozenset("ab"),)),
            ("listed_page", ([node("b", rack="r2")],)),
            ("listed", (frozenset("b"),)),
        ]
    )
    assert list(caches.NODES.entries) == ["b"]
    assert caches.NODES.entries["b"].labels["topology.kubernetes.io/rack"] == "r2"
    assert [(t, b["metadata"]["name"]) for t, b in told[2:]] == [
        ("MODIFIED", "b"),
        ("DELETED", "a"),
    ]


def test_watch_events_change_the_entries_and_a_heartbeat_keeps_the_entry(
    told: list[tuple[str, Manifest]],
) -> None:
    entries_of_a: list[object] = []
    caches.on_node(lambda _, body: entries_of_a.append(caches.NODES.entries.get("a")))
    feed(
        [
            ("listed_page", ([node("a"), node("b")],)),
            ("listed", (frozenset("ab"),)),
            ("event", ("MODIFIED", node("a", heartbeat="t1"))),
            ("event", ("DELETED", node("b"))),
            ("event", ("ADDED", node("c", rack="r9"))),
        ]
    )
    assert sorted(caches.NODES.entries) == ["a", "c"]
    assert caches.NODES.entries["c"].labels["topology.kubernetes.io/rack"] == "r9"
    # A heartbeat changes nothing a conversion reads: the same entry, not a new one.
    assert entries_of_a[0] is entries_of_a[2]
    assert [t for t, _ in told[2:]] == ["MODIFIED", "DELETED", "ADDED"]


def test_a_failing_subscriber_does_not_stop_the_cache_or_the_others(
    told: list[tuple[str, Manifest]],
) -> None:
    def broken(event_type: str, body: Manifest) -> None:
        raise RuntimeError("a bug")

    caches.NODES.subscribers.insert(0, broken)
    feed([("listed_page", ([node("a")],)), ("listed", (frozenset("a"),))])
    assert list(caches.NODES.entries) == ["a"]
    assert len(told) == 1


def test_a_node_that_cannot_be_converted_is_skipped_not_retried_forever(
    told: list[tuple[str, Manifest]],
) -> None:
    broken = node("b")
    broken["status"]["allocatable"] = ["not", "a", "mapping"]
    feed(
        [
            ("listed_page", ([node("a"), broken],)),
            ("listed", (frozenset("ab"),)),
            ("event", ("MODIFIED", broken)),
            ("event", ("ADDED", node("c"))),
        ]
    )
    assert sorted(caches.NODES.entries) == ["a", "c"]
