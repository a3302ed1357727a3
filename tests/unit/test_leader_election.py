"""Leader election by client-go's rules: decisions by table, and a model of two
candidates and an API server in explicit time, where hypothesis interleaves
successful, failed, lost and slow calls with clock steps and checks that no
moment has two leaders."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurmkube.kube.leader_election import (
    Create,
    Decision,
    Elector,
    LeaseRecord,
    Timing,
    Update,
    Wait,
    on_read,
    on_written,
    release,
)

TIMING = Timing(lease_duration=10.0, renew_deadline=7.0, retry_period=2.0)


def record(holder: str = "b", transitions: int = 3, renew: float = 500.0) -> LeaseRecord:
    return LeaseRecord(holder, 10, 400.0, renew, transitions)


def elector(identity: str = "a") -> Elector:
    return Elector(identity, TIMING)


# --- decisions by table ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("holder", "seen_for", "decision"),
    [
        # Held by another, first seen now: wait the whole lease duration.
        ("b", 0.0, Wait),
        ("b", 9.9, Wait),
        # Unchanged for the lease duration by our clock: take over.
        ("b", 10.0, Update),
        # Released, or ours (a restarted replica): at once.
        ("", 0.0, Update),
        ("a", 0.0, Update),
    ],
)
def test_a_candidate_takes_over_only_an_unchanged_lease_after_the_lease_duration(
    holder: str, seen_for: float, decision: type
) -> None:
    lease = (record(holder), "7")
    candidate, _ = on_read(elector(), lease, now=100.0, wall=0.0)
    _, decided = on_read(candidate, lease, now=100.0 + seen_for, wall=0.0)
    assert isinstance(decided, decision)


def test_the_remote_renew_time_is_never_compared_with_the_local_clock() -> None:
    # renewTime a day in the past by our wall clock: still a fresh lease to us.
    _, decided = on_read(elector(), (record(renew=0.0), "7"), now=5.0, wall=86_400.0)
    assert decided == Wait("b", 10.0)


def test_a_changed_record_restarts_the_wait() -> None:
    candidate, _ = on_read(elector(), (record(renew=1.0), "7"), now=0.0, wall=0.0)
    candidate, _ = on_read(candidate, (record(renew=2.0), "8"), now=9.0, wall=0.0)
    _, decided = on_read(candidate, (record(renew=2.0), "8"), now=12.0, wall=0.0)
    assert decided == Wait("b", 7.0)


def test_a_new_resource_version_alone_counts_as_a_renewal() -> None:
    # The holder's wall clock stepped back: same renewTime, but it did write.
    candidate, _ = on_read(elector(), (record(), "7"), now=0.0, wall=0.0)
    _, decided = on_read(candidate, (record(), "8"), now=10.0, wall=0.0)
    assert isinstance(decided, Wait)


def test_a_holder_with_a_longer_lease_duration_is_waited_for() -> None:
    longer = replace(record(), duration_seconds=30)
    candidate, _ = on_read(elector(), (longer, "7"), now=0.0, wall=0.0)
    _, decided = on_read(candidate, (longer, "7"), now=20.0, wall=0.0)
    assert decided == Wait("b", 10.0)


@pytest.mark.parametrize(
    ("holder", "transitions", "acquire_time"),
    [("b", 4, 50.0), ("", 4, 50.0), ("a", 3, 400.0)],
)
def test_a_takeover_counts_a_transition_and_a_renewal_keeps_the_acquire_time(
    holder: str, transitions: int, acquire_time: float
) -> None:
    candidate, _ = on_read(elector(), (record(holder), "7"), now=0.0, wall=50.0)
    _, decided = on_read(candidate, (record(holder), "7"), now=10.0, wall=50.0)
    assert decided == Update(LeaseRecord("a", 10, acquire_time, 50.0, transitions), "7")


def test_a_missing_lease_is_created() -> None:
    _, decided = on_read(elector(), None, now=0.0, wall=50.0)
    assert decided == Create(LeaseRecord("a", 10, 50.0, 50.0, 0))


@pytest.mark.parametrize(
    ("now", "leading"),
    [(99.0, False), (100.0, True), (106.9, True), (107.0, False), (200.0, False)],
)
def test_the_leader_steps_down_at_the_renew_deadline_after_its_last_renew_began(
    now: float, leading: bool
) -> None:
    mine = record("a")
    leader = on_written(elector(), mine, "8", started=100.0, now=101.5)
    assert leader.leading(now) is leading


def test_a_lease_seen_held_by_another_ends_leadership_at_once() -> None:
    leader = on_written(elector(), record("a"), "8", started=100.0, now=100.0)
    seen, _ = on_read(leader, (record("b"), "9"), now=101.0, wall=0.0)
    assert not seen.leading(101.0)


def test_release_steps_down_before_writing_an_empty_holder() -> None:
    leader = on_written(elector(), record("a", transitions=3), "8", started=100.0, now=100.0)
    stepped, write = release(leader, wall=77.0)
    assert not stepped.leading(100.5)
    assert write == Update(LeaseRecord("", 1, 77.0, 77.0, 3), "8")
    assert release(elector(), wall=77.0) == (elector(), None)


@pytest.mark.parametrize(
    ("durations", "field_name"),
    [
        ((10.0, 10.0, 2.0), "renew_deadline"),
        ((10.0, 12.0, 2.0), "renew_deadline"),
        ((10.0, 2.0, 2.0), "retry_period"),
        ((0.0, 7.0, 2.0), "lease_duration"),
        ((10.0, float("nan"), 2.0), "renew_deadline"),
        ((10.0, 7.0, -1.0), "retry_period"),
    ],
)
def test_timings_client_go_rejects_are_rejected_naming_the_field(
    durations: tuple[float, float, float], field_name: str
) -> None:
    with pytest.raises(ValueError, match=field_name):
        Timing(*durations)


# --- the model: two candidates, one API server, explicit time ---------------------------


@dataclass
class Call:
    kind: str  # read, create, update
    decision: Decision | None = None
    applied: bool = False
    result: tuple[LeaseRecord, str] | None = None
    ok: bool = False


@dataclass
class Candidate:
    elector: Elector
    offset: float  # local monotonic clock = real time + offset
    wall_offset: float  # wall clock = real time + wall_offset; steps at will
    call: Call | None = None
    started: float = 0.0  # local time this attempt's read was sent


@dataclass
class World:
    time: float = 0.0
    lease: LeaseRecord | None = None
    version: int = 0
    candidates: list[Candidate] = field(default_factory=list)

    def local(self, c: Candidate) -> float:
        return self.time + c.offset

    def leaders(self) -> list[str]:
        return [c.elector.identity for c in self.candidates if c.elector.leading(self.local(c))]

    def send(self, c: Candidate) -> None:
        if c.call is None:
            c.call, c.started = Call("read"), self.local(c)

    def apply(self, c: Candidate) -> None:
        """The API server handles the request now (linearizable, resourceVersion checked)."""
        call = c.call
        if call is None or call.applied:
            return
        call.applied = True
        if call.kind == "read":
            call.ok = True
            call.result = None if self.lease is None else (self.lease, str(self.version))
            return
        decision = call.decision
        creates = isinstance(decision, Create) and self.lease is None
        updates = isinstance(decision, Update) and decision.version == str(self.version)
        if decision is not None and (creates or updates):
            self._store(call, decision.record)

    def _store(self, call: Call, lease: LeaseRecord) -> None:
        self.version += 1
        self.lease, call.ok, call.result = lease, True, (lease, str(self.version))

    def respond(self, c: Candidate) -> None:
        """The response arrives (a conflict is an error the candidate sees)."""
        call = c.call
        if call is None or not call.applied:
            return
        c.call = None
        now = self.local(c)
        if call.kind == "read":
            c.elector, decision = on_read(c.elector, call.result, now, self.time + c.wall_offset)
            if not isinstance(decision, Wait):
                c.call = Call("update" if isinstance(decision, Update) else "create", decision)
        elif call.ok and call.result is not None:
            c.elector = on_written(c.elector, *call.result, c.started, now)

    def lose(self, c: Candidate) -> None:
        """Timeout or connection error: applied or not, the caller never learns."""
        c.call = None

    def attempt(self, c: Candidate) -> None:
        """A read and the write it decides, each answered at once: progress is common."""
        for _ in range(2):
            self.send(c)
            self.apply(c)
            self.respond(c)

    def release(self, c: Candidate) -> None:
        if c.call is None:
            c.elector, write = release(c.elector, self.time + c.wall_offset)
            if write is not None:
                c.call, c.started = Call("update", write), self.local(c)


# Durations near the timing's edges as well as anywhere; a wall clock set to one of
# a few values, so that two writes can carry the same renewTime.
TICK = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0, 7.0, 10.0]), st.floats(0.0, 12.0))
CANDIDATE = st.integers(0, 1)
STEP = st.one_of(
    st.tuples(st.just("tick"), TICK),
    st.tuples(st.just("attempt"), CANDIDATE),
    st.tuples(st.sampled_from(["send", "apply", "respond", "lose", "release"]), CANDIDATE),
    st.tuples(st.just("wall"), CANDIDATE, st.sampled_from([0.0, 1e3, -1e5])),
)


def world(offsets: tuple[float, float]) -> World:
    return World(
        candidates=[
            Candidate(Elector(name, TIMING), offset, 0.0)
            for name, offset in zip(("a", "b"), offsets, strict=True)
        ]
    )


def run(w: World, steps: list[tuple[object, ...]]) -> None:
    for step in steps:
        match step:
            case ("tick", float(dt)):
                w.time += dt
            case ("wall", int(i), float(wall)):
                w.candidates[i].wall_offset = wall - w.time
            case (str(action), int(i)):
                getattr(w, action)(w.candidates[i])
        assert len(w.leaders()) <= 1, (step, w)


@pytest.mark.parametrize(
    "steps",
    [
        # The leader dies right after its renew; b saw it at once and takes over on
        # the dot: the leader must have stepped down by then.
        [("attempt", 0), ("attempt", 1), ("tick", 10.0), ("attempt", 1)],
        # A renew answered 4 s late: leadership runs from when the attempt began.
        [
            ("send", 0),
            ("apply", 0),
            ("respond", 0),
            ("apply", 0),
            ("attempt", 1),
            ("tick", 4.0),
            ("respond", 0),
            ("tick", 6.0),
            ("attempt", 1),
            ("tick", 0.5),
        ],
        # The holder's wall clock is set back: its renewal repeats the last renewTime.
        [
            ("wall", 0, 0.0),
            ("attempt", 0),
            ("attempt", 1),
            ("tick", 5.0),
            ("wall", 0, 0.0),
            ("attempt", 0),
            ("tick", 5.0),
            ("attempt", 1),
            ("tick", 1.0),
        ],
        # A takeover write that lost the race to the holder's renewal gets a conflict.
        [
            ("attempt", 0),
            ("attempt", 1),
            ("tick", 10.0),
            ("send", 1),
            ("apply", 1),
            ("respond", 1),
            ("attempt", 0),
            ("apply", 1),
            ("respond", 1),
        ],
    ],
    ids=["dies-after-renew", "slow-renew-answer", "wall-clock-set-back", "takeover-race"],
)
def test_known_interleavings_never_have_two_leaders(steps: list[tuple[object, ...]]) -> None:
    run(world((0.0, 0.0)), steps)


@settings(max_examples=1500, deadline=None)
@given(
    offsets=st.tuples(st.floats(-1e6, 1e6), st.floats(-1e6, 1e6)),
    steps=st.lists(STEP, max_size=60),
)
def test_two_candidates_never_lead_at_the_same_moment(
    offsets: tuple[float, float], steps: list[tuple[object, ...]]
) -> None:
    run(world(offsets), steps)


def _attempt(w: World, i: int) -> None:
    w.attempt(w.candidates[i])


@settings(max_examples=100, deadline=None)
@given(offsets=st.tuples(st.floats(-1e6, 1e6), st.floats(-1e6, 1e6)))
def test_a_standby_takes_over_within_lease_duration_plus_a_retry_after_the_leader_dies(
    offsets: tuple[float, float],
) -> None:
    w = world(offsets)
    _attempt(w, 0)
    assert w.leaders() == ["a"]
    _attempt(w, 1)  # b sees a's lease
    # a dies; b retries every retry period.
    waited = 0.0
    while w.leaders() != ["b"]:
        assert waited <= TIMING.lease_duration + TIMING.retry_period
        w.time += TIMING.retry_period
        waited += TIMING.retry_period
        _attempt(w, 1)


def test_a_released_lease_is_taken_over_on_the_next_attempt() -> None:
    w = world((0.0, 50.0))
    _attempt(w, 0)
    _attempt(w, 1)
    w.release(w.candidates[0])
    w.apply(w.candidates[0])
    w.respond(w.candidates[0])
    assert w.leaders() == []
    _attempt(w, 1)
    assert w.leaders() == ["b"]


def test_a_leader_whose_calls_all_fail_steps_down_at_the_renew_deadline() -> None:
    w = world((0.0, 0.0))
    _attempt(w, 0)
    a = w.candidates[0]
    for _ in range(3):
        w.time += TIMING.retry_period
        w.send(a)
        w.lose(a)
    assert w.leaders() == ["a"]  # 6 s after its renew began
    w.time += 1.0
    assert w.leaders() == []
