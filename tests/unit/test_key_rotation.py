"""Key rotation (plan/key_rotation.py): the steps a rotation takes, what each waits
for, and the key set file auth/slurm reads (build/auth.key_set)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from slurmkube.build.auth import key_set, key_set_keys
from slurmkube.plan.key_rotation import (
    INITIAL_KID,
    KeyEntry,
    Phase,
    Rotation,
    plan_rotation,
)

W = 12.0  # the propagation window


def step(requested: str, record: Rotation | None, current=(), starts=(), now=100.0):  # type: ignore[no-untyped-def]
    return plan_rotation(
        requested, record, tuple(current), starts, now=now, window=W, new_kid="new"
    )


PLAIN = ()
SET = (KeyEntry("old", default=True),)


def test_nothing_asked_nothing_done() -> None:
    assert step("", None, SET) == step("", None, SET)
    assert step("", None, SET).keys is None and not step("", None, SET).reload


def test_a_request_adds_the_new_key_beside_the_default() -> None:
    got = step("r1", None, SET)
    assert got.keys == (KeyEntry("old", default=True), KeyEntry("new"))
    assert got.record is not None and got.record.phase is Phase.ADDING
    assert not got.record.from_plain_key and not got.reload


def test_a_plain_slurm_key_becomes_the_initial_kid() -> None:
    got = step("r1", None, PLAIN)
    assert got.keys == (KeyEntry(INITIAL_KID, default=True), KeyEntry("new"))
    assert got.record is not None and got.record.from_plain_key


def rotation(phase: Phase, since: float = 0.0, **changes: object) -> Rotation:
    base = Rotation("r1", phase, since, old_kid="old", new_kid="new", started=0.0)
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("record", "starts", "now", "keys", "reload", "phase", "waits"),
    [
        # Each write waits out the window before the daemons reload.
        (rotation(Phase.ADDING), (), 5.0, None, False, None, True),
        (rotation(Phase.ADDING), (), 20.0, None, True, Phase.ADDED, False),
        # Added: the new key becomes the default.
        (
            rotation(Phase.ADDED, 20.0),
            (),
            21.0,
            (KeyEntry("old"), KeyEntry("new", default=True)),
            False,
            Phase.SWITCHING,
            False,
        ),
        # ... unless the cluster had a plain key and a job from before still runs.
        (rotation(Phase.ADDED, 20.0, from_plain_key=True), (-5.0,), 21.0, None, False, None, True),
        (
            rotation(Phase.ADDED, 20.0, from_plain_key=True),
            (3.0,),
            21.0,
            (KeyEntry("old"), KeyEntry("new", default=True)),
            False,
            Phase.SWITCHING,
            False,
        ),
        (rotation(Phase.SWITCHING, 21.0), (), 30.0, None, False, None, True),
        (rotation(Phase.SWITCHING, 21.0), (), 40.0, None, True, Phase.RETIRING, False),
        # Retiring: a job started before the switch holds the old key.
        (rotation(Phase.RETIRING, 40.0, switched_at=40.0), (35.0,), 500.0, None, False, None, True),
        (
            rotation(Phase.RETIRING, 40.0, switched_at=40.0),
            (41.0,),
            500.0,
            (KeyEntry("new", default=True),),
            False,
            Phase.FINISHING,
            False,
        ),
        (rotation(Phase.FINISHING, 500.0), (), 505.0, None, False, None, True),
        (rotation(Phase.FINISHING, 500.0), (), 520.0, None, True, Phase.DONE, False),
    ],
)
def test_each_phase_waits_for_what_it_must(  # noqa: PLR0917
    record: Rotation,
    starts: tuple[float, ...],
    now: float,
    keys: tuple[KeyEntry, ...] | None,
    reload: bool,
    phase: Phase | None,
    waits: bool,
) -> None:
    got = step("r1", record, SET, starts, now)
    assert got.keys == keys
    assert got.reload is reload
    assert (got.record.phase if got.record else None) is phase
    assert bool(got.waiting) is waits
    if waits:
        assert got.requeue_after is not None and got.requeue_after > 0


def test_a_finished_rotation_rests_until_a_new_request() -> None:
    done = rotation(Phase.DONE, 520.0)
    assert step("r1", done, SET).keys is None
    current = (KeyEntry("new", default=True),)
    again = plan_rotation("r2", done, current, (), now=600.0, window=W, new_kid="newer")
    assert again.keys == (KeyEntry("new", default=True), KeyEntry("newer"))
    assert again.record is not None and again.record.request == "r2"
    with pytest.raises(ValueError, match="kid new is taken"):
        plan_rotation("r2", done, current, (), now=600.0, window=W, new_kid="new")


def test_a_new_request_during_a_rotation_waits_for_it() -> None:
    got = step("r2", rotation(Phase.SWITCHING, 21.0), SET, (), 40.0)
    assert got.record is not None and got.record.request == "r1"


def test_the_record_survives_a_round_trip() -> None:
    record = rotation(Phase.RETIRING, 40.0, switched_at=40.0, from_plain_key=True)
    assert Rotation.from_dict(json.loads(json.dumps(record.as_dict()))) == record


def test_key_set_is_what_auth_slurm_reads() -> None:
    text = key_set([("a", b"k" * 32, False), ("b", b"\xff" * 1024, True)])
    doc = json.loads(text)
    assert [k["kid"] for k in doc["keys"]] == ["a", "b"]
    assert all(k["kty"] == "oct" and k["alg"] == "HS256" for k in doc["keys"])
    assert [k.get("use") for k in doc["keys"]] == [None, "default"]
    assert "=" not in doc["keys"][1]["k"] and "+" not in doc["keys"][1]["k"]
    assert key_set_keys(text) == {"a": (b"k" * 32, False), "b": (b"\xff" * 1024, True)}
