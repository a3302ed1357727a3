"""A slurmd pod lost while its node ran a job (plan/lost_pods.py): the node is set
DOWN before the pod is made again, so Slurm ends the dead job instead of keeping
it RUNNING until its time limit."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkube.api import well_known as wk
from slurmkube.plan.autoscale import RESUMING, SUSPENDED, UP
from slurmkube.plan.lost_pods import LOST_REASON, lost_while_busy
from slurmkube.plan.model import SlurmNodeView


def node(*, busy: bool = True, down: bool = False, power: str = UP) -> SlurmNodeView:
    return SlurmNodeView("n", busy=busy, drain=False, down=down, power=power)


CASES = {
    "busy, powered up: its job died with the pod": (node(), ("n",)),
    "idle: nothing ran": (node(busy=False), ()),
    "already DOWN: Slurm ended its jobs": (node(down=True), ()),
    "powering up: the job waits for this pod": (node(power=RESUMING), ()),
    "powered down": (node(power=SUSPENDED), ()),
    "unknown to Slurm": (None, ()),
}


@pytest.mark.parametrize(("view", "expected"), CASES.values(), ids=CASES.keys())
def test_only_a_busy_powered_up_node_is_set_down_before_its_pod_is_made(
    view: SlurmNodeView | None, expected: tuple[str, ...]
) -> None:
    assert lost_while_busy(["n"], {} if view is None else {"n": view}) == expected


def test_slurm_silent_sets_nothing_down() -> None:
    assert lost_while_busy(["n"], None) == ()


def test_the_reason_is_ours_so_an_admins_down_is_never_taken_for_it() -> None:
    assert wk.is_ours(LOST_REASON)
    assert not wk.is_health_drain(LOST_REASON)


@given(
    st.dictionaries(st.sampled_from("abcdef"), st.tuples(st.booleans(), st.booleans())),
    st.sets(st.sampled_from("abcdef")),
)
def test_a_node_whose_pod_is_not_made_is_never_set_down(
    states: dict[str, tuple[bool, bool]], created: set[str]
) -> None:
    views = {
        n: SlurmNodeView(n, busy=busy, drain=False, down=down) for n, (busy, down) in states.items()
    }
    lost = lost_while_busy(sorted(created), views)
    assert set(lost) <= created
    assert all(views[n].busy and not views[n].down for n in lost)
    assert set(lost) == {n for n in created if n in views and views[n].busy and not views[n].down}
