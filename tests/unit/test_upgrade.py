"""The Slurm upgrade planner: Slurm's order, the slurmd step by whole blocks,
windows, refusals and failed steps (plan/upgrade.py, plan/upgrade_slurmd.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from slurmkube.plan.upgrade import STEP_DEADLINE_SECONDS, UpgradePlan, plan_upgrade
from slurmkube.plan.upgrade_model import LOGIN, SLURMCTLD, SLURMDBD, SLURMRESTD, UpgradeMemory
from slurmkube.plan.upgrade_window import reservation_name
from tests.unit.upgrade_builders import (
    NEW,
    NODES,
    NOW,
    OLD,
    control,
    memory,
    node_set,
    pods,
    reservation,
    slurm,
    upgrade_input,
    window,
)


def images(plan: UpgradePlan) -> dict[str, str]:
    """Each control-plane component's and node's image, short: old or new."""
    short = {OLD: "old", NEW: "new"}
    out = {c: short[plan.images.of(c)] for c in (SLURMDBD, SLURMCTLD, SLURMRESTD, LOGIN)}
    return out | {n: short[plan.images.of_node(n)] for n in NODES}


def nodes_on(plan: UpgradePlan, image: str) -> set[str]:
    return {n for n in NODES if plan.images.of_node(n) == image}


def test_no_image_change_plans_nothing() -> None:
    plan = plan_upgrade(
        upgrade_input(components=control(NEW), pods=pods(dict.fromkeys(NODES, NEW)))
    )
    assert plan.status is None and plan.condition is None
    assert plan.drain == () and plan.holding == frozenset()
    assert set(images(plan).values()) == {"new"}


def test_unknown_images_count_as_the_wanted_one() -> None:
    """Objects made before images were observed (or not made yet) start no upgrade."""
    plan = plan_upgrade(upgrade_input(components={}, pods=pods(dict.fromkeys(NODES, ""))))
    assert plan.status is None


OLD_NODES = dict.fromkeys(NODES, "old")


@pytest.mark.parametrize(
    ("components", "answering", "phase", "wanted"),
    [
        # slurmdbd first; nothing else moves until it runs the new image, Ready.
        (control(), True, "Slurmdbd", {SLURMDBD: "new", SLURMCTLD: "old"}),
        (control(slurmdbd=NEW, pending=[SLURMDBD]), True, "Slurmdbd", {SLURMCTLD: "old"}),
        (control(slurmdbd=NEW), True, "Slurmctld", {SLURMCTLD: "new", SLURMRESTD: "old"}),
        # Without accounting slurmctld is first.
        (control(accounting=False), True, "Slurmctld", {SLURMCTLD: "new", LOGIN: "old"}),
        # slurmctld rolled out but Slurm does not answer: its step is not done.
        (control(NEW, slurmrestd=OLD, login=OLD), False, "Slurmctld", {SLURMRESTD: "old"}),
        (
            control(NEW, slurmrestd=OLD, login=OLD),
            True,
            "Clients",
            {SLURMRESTD: "new", LOGIN: "new"},
        ),
    ],
)
def test_control_plane_goes_in_slurms_order_and_slurmd_waits(
    components: dict[str, Any], answering: bool, phase: str, wanted: dict[str, str]
) -> None:
    plan = plan_upgrade(
        upgrade_input(components=components, slurm_nodes=slurm() if answering else None)
    )
    assert plan.status is not None and plan.status.phase == phase
    got = images(plan)
    assert {k: got[k] for k in wanted} == wanted
    assert {n: got[n] for n in NODES} == OLD_NODES
    assert plan.drain == ()
    assert plan.condition is not None and plan.condition.status


def test_a_component_not_made_yet_takes_the_old_image_until_its_step() -> None:
    components = control(slurmdbd=NEW)
    del components[SLURMRESTD]
    plan = plan_upgrade(upgrade_input(components=components))
    assert plan.images.of(SLURMRESTD) == OLD and plan.images.of(SLURMCTLD) == NEW


def test_a_new_slurmd_pod_gets_the_old_image_before_the_slurmd_step() -> None:
    plan = plan_upgrade(upgrade_input(components=control(slurmdbd=NEW), pods=pods(missing=["n4"])))
    assert plan.images.of_node("n4") == OLD


@pytest.mark.parametrize(
    ("components", "answering", "reason"),
    [
        (control(slurmdbd=NEW, pending=[SLURMDBD]), True, "SlurmdbdNotReady"),
        (control(slurmdbd=NEW, slurmctld=NEW, pending=[SLURMCTLD]), True, "SlurmctldNotReady"),
        (control(NEW, slurmrestd=OLD, login=OLD), False, "SlurmctldNotAnswering"),
        (control(NEW, pending=[SLURMRESTD]), True, "ClientsNotReady"),
    ],
)
def test_a_step_past_its_deadline_stops_with_a_condition_naming_it(
    components: dict[str, Any], answering: bool, reason: str
) -> None:
    first = plan_upgrade(
        upgrade_input(components=components, slurm_nodes=slurm() if answering else None)
    )
    assert first.status is not None
    stuck = plan_upgrade(
        upgrade_input(
            components=components,
            slurm_nodes=slurm() if answering else None,
            memory=memory(first.status.phase, seconds_ago=STEP_DEADLINE_SECONDS + 1),
        )
    )
    assert stuck.condition is not None and not stuck.condition.status
    assert stuck.condition.reason == reason
    assert "stopped" in stuck.condition.message
    assert images(stuck) == images(first)  # stopped: nothing further moves


def test_a_stopped_step_goes_on_once_its_cause_is_gone() -> None:
    stuck = memory("Slurmctld", seconds_ago=STEP_DEADLINE_SECONDS * 2)
    plan = plan_upgrade(upgrade_input(components=control(NEW, slurmrestd=OLD), memory=stuck))
    assert plan.status is not None and plan.status.phase == "Clients"
    assert plan.condition is not None and plan.condition.status


def test_a_new_spec_image_starts_the_deadline_again() -> None:
    stuck = memory("Slurmdbd", seconds_ago=STEP_DEADLINE_SECONDS * 2, to="slurmkube/slurm:25.11.1")
    plan = plan_upgrade(upgrade_input(components=control(), memory=stuck))
    assert plan.condition is not None and plan.condition.status
    assert plan.status is not None and plan.status.since == NOW


def test_slurmrestd_not_answering_after_slurmctld_is_done_does_not_go_back() -> None:
    plan = plan_upgrade(upgrade_input(slurm_nodes=None, memory=memory("Slurmd")))
    assert plan.status is not None and plan.status.phase == "Slurmd"
    assert plan.drain == () and nodes_on(plan, NEW) == set()


@pytest.mark.parametrize(
    ("running", "to", "words"),
    [
        (NEW, OLD, ["older than", "does not downgrade", "spec.image"]),
        ("slurmkube/slurm:24.11.5", "slurmkube/slurm:24.11.4", ["older than"]),
        ("slurmkube/slurm:23.11.10", NEW, ["5 releases", "upgrade to 25.05 first"]),
        ("slurmkube/slurm:24.05.8", NEW, ["4 releases", "25.11, 25.05, 24.11", "25.11 first"]),
    ],
)
def test_refused_upgrades_change_nothing_and_name_the_field(
    running: str, to: str, words: list[str]
) -> None:
    on = dict.fromkeys(NODES, running)
    plan = plan_upgrade(upgrade_input(to=to, components=control(running), pods=pods(on)))
    assert plan.status is not None and plan.status.phase == "Refused"
    assert plan.condition is not None and not plan.condition.status
    assert plan.condition.reason == "Refused"
    for word in words:
        assert word in plan.condition.message
    assert {plan.images.of(c) for c in (SLURMDBD, SLURMCTLD, SLURMRESTD, LOGIN)} == {running}
    assert nodes_on(plan, running) == set(NODES) and plan.drain == ()


def test_a_partly_upgraded_cluster_cannot_go_back() -> None:
    """slurmdbd converted the database already: the old image again is a downgrade."""
    plan = plan_upgrade(upgrade_input(to=OLD, components=control(slurmdbd=NEW)))
    assert plan.status is not None and plan.status.phase == "Refused"
    assert plan.images.of(SLURMDBD) == NEW


def test_24_11_to_26_05_is_one_step() -> None:
    plan = plan_upgrade(upgrade_input(components=control()))
    assert plan.status is not None and plan.status.phase == "Slurmdbd"


def test_a_tag_without_a_version_upgrades_in_order_unchecked() -> None:
    plan = plan_upgrade(upgrade_input(to="slurmkube/slurm:custom", components=control()))
    assert plan.status is not None and plan.status.phase == "Slurmdbd"


# --- slurmd -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "drain", "new", "holding"),
    [
        # Idle nodes, one unit at a time even though a block has more nodes than
        # maxUnavailable: the whole block is drained.
        ({}, ("n1", "n2"), set(), {"n1", "n2"}),
        # Drained by us and idle: the block gets the new image, held until it runs.
        ({"slurm_nodes": slurm(drained=["n1", "n2"])}, (), {"n1", "n2"}, {"n1", "n2"}),
        # A job on n1: the block waits, old, its other node stays drained.
        (
            {"slurm_nodes": slurm(drained=["n1", "n2"], busy=["n1"])},
            (),
            set(),
            {"n1", "n2"},
        ),
        # Idle blocks first: b1 is busy, so b2 goes.
        ({"slurm_nodes": slurm(busy=["n1"])}, ("n3", "n4"), set(), {"n3", "n4"}),
        # b1 done: b2 next; b1's nodes are released.
        (
            {"pods": pods({"n1": NEW, "n2": NEW})},
            ("n3", "n4"),
            {"n1", "n2"},
            {"n3", "n4"},
        ),
        # b1 settling (n2's new pod not made yet): n2 held, and the budget is used;
        # n1 resumes, its block has no old pod left.
        ({"pods": pods({"n1": NEW}, missing=["n2"])}, (), {"n1", "n2"}, {"n2"}),
        # An admin's drain is kept as it is; the block waits on our drain of n2 only,
        # then switches (the admin's drain stays: Slurm keeps it across the restart).
        ({"slurm_nodes": slurm(admin=["n1"])}, ("n2",), set(), {"n1", "n2"}),
        ({"slurm_nodes": slurm(admin=["n1"], drained=["n2"])}, (), {"n1", "n2"}, {"n1", "n2"}),
    ],
)
def test_slurmd_pods_are_upgraded_whole_block_by_block_once_drained_and_idle(
    fields: dict[str, Any], drain: tuple[str, ...], new: set[str], holding: set[str]
) -> None:
    plan = plan_upgrade(upgrade_input(**fields))
    assert plan.drain == drain
    assert nodes_on(plan, NEW) == new
    assert plan.holding == holding
    assert plan.reason.startswith("slurmkube:") and "26.05.5" in plan.reason


def test_max_unavailable_lets_several_blocks_go_at_once() -> None:
    plan = plan_upgrade(upgrade_input(node_sets=(node_set(maxUnavailable=4),)))
    assert plan.drain == NODES


def test_without_blocks_nodes_go_one_by_one() -> None:
    plan = plan_upgrade(upgrade_input(blocks={}))
    assert plan.drain == ("n1",) and plan.holding == {"n1"}


def test_a_node_without_a_pod_takes_its_blocks_old_image() -> None:
    plan = plan_upgrade(upgrade_input(pods=pods(missing=["n4"]), slurm_nodes=slurm(busy=NODES)))
    assert plan.images.of_node("n4") == OLD


def test_progress_counts_ready_pods_on_the_new_image() -> None:
    plan = plan_upgrade(upgrade_input(pods=pods({"n1": NEW, "n2": NEW})))
    assert plan.status is not None
    assert (plan.status.nodes_done, plan.status.nodes_total) == (2, 4)
    assert plan.status.phase == "Slurmd"


def test_waiting_for_jobs_is_not_a_failure() -> None:
    busy = slurm(drained=NODES, busy=NODES)
    stuck = memory("Slurmd", seconds_ago=STEP_DEADLINE_SECONDS * 10)
    plan = plan_upgrade(upgrade_input(slurm_nodes=busy, memory=stuck))
    assert plan.condition is not None and plan.condition.status
    assert "waiting for jobs on n1, n2" in plan.condition.message


def test_new_pods_not_ready_past_the_deadline_stop_the_slurmd_step() -> None:
    settling = pods({"n1": NEW, "n2": NEW}, missing=["n2"])
    stuck = memory("Slurmd", seconds_ago=STEP_DEADLINE_SECONDS + 1, done=1)
    plan = plan_upgrade(
        upgrade_input(pods=settling, memory=stuck, node_sets=(node_set(maxUnavailable=4),))
    )
    assert plan.condition is not None and not plan.condition.status
    assert plan.condition.reason == "SlurmdNotReady" and "n2" in plan.condition.message
    assert plan.drain == ()  # b2 does not start meanwhile
    assert plan.holding == {"n2"}


def test_the_last_new_pod_not_ready_keeps_the_upgrade_open() -> None:
    last = pods(dict.fromkeys(NODES, NEW), missing=["n4"])
    plan = plan_upgrade(upgrade_input(pods=last, memory=memory("Slurmd", done=2)))
    assert plan.status is not None and plan.status.phase == "Slurmd"
    assert plan.holding == {"n4"} and plan.status.nodes_done == 3


def test_the_last_pod_ready_completes_the_upgrade() -> None:
    done = pods(dict.fromkeys(NODES, NEW))
    plan = plan_upgrade(upgrade_input(pods=done, memory=memory("Slurmd", done=2)))
    assert plan.status is not None and plan.status.phase == "Complete"
    assert (plan.status.nodes_done, plan.status.nodes_total) == (4, 4)
    assert plan.condition is not None and plan.condition.status
    assert plan.holding == frozenset()


def test_on_delete_node_sets_get_the_new_image_and_no_drain() -> None:
    plan = plan_upgrade(upgrade_input(node_sets=(node_set(type="OnDelete"),)))
    assert nodes_on(plan, NEW) == set(NODES) and plan.drain == ()


def test_autoscaled_node_sets_upgrade_as_slurm_powers_nodes_down() -> None:
    # b1 runs old pods; b2's nodes are powered down (no pods).
    plan = plan_upgrade(
        upgrade_input(
            pods=pods(missing=["n3", "n4"]),
            slurm_nodes=slurm(),
            node_sets=(node_set(autoscaled=True),),
        )
    )
    assert nodes_on(plan, NEW) == {"n3", "n4"} and plan.drain == ()


# --- update windows ------------------------------------------------------------------


def test_outside_the_window_nothing_is_drained_but_the_reservation_is_made() -> None:
    plan = plan_upgrade(upgrade_input(node_sets=(node_set(window=window(30)),), reservations={}))
    assert plan.drain == () and nodes_on(plan, NEW) == set()
    assert plan.condition is not None and "outside the update window" in plan.condition.message
    (made,) = plan.reservations
    assert made.name == "slurmkube-upgrade-gpu" and made.nodes == NODES
    assert made.start == NOW + 30 * 60 and made.minutes == 60 and not made.exists


def test_the_reservation_is_made_before_the_slurmd_step() -> None:
    plan = plan_upgrade(
        upgrade_input(
            components=control(), node_sets=(node_set(window=window(30)),), reservations={}
        )
    )
    assert [r.name for r in plan.reservations] == ["slurmkube-upgrade-gpu"]


def test_inside_the_window_blocks_are_drained_under_the_reservation() -> None:
    name = reservation_name("gpu")
    plan = plan_upgrade(
        upgrade_input(
            node_sets=(node_set(window=window(-10)),),
            reservations={name: reservation(name, end=NOW + 50 * 60)},
        )
    )
    assert plan.drain == ("n1", "n2")
    assert plan.reservations == ()  # already there as wanted


def test_a_block_not_switched_when_the_window_closes_is_released() -> None:
    plan = plan_upgrade(
        upgrade_input(
            node_sets=(node_set(window=window(-120)),),
            slurm_nodes=slurm(drained=["n1", "n2"], busy=["n1"]),
            reservations={},
        )
    )
    assert plan.holding == frozenset() and plan.drain == ()
    assert plan.reservations == ()  # the window is over: nothing to reserve


def test_a_switched_block_finishes_after_the_window_closes() -> None:
    plan = plan_upgrade(
        upgrade_input(
            node_sets=(node_set(window=window(-120)),),
            pods=pods({"n1": NEW}, missing=["n2"]),
            reservations={},
        )
    )
    assert plan.holding == {"n2"} and nodes_on(plan, NEW) == {"n1", "n2"}


def test_reservations_go_once_their_node_set_is_upgraded() -> None:
    name = reservation_name("gpu")
    plan = plan_upgrade(
        upgrade_input(
            pods=pods(dict.fromkeys(NODES, NEW)),
            node_sets=(node_set(window=window(-10)),),
            reservations={name: reservation(name, end=NOW + 50 * 60)},
        )
    )
    assert plan.release == (name,)


def test_a_changed_window_updates_the_reservation() -> None:
    name = reservation_name("gpu")
    plan = plan_upgrade(
        upgrade_input(
            node_sets=(node_set(window=window(-10, minutes=120)),),
            reservations={name: reservation(name, end=NOW + 50 * 60)},
        )
    )
    (update,) = plan.reservations
    assert update.exists and update.start is None and update.minutes == 111


def test_long_node_set_names_make_valid_reservation_names() -> None:
    name = reservation_name("x" * 200)
    assert len(name) <= 63 and name.startswith("slurmkube-upgrade-")


def test_status_stays_the_same_while_nothing_changes() -> None:
    """A status that changed each reconcile would be an event, hence another reconcile."""
    cases = [
        upgrade_input(to=OLD, components=control(NEW), pods=pods(dict.fromkeys(NODES, NEW))),
        upgrade_input(components=control()),
        upgrade_input(slurm_nodes=slurm(drained=NODES, busy=NODES)),
    ]
    for case in cases:
        first = plan_upgrade(case)
        assert first.status is not None
        s = first.status
        later = replace(
            case,
            now=NOW + 60,
            memory=UpgradeMemory(s.from_image, s.to_image, s.phase, s.nodes_done, s.since),
        )
        assert plan_upgrade(later).status == first.status


@pytest.mark.parametrize(
    ("nodes", "replaced"),
    [(slurm(busy=["n3"]), False), (None, False), (slurm(), True)],
)
def test_without_a_state_volume_slurmctld_waits_for_running_jobs(
    nodes: dict[str, Any] | None, replaced: bool
) -> None:
    plan = plan_upgrade(
        upgrade_input(components=control(slurmdbd=NEW), slurm_nodes=nodes, state_kept=False)
    )
    assert plan.images.of(SLURMCTLD) == (NEW if replaced else OLD)
    assert plan.condition is not None and plan.condition.status == replaced
    if not replaced:
        assert plan.condition.reason == "SlurmctldStateNotKept"
        assert "spec.controller.persistence.enabled" in plan.condition.message
