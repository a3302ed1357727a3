"""A node's health from slurmdbd's node events (`goodput/node_history.py`): the
lines `sacctmgr -P -n list event` prints, the health changes they make with a
node's lends taken out, and the recompute and the live exporter counting a drain
the same."""

from __future__ import annotations

import pytest

from slurmkube.api import well_known as wk
from slurmkube.controllers.goodput_observe import FleetInputs, snapshot
from slurmkube.controllers.node_entry import NodeEntry
from slurmkube.goodput import GoodputLedger, Health, NodeHealthChanged, Side
from slurmkube.goodput.handovers import BACK, LEASE_ENDED, LENT, Handover
from slurmkube.goodput.live import LiveGang, LiveNode, LiveSnapshot, LiveTranslator
from slurmkube.goodput.node_history import (
    Outage,
    event_health,
    health_events,
    lent_spans,
    parse_events,
)
from slurmkube.goodput.offline import recompute
from slurmkube.slurm.models import Node

UP, DRAINED, DOWN = Health.UP, Health.DRAINED, Health.DOWN


@pytest.mark.parametrize(
    ("state", "health"),
    [
        ("DRAINED", DRAINED),
        ("IDLE+DRAIN", DRAINED),
        ("MIXED+DRAIN", DRAINED),
        ("DRAINING", DRAINED),
        ("DOWN", DOWN),
        ("DOWN*", DOWN),
        ("IDLE*", DOWN),
        ("DOWN+DRAIN+NOT_RESPONDING", DOWN),
        ("FAIL", DOWN),
        ("idle+drain", DRAINED),
    ],
)
def test_an_events_state_is_drained_or_down(state: str, health: Health) -> None:
    assert event_health(state) is health


