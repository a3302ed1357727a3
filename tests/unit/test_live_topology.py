"""Nodes moved between existing topology units without a reconfigure (render/live_topology.py)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from slurmkube.api.grammar import InvalidValue
from slurmkube.api.models import KubeNode
from slurmkube.render import plan_config, render_files
from slurmkube.render.config import SlurmConfig
from slurmkube.render.live_topology import (
    Move,
    before_reconfigure,
    frame,
    moves,
    override_drift,
    still_overridden,
    units_of,
)
from slurmkube.slurm import arguments
from slurmkube.slurm.rest_bodies import node_move_body
from slurmkube_local.builders import NodeBuilder, bundle, nvl_fleet


def fleet(cliques: list[int | None], leaves: list[int]) -> list[KubeNode]:
    """Node i in NVLink domain cliques[i] under leaf switch leaves[i]."""
    nodes = nvl_fleet(domains=1, per_domain=len(cliques))
    return [
        NodeBuilder(n.metadata.name, labels=dict(n.metadata.labels))
        .clique(c)
        .tiers(f"leaf-{leaf}", "spine-01")
        .obj()
        for n, c, leaf in zip(nodes, cliques, leaves, strict=True)
    ]


def config(version: str, cliques: list[int | None], leaves: list[int]) -> SlurmConfig:
    b = bundle(block_size=2, plugin="block", extra={"slurm": {"version": version}})
    return plan_config(b, fleet(cliques, leaves))


# Three domains of two nodes; gpu-0001 and gpu-0003 swap domains and leaves.
BEFORE: tuple[list[int | None], list[int]] = ([1, 1, 2, 2, 3, 3], [1, 1, 1, 1, 2, 2])
SWAPPED: tuple[list[int | None], list[int]] = ([2, 1, 1, 2, 3, 3], [2, 1, 1, 1, 2, 2])


def test_a_swap_between_existing_units_keeps_the_frame_and_the_reconfigure_hash() -> None:
    before, after = config("26.05", *BEFORE), config("26.05", *SWAPPED)
    assert frame(before) == frame(after)
    old, new = render_files(before), render_files(after)
    assert old.hash == new.hash
    assert old.content_hash != new.content_hash
    assert old.files["topology.yaml"] != new.files["topology.yaml"]


def test_the_moves_send_each_moved_node_to_its_units_in_every_topology() -> None:
    before, after = config("26.05", *BEFORE), config("26.05", *SWAPPED)
    planned = moves(units_of(before), units_of(after))
    clique = next(b.name for b in after.topology.blocks if "gpu-0003" in b.nodes)
    leaf = next(s.name for s in after.topology.switches if "gpu-0001" in s.nodes)
    by_node = {node: m.units for m in planned for node in m.nodes}
    assert set(by_node) == {"gpu-0001", "gpu-0003"}
    assert dict(by_node["gpu-0003"])["nvlink"] == clique
    assert dict(by_node["gpu-0001"])["network"] == leaf


@pytest.mark.parametrize(
    ("cliques", "leaves", "why"),
    [
        ([1, 1, 2, 2, 4, 4], BEFORE[1], "a new block"),
        ([1, 1, 2, 2, 2, 2], BEFORE[1], "a block gone"),
        (BEFORE[0], [1, 1, 1, 1, 3, 3], "a new leaf switch"),
        ([1, 1, 2, 2, 3, None], BEFORE[1], "a node leaves the blocks"),
    ],
)
def test_a_unit_that_appears_or_goes_is_a_new_frame_and_so_a_reconfigure(
    cliques: list[int | None], leaves: list[int], why: str
) -> None:
    before, after = config("26.05", *BEFORE), config("26.05", cliques, leaves)
    assert frame(before) != frame(after), why
    assert render_files(before).hash != render_files(after).hash


def test_releases_that_cannot_move_nodes_live_reconfigure_on_every_file_change() -> None:
    before, after = config("24.11", *BEFORE), config("24.11", *SWAPPED)
    old, new = render_files(before), render_files(after)
    assert old.topology_frame is None
    assert old.hash == old.content_hash
    assert old.hash != new.hash


@given(st.permutations([1, 1, 2, 2, 3, 3]))
def test_moves_take_any_placement_of_one_frame_to_any_other(cliques: list[int | None]) -> None:
    before, after = config("26.05", *BEFORE), config("26.05", list(cliques), BEFORE[1])
    # Blocks that change places in the file are a new frame: Slurm forms larger
    # blocks from neighbours in file order, so that takes a reconfigure.
    assume(frame(before) == frame(after))
    placed = dict(units_of(before))
    for move in moves(placed, units_of(after)):
        placed.update(dict.fromkeys(move.nodes, move.units))
    assert placed == units_of(after)


def test_the_scontrol_and_rest_forms_of_a_move() -> None:
    move = Move(("gpu-0001", "gpu-0002"), (("nvlink", "b.1"), ("network", "leaf-2")))
    assert arguments.node_topology_argv(move.nodes, move.units) == [
        "update",
        "NodeName=gpu-0001,gpu-0002",
        "Topology=nvlink:b.1,network:leaf-2",
    ]
    assert node_move_body(move.nodes, move.units) == {
        "name": ["gpu-0001", "gpu-0002"],
        "topology_str": "nvlink:b.1,network:leaf-2",
    }


@pytest.mark.parametrize(
    ("nodes", "units"),
    [
        (("gpu-0001 State=DOWN",), (("nvlink", "b1"),)),
        (("gpu-0001",), (("nvlink", "b1 State=DOWN"),)),
        (("gpu-0001",), (("nvlink,network", "b1"),)),
        (("gpu-0001",), (("nvlink", "b1\nNodeName=x"),)),
        ((), (("nvlink", "b1"),)),
        ((), ()),
    ],
)
def test_a_move_never_carries_more_than_names(
    nodes: tuple[str, ...], units: tuple[tuple[str, str], ...]
) -> None:
    with pytest.raises(InvalidValue):
        arguments.node_topology_argv(nodes, units)
    with pytest.raises(InvalidValue):
        node_move_body(nodes, units)


def test_before_a_reconfigure_moved_nodes_go_where_slurm_can_keep_them_or_nowhere() -> None:
    # Domain 2 goes and a domain 4 comes: gpu-0003 can go to block 1 now, while
    # gpu-0001's new block does not exist before the reconfigure.
    before = units_of(config("26.05", *SWAPPED))
    after = units_of(config("26.05", [4, 4, 1, 1, 3, 3], [2, 1, 1, 1, 2, 2]))
    sent = before_reconfigure(before, after, {"gpu-0001", "gpu-0003"})
    assert sent == (
        Move(("gpu-0001",), ()),
        Move(("gpu-0003",), after["gpu-0003"]),
    )
    assert set(after["gpu-0003"]) <= {u for units in before.values() for u in units}
    assert still_overridden(sent) == {"gpu-0003"}
    # A node the new files place nowhere keeps no override either.
    assert before_reconfigure(before, {}, {"gpu-0001"}) == (Move(("gpu-0001",), ()),)
    assert before_reconfigure(before, after, ()) == ()


def test_an_empty_move_ends_the_override() -> None:
    assert arguments.node_topology_argv(["gpu-0001"], ()) == [
        "update",
        "NodeName=gpu-0001",
        "Topology=",
    ]
    assert node_move_body(["gpu-0001"], ()) == {"name": ["gpu-0001"], "topology_str": ""}


@pytest.mark.parametrize(
    ("shown", "counted", "stray", "off"),
    [
        # Where the operator sent them: nothing to do.
        ({"gpu-0001": "nvlink:b.2"}, {"gpu-0001"}, set(), set()),
        # Powered down: Slurm dropped the override and put it back.
        ({"gpu-0001": ""}, {"gpu-0001"}, set(), {"gpu-0001"}),
        # An admin's move: counted, and back where the labels say.
        ({"gpu-0002": "nvlink:b.2"}, set(), {"gpu-0002"}, {"gpu-0002"}),
        ({"gpu-0002": "nvlink:b.1"}, set(), {"gpu-0002"}, set()),
        # Never moved, placed by the files.
        ({"gpu-0002": ""}, set(), set(), set()),
        # Elsewhere than the files now say.
        ({"gpu-0001": "nvlink:b.1"}, {"gpu-0001"}, set(), {"gpu-0001"}),
        # Not in Slurm's answer, or placed by no file: left alone.
        ({}, {"gpu-0001"}, set(), set()),
        ({"gpu-0009": ""}, {"gpu-0009"}, set(), set()),
    ],
)
def test_slurms_own_overrides_say_what_to_count_and_what_to_move_again(
    shown: dict[str, str], counted: set[str], stray: set[str], off: set[str]
) -> None:
    wanted = {"gpu-0001": (("nvlink", "b.2"),), "gpu-0002": (("nvlink", "b.1"),)}
    assert override_drift(shown, wanted, frozenset(counted)) == (stray, off)
