"""When a new config is in force in slurmctld, and when the operator reconfigures itself."""

from __future__ import annotations

import datetime as dt

import pytest

from slurmkube.api.slurm_version import SlurmVersion
from slurmkube.plan.reconfigure import (
    ConfigClock,
    advance,
    asks_scontrol,
    loaded_since,
    seconds_left,
    topology_shown,
)
from slurmkube.slurm.topology_text import TopologyRecord, parse_topology

WINDOW = 12.0
EPOCH = dt.datetime(2026, 12, 3, 11, 0, 0, 400_000, tzinfo=dt.UTC)


def clock_after(writes: list[tuple[float, str]]) -> ConfigClock:
    clock = None
    for now, wanted in writes:
        clock = advance(clock, wanted, now, EPOCH + dt.timedelta(seconds=now))
    assert clock is not None
    return clock


@pytest.mark.parametrize(
    ("writes", "now", "left"),
    [
        # First write: the whole window.
        ([(0.0, "A")], 0.0, WINDOW),
        # Rewriting the same content does not restart the clock.
        ([(0.0, "A"), (5.0, "A"), (10.0, "A")], 12.0, 0.0),
        # A new hash restarts it.
        ([(0.0, "A"), (10.0, "B")], 12.0, 10.0),
        # Back to a hash seen before: the pod may still hold B's files, so wait again.
        ([(0.0, "A"), (20.0, "B"), (40.0, "A")], 41.0, 11.0),
    ],
    ids=["first-write", "same-content", "new-hash", "back-to-an-old-hash"],
)
def test_reconfigure_waits_a_window_after_every_configmap_change(
    writes: list[tuple[float, str]], now: float, left: float
) -> None:
    assert seconds_left(clock_after(writes), now, WINDOW) == left


@pytest.mark.parametrize(
    ("loaded", "since"),
    [
        (EPOCH - dt.timedelta(seconds=1), False),
        # Slurm prints whole seconds: a load in the second of the write may have
        # read the old files, so only a later second counts.
        (EPOCH.replace(microsecond=0), False),
        (EPOCH.replace(microsecond=0) + dt.timedelta(seconds=1), True),
        (EPOCH + dt.timedelta(seconds=2), True),
    ],
    ids=["before-the-write", "same-second", "next-second", "after"],
)
def test_a_config_counts_as_loaded_only_after_the_configmap_was_written(
    loaded: dt.datetime, since: bool
) -> None:
    assert loaded_since(clock_after([(0.0, "A")]), loaded) is since


RENDERED_BLOCKS = """\
# topology.conf rendered by slurmkube
BlockName=nvl-a Nodes=gpu-[01-04]
BlockName=nvl-b Nodes=gpu-[05-08]
BlockSizes=4
"""
RENDERED_TREE = """\
SwitchName=leaf-0 Nodes=gpu-[01-02]
SwitchName=leaf-1 Nodes=gpu-[03-04]
SwitchName=spine Switches=leaf-[0-1]
"""


@pytest.mark.parametrize(
    ("rendered", "shown", "matches"),
    [
        (
            RENDERED_BLOCKS,
            "BlockName=nvl-a BlockIndex=0 Nodes=gpu-[01-04] BlockSize=4\n"
            "BlockName=nvl-b BlockIndex=1 Nodes=gpu-[05-08] BlockSize=4\n",
            True,
        ),
        # Aggregated blocks Slurm adds for BlockSizes are not in topology.conf.
        (
            RENDERED_BLOCKS,
            "BlockName=nvl-a BlockIndex=0 Nodes=gpu-[01-04] BlockSize=4\n"
            "BlockName=nvl-b BlockIndex=1 Nodes=gpu-[05-08] BlockSize=4\n"
            "AggregatedBlock=nvl-a,nvl-b BlockIndex=2 Nodes=gpu-[01-08] BlockSize=8\n",
            True,
        ),
        # A node moved in the ConfigMap but not yet in Slurm.
        (
            RENDERED_BLOCKS,
            "BlockName=nvl-a BlockIndex=0 Nodes=gpu-[01-05] BlockSize=4\n"
            "BlockName=nvl-b BlockIndex=1 Nodes=gpu-[06-08] BlockSize=4\n",
            False,
        ),
        # A block Slurm does not have yet.
        (RENDERED_BLOCKS, "BlockName=nvl-a Nodes=gpu-[01-04]\n", False),
        # Upper switches: Slurm also prints the nodes below them; compare the switches.
        (
            RENDERED_TREE,
            "SwitchName=leaf-0 Level=0 LinkSpeed=1 Nodes=gpu-[01-02]\n"
            "SwitchName=leaf-1 Level=0 LinkSpeed=1 Nodes=gpu-[03-04]\n"
            "SwitchName=spine Level=1 LinkSpeed=1 Nodes=gpu-[01-04] Switches=leaf-[0-1]\n",
            True,
        ),
        (
            RENDERED_TREE,
            "SwitchName=leaf-0 Level=0 LinkSpeed=1 Nodes=gpu-[01-02]\n"
            "SwitchName=leaf-1 Level=0 LinkSpeed=1 Nodes=gpu-[03-04]\n"
            "SwitchName=spine Level=1 LinkSpeed=1 Nodes=gpu-[01-04] Switches=leaf-0\n",
            False,
        ),
        # No topology plugin: nothing to show.
        ("", "", True),
    ],
    ids=[
        "blocks-match",
        "aggregated-blocks-ignored",
        "node-not-moved-yet",
        "block-missing",
        "tree-match",
        "tree-switch-missing",
        "no-topology",
    ],
)
def test_topology_is_shown_when_every_rendered_block_and_switch_is(
    rendered: str, shown: str, matches: bool
) -> None:
    assert topology_shown(parse_topology(rendered), parse_topology(shown)) is matches


def test_topology_text_parses_records_and_ignores_comments_and_other_keys() -> None:
    assert parse_topology(RENDERED_TREE + "# SwitchName=ghost Nodes=x\nBlockSizes=4\n") == {
        "leaf-0": TopologyRecord(frozenset({"gpu-01", "gpu-02"}), frozenset()),
        "leaf-1": TopologyRecord(frozenset({"gpu-03", "gpu-04"}), frozenset()),
        "spine": TopologyRecord(frozenset(), frozenset({"leaf-0", "leaf-1"})),
    }


@pytest.mark.parametrize(
    ("client", "slurmctld", "asked"),
    [
        (SlurmVersion(24, 11), "24.11", True),
        (SlurmVersion(26, 5), "26.05", True),
        # 24.11's scontrol has no `show topoconf`; a newer client is unsupported.
        (SlurmVersion(24, 11), "26.05", False),
        (SlurmVersion(26, 5), "24.11", False),
        (None, "24.11", False),
        (SlurmVersion(24, 11), "", False),
    ],
)
def test_the_operators_scontrol_is_asked_only_on_slurmctlds_release(
    client: SlurmVersion | None, slurmctld: str, asked: bool
) -> None:
    assert asks_scontrol(client, slurmctld) is asked