def test_sacctmgr_lines_become_outages() -> None:
    text = (
        "gpu-0|1700000000|1700000060|IDLE+DRAIN|admin: bad gpu\n"
        "gpu-1|1700000010|Unknown|DOWN*|Not responding\n"
        "|1700000000|1700000100|UP|cluster event\n"  # a cluster's: no node
        "gpu-2|1700000020|1700000030|DRAINED|reason with | a bar\n"
        "\n"
    )
    assert parse_events(text) == [
        Outage("gpu-0", 1700000000.0, 1700000060.0, DRAINED, "admin: bad gpu"),
        Outage("gpu-1", 1700000010.0, None, DOWN, "Not responding"),
        Outage("gpu-2", 1700000020.0, 1700000030.0, DRAINED, "reason with | a bar"),
    ]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("gpu-0|2026-12-07T10:00:00|Unknown|DOWN|x\n", "line 1: TimeStart '2026-12-07T10:00:00'"),
        ("gpu-0|1700000000|1700000060|DOWN|x\ngpu-1|1|later|DOWN|y\n", "line 2: TimeEnd 'later'"),
        ("gpu-0 1700000000\n", "line 1: 1 fields"),
    ],
)
def test_a_line_that_is_not_an_event_is_named(text: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        parse_events(text, "events.txt")


def test_power_saving_is_not_an_outage() -> None:
    """slurmdbd records a node powered down ("IDLE~", "Powered down") as an event too;
    the exporter drops such a node from the fleet instead of counting it down."""
    found = parse_events("n|100|160|IDLE~|Powered down\nn|200|Unknown|DOWN~|Powered down\n")
    assert [o.powered_down for o in found] == [True, True]
    assert health_events(found) == []


def test_overlapping_outages_give_the_worst_open_one() -> None:
    outages = [Outage("n", 10.0, 30.0, DRAINED), Outage("n", 15.0, 20.0, DOWN)]
    assert health_events(outages) == [
        NodeHealthChanged(10.0, "n", DRAINED),
        NodeHealthChanged(15.0, "n", DOWN),
        NodeHealthChanged(20.0, "n", DRAINED),
        NodeHealthChanged(30.0, "n", UP),
    ]


def test_a_lend_is_not_an_outage_and_only_the_fleets_nodes_count() -> None:
    handovers = [
        Handover(10.7, "n", LENT, "w"),
        Handover(35.0, "n", LEASE_ENDED, "w"),
        Handover(40.2, "n", BACK),
        Handover(60.0, "n", LENT, "v"),  # lent again, not back yet
    ]
    spans = lent_spans(handovers)
    assert spans == {"n": [(10.0, 40.0), (60.0, None)]}
    outages = [Outage("n", 5.0, 50.0, DRAINED), Outage("other", 0.0, None, DOWN)]
    assert health_events(outages, spans, ["n"]) == [
        NodeHealthChanged(5.0, "n", DRAINED),
        NodeHealthChanged(10.0, "n", UP),
        NodeHealthChanged(40.0, "n", DRAINED),
        NodeHealthChanged(50.0, "n", UP),
    ]


def test_the_recompute_counts_a_drained_node_out_of_the_healthy_gpus() -> None:
    nodes = (LiveNode("n0", 4), LiveNode("n1", 4))
    job = LiveGang("slurm/1", "t", Side.SLURM, 1, 4, 0.0, 0.0, ("n0",), None)
    drained = [Outage("n1", 40.0, 60.0, DRAINED)]
    found = recompute(nodes, [job], (0.0, 100.0), outages=drained)
    assert found.gpu_seconds["drained_down"] == 80.0
    assert found.report.occupancy == pytest.approx(400.0 / 720.0)
    healthy = recompute(nodes, [job], (0.0, 100.0))
    assert healthy.gpu_seconds["drained_down"] == 0.0


def test_live_ticks_with_slurms_reason_time_equal_the_recompute_from_slurmdbd() -> None:
    """The exporter sees the drain and the resume a tick late but takes Slurm's times
    (the reason's, then the resume's `last_busy`), which slurmdbd records too."""
    window = (0.0, 60.0)
    translator = LiveTranslator(start=0.0)
    live = GoodputLedger(window, {"t": 1.0})
    ticks = [
        (0.0, UP, None),
        (10.0, UP, None),
        (20.0, DRAINED, 13.0),  # drained at 13 s, seen at 20 s
        (30.0, DRAINED, 13.0),
        (41.0, UP, 37.0),  # resumed at 37 s, seen at 41 s
        (50.0, UP, 37.0),
    ]
    for t, health, since in ticks:
        node = LiveNode("n1", 4, health, health_since=since)
        shot = LiveSnapshot(t, (LiveNode("n0", 4), node), ())
        live.observe_all(translator.translate(shot))
        live.advance_to(t)
    live.advance_to(window[1])
    nodes = (LiveNode("n0", 4), LiveNode("n1", 4))
    offline = recompute(nodes, [], window, outages=[Outage("n1", 13.0, 37.0, DRAINED)])
    assert live.report().waste.as_dict() == pytest.approx(offline.report.waste.as_dict())
    assert offline.gpu_seconds["drained_down"] == 4 * 24.0


def test_a_resume_counts_from_the_tick_when_slurms_time_is_older_than_the_last_tick() -> None:
    """A `last_busy` before the last tick is an earlier job's end (a resume of a busy
    node does not set it): the resume is the tick's, not that time's."""
    translator = LiveTranslator(start=0.0)
    times = []
    for t, health, since in [(0.0, UP, 5.0), (10.0, DRAINED, 8.0), (20.0, UP, 5.0)]:
        shot = LiveSnapshot(t, (LiveNode("n1", 4, health, health_since=since),), ())
        times += [e.t for e in translator.translate(shot) if isinstance(e, NodeHealthChanged)]
    assert times == [8.0, 20.0]


def test_the_exporter_reads_when_slurm_drained_a_node() -> None:
    """`goodput_observe.snapshot`: a drained or DOWN Slurm node carries its reason time,
    an idle one in service its `last_busy` (a resume's time); a busy or lent node does
    not (Slurm's time is not its health's then)."""

    def slurm(name: str, state: set[str], reason_at: int, busy_at: int = 0) -> Node:
        base = next(iter(state - {"DRAIN"}))
        return Node(
            name, frozenset(state), base, gpus=4, reason_changed_at=reason_at, last_busy=busy_at
        )

    inputs = FleetInputs(
        slurm_nodes=(
            slurm("drained", {"IDLE", "DRAIN"}, 1700000013),
            slurm("down", {"DOWN"}, 1700000011),
            slurm("up", {"IDLE"}, 1700000005),  # a reason cleared: not its health's time
            slurm("resumed", {"IDLE"}, 1700000005, 1700000017),
            slurm("busy", {"ALLOCATED"}, 0, 1700000017),
            slurm("lent", {"IDLE", "DRAIN"}, 1700000009, 1700000003),
        ),
        jobs=(),
        nodes={"lent": NodeEntry(None, None, labels={wk.LABEL_LEASE: "w"})},
        workloads=(),
        checks=frozenset({"check"}),
        domain_label="",
        namespace_teams={},
    )
    found = snapshot(inputs, LiveTranslator(start=0.0).lending_view, 1700000020.0)
    since = {n.name: (n.health, n.health_since) for n in found.nodes}
    assert since == {
        "drained": (DRAINED, 1700000013.0),
        "down": (DOWN, 1700000011.0),
        "up": (UP, None),
        "resumed": (UP, 1700000017.0),
        "busy": (UP, None),
        "lent": (UP, None),
    }
