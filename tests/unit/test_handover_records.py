"""The operator's handover records (`controllers/handovers.py`): each stamped before
the action that makes it, so the exporter never sees the effect without the time;
an undrain that did nothing is no handover; the Event carries the exact time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from slurmkube.api import well_known as wk
from slurmkube.controllers import handovers
from slurmkube.goodput.handovers import BACK, LEASE_ENDED, LENT
from slurmkube.kube.client import EventRecord

CLUSTER = {"apiVersion": "slurmkube.io/v1alpha1", "kind": "SlurmCluster",
           "metadata": {"name": "c1", "namespace": "ns"}}  # fmt: skip


class RecordingKube:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, EventRecord | None]] = []

    def event(self, involved: Any, reason: str, message: str, warning: bool = False,
              *, record: EventRecord | None = None) -> None:  # fmt: skip
        self.events.append((reason, message, record))


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    handovers.LAST.clear()
    yield
    handovers.LAST.clear()


def test_a_lease_is_stamped_before_its_label_and_recorded_after() -> None:
    kube = RecordingKube()
    seen: list[str] = []

    def label() -> None:  # what the exporter could see while the patch is in flight
        seen.append(handovers.LAST["n1"][LENT].lease)
        assert not kube.events

    handovers.lent(kube, CLUSTER, "n1", "w1", label)  # type: ignore[arg-type]
    assert seen == ["w1"]
    reason, message, record = kube.events[0]
    assert (reason, message) == (LENT, "n1: lent to Workload w1")
    assert record is not None and record.at == handovers.LAST["n1"][LENT].t
    assert record.annotations == {wk.ANNOTATION_NODE: "n1", wk.ANNOTATION_LEASE: "w1"}


def test_only_an_undrain_after_this_operators_lease_is_a_handover() -> None:
    kube = RecordingKube()
    assert handovers.back(kube, CLUSTER, "n1", lambda: True)  # type: ignore[arg-type]
    assert not kube.events and "n1" not in handovers.LAST  # an upgrade's undrain, say
    handovers.lent(kube, CLUSTER, "n1", "w1", lambda: None)  # type: ignore[arg-type]
    handovers.lease_ended(kube, CLUSTER, "n1", lambda: None)  # type: ignore[arg-type]
    # Not ours to undrain (an admin's drain): no handover, and the next one still counts.
    assert not handovers.back(kube, CLUSTER, "n1", lambda: False)  # type: ignore[arg-type]
    assert BACK not in handovers.LAST["n1"]
    assert handovers.back(kube, CLUSTER, "n1", lambda: True)  # type: ignore[arg-type]
    assert [r for r, _, _ in kube.events] == [LENT, LEASE_ENDED, BACK]
    assert handovers.LAST["n1"][BACK].lease == "w1"
