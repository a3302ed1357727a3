"""One Event per action and reconcile: a count and a sample of names."""

from __future__ import annotations

import pytest

from slurmkube.plan.events import aggregate


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["a"], "deleted 1 slurmd pods: a"),
        (["a", "b", "c"], "deleted 3 slurmd pods: a, b, c"),
        ([f"n{i}" for i in range(10_000)], "deleted 10000 slurmd pods: n0, n1 and 9998 more"),
    ],
)
def test_an_action_on_many_objects_is_one_message(names: list[str], message: str) -> None:
    assert aggregate("deleted", "slurmd pods", names, sample=2 if len(names) > 3 else 10) == message
