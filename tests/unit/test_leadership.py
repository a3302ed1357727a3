"""Only the leader acts in kopf's delete handlers; a standby makes kopf retry."""

from __future__ import annotations

import kopf
import pytest

from slurmkube.controllers.leadership import leader_only
from slurmkube.kube.lease import LeaderLease
from tests.unit.test_lease import TIMING, seen_held_by


def lease_held_by(holder: str) -> LeaderLease:
    return seen_held_by(holder)[2]


@pytest.mark.parametrize(
    ("lease", "acts"),
    [(None, False), (lease_held_by("b"), False), (lease_held_by("a"), True)],
    ids=["not-started", "standby", "leader"],
)
def test_a_delete_handler_acts_only_on_the_leader(lease: LeaderLease | None, acts: bool) -> None:
    if acts:
        leader_only(lease, "NodeSet", "ns", "gpu")
        return
    with pytest.raises(kopf.TemporaryError, match="NodeSet ns/gpu: not the leader") as raised:
        leader_only(lease, "NodeSet", "ns", "gpu")
    assert raised.value.delay == (TIMING.retry_period if lease is not None else 1.0)
