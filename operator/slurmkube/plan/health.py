"""Node health: which nodes are sick, and what each should get (pure).

One pass over a frozen snapshot (plan.health_model) and `spec.health`:

- sick (a rule says fatal or drain): drained in Slurm with a reason under
  `slurmkube:health:`, its running jobs requeued when fatal, and tainted
  `slurmkube.io/unhealthy:NoSchedule` so Kueue and kube-scheduler place
  nothing there. A node already drained by someone else keeps that drain
  (health writes no reason over it) and still gets the taint and the requeue.
- recovery: once its signals clear, a node is resumed only after an active
  check passed (a reservation holding only that node, then UNDRAIN, then the
  check job inside the reservation); without `activeCheck`, at once. Resume
  is only ever for a drain whose reason is health's: an admin's drain, or
  another slurmkube drain, is never undone here.
- hold: a node that fails `failuresBeforeHold` times (turned sick, failed
  its check) within the window stays drained with a `held` reason until an
  admin resumes it; the reason alone says so, so a lost memory never resumes
  it.
- circuit breaker: at most floor(maxSickShare x fleet) nodes are acted on
  within its window; the rest wait (verdict sick, `waiting`), and
  `circuit.open` says so.
- rack escalation: an NVLink domain with at least `domainSickShare` of its
  nodes taken out is reported for withholding from gangs of the block size;
  its healthy nodes keep their verdict and take small jobs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from slurmkube.api import well_known as wk
from slurmkube.api.models import HealthSpec, RecoverySpec
from slurmkube.plan import health_rules as rules
from slurmkube.plan.health_model import (
    ActionKind,
    CircuitState,
    DomainEscalation,
    HealthAction,
    HealthNode,
    HealthPlan,
    HealthSnapshot,
    NodeMemory,
    NodeVerdict,
    Verdict,
)

__all__ = ["plan_health"]

_EMPTY = NodeMemory()


@dataclass(frozen=True, slots=True)
class _Step:
    verdict: NodeVerdict
    memory: NodeMemory
    # This pass would begin acting on a node not yet acted on in its episode.
    begins: bool = False


class _Node:
    """One node's pass: its observations, and the actions it collects in order."""

    def __init__(self, node: HealthNode, memory: NodeMemory, now: float) -> None:
        self.node, self.memory, self.now = node, memory, now
        view = node.slurm
        self.our_drain = bool(view and view.drain and wk.is_health_drain(view.reason))
        # A lent node's drain is the lease's (slurmkube's own): health writes its
        # reason over it, so the node stays drained in Slurm once the lease ends.
        leased = bool(view and node.lent and wk.is_ours(view.reason))
        self.foreign_drain = bool(view and view.drain and not self.our_drain and not leased)
        self.actions: list[HealthAction] = []

    def add(self, kind: ActionKind, reason: str = "", reservation: str = "") -> None:
        needs_slurm = kind not in (ActionKind.TAINT, ActionKind.UNTAINT)
        if needs_slurm and self.node.slurm is None:
            return
        self.actions.append(HealthAction(kind, self.node.name, reason, reservation))

    def drain(self, reason: str) -> None:
        """Drain unless drained already: ours with this reason, or anyone else's."""
        view = self.node.slurm
        if view is not None and not self.foreign_drain and view.reason != reason:
            self.add(ActionKind.DRAIN, reason=reason)

    def take_out(self, severity: str | None) -> None:
        if severity == "fatal" and self.node.slurm is not None and self.node.slurm.busy:
            self.add(ActionKind.REQUEUE)
        if not self.node.tainted:
            self.add(ActionKind.TAINT)

    def release_check(self) -> None:
        if self.memory.check_started is not None:
            self.add(ActionKind.RELEASE, reservation=rules.check_reservation(self.node.name))

    def verdict(self, verdict: Verdict, finding: rules.Finding | None = None) -> NodeVerdict:
        severity, causes = (finding.severity, finding.causes) if finding else (None, ())
        return NodeVerdict(self.node.name, verdict, severity, causes, tuple(self.actions))


def _or(time: float | None, default: float) -> float:
    """`time` unless unset (a time of 0.0 is a time, not unset)."""
    return default if time is None else time


def _recent(times: Iterable[float], now: float, window: float) -> tuple[float, ...]:
    return tuple(t for t in times if t > now - window)


def _held(n: _Node, memory: NodeMemory, finding: rules.Finding, spec: RecoverySpec) -> _Step:
    reason = rules.held_reason(len(memory.failures), spec.window_seconds, finding.causes)
    if not (n.our_drain and rules.is_held_reason(n.node.slurm.reason if n.node.slurm else "")):
        n.drain(reason)
    n.release_check()
    n.take_out(finding.severity)
    seen = memory.held_seen or n.our_drain
    memory = replace(memory, held=True, held_seen=seen, check_started=None)
    return _Step(n.verdict("held", finding), memory)


def _sick(n: _Node, memory: NodeMemory, finding: rules.Finding, spec: RecoverySpec) -> _Step:
    failures = _recent(memory.failures, n.now, spec.window_seconds)
    if memory.sick_since is None or memory.check_started is not None:
        # A new episode, or the fault came back during its check: one failure more.
        failures += (n.now,)
    memory = replace(memory, sick_since=_or(memory.sick_since, n.now), failures=failures)
    if len(failures) >= spec.failures_before_hold:
        return _held(n, memory, finding, spec)
    assert finding.severity is not None
    n.drain(rules.sick_reason(finding.severity, finding.causes))
    n.release_check()
    n.take_out(finding.severity)
    return _Step(n.verdict("sick", finding), replace(memory, check_started=None))


def _failed_check(n: _Node, memory: NodeMemory, spec: RecoverySpec) -> _Step:
    failures = (*_recent(memory.failures, n.now, spec.window_seconds), n.now)
    memory = replace(memory, failures=failures)
    finding = rules.Finding("drain", (rules.CHECK_FAILED,))
    if len(failures) >= spec.failures_before_hold:
        return _held(n, memory, finding, spec)
    n.drain(rules.sick_reason("drain", finding.causes))
    n.release_check()
    n.take_out("drain")
    memory = replace(memory, check_started=None, check_failed_at=n.now)
    return _Step(n.verdict("sick", finding), memory)


def _healthy(n: _Node, memory: NodeMemory) -> _Step:
    n.release_check()
    if n.our_drain:
        n.add(ActionKind.RESUME)
    if n.node.tainted:
        n.add(ActionKind.UNTAINT)
    memory = replace(memory, sick_since=None, check_started=None, check_failed_at=None)
    return _Step(n.verdict("healthy"), memory)


def _recover(n: _Node, memory: NodeMemory, spec: RecoverySpec) -> _Step:
    """Signals clear on a node health took out: check it, then resume it."""
    if n.foreign_drain or not spec.active_check or n.node.slurm is None:
        # An admin (or another part of slurmkube) drained it since: theirs now.
        # Not a Slurm node: nothing to check or resume, only the taint goes.
        return _healthy(n, memory)
    if n.node.lent:  # no slurmd to check until the lease ends: keep it out meanwhile
        finding = rules.Finding("drain", (rules.CHECK_WAITS_FOR_LEASE,))
        n.take_out("drain")
        return _Step(n.verdict("sick", finding), memory)
    reservation = rules.check_reservation(n.node.name)
    # Our drain found without a record (a lost memory): the episode starts now.
    memory = replace(memory, sick_since=_or(memory.sick_since, n.now))
    if memory.check_started is None:
        failed = memory.check_failed_at
        if failed is not None and n.now - failed < spec.check_interval_seconds:
            finding = rules.Finding("drain", (rules.CHECK_FAILED,))
            n.drain(rules.sick_reason("drain", finding.causes))
            n.take_out("drain")
            return _Step(n.verdict("sick", finding), memory)
        memory = replace(memory, check_started=n.now)
        start = True
    elif n.node.check == "passed":
        return _healthy(n, memory)
    elif n.node.check == "failed" or n.now - memory.check_started > spec.check_timeout_seconds:
        return _failed_check(n, memory, spec)
    else:
        # Started, but no check job seen yet (an apply that did not finish): again.
        start = n.node.check == "none"
    if start:
        # Reservation first: once undrained, only the check may use the node.
        n.add(ActionKind.RESERVE, reservation=reservation)
        if n.our_drain:
            n.add(ActionKind.RESUME)
        n.add(ActionKind.RUN_CHECK, reservation=reservation)
    return _Step(n.verdict("checking"), memory)


def _step(node: HealthNode, memory: NodeMemory, spec: HealthSpec, now: float) -> _Step:
    n = _Node(node, memory, now)
    finding = rules.assess(node, spec.rules)
    reason = node.slurm.reason if node.slurm else ""
    held = memory.held or (n.our_drain and rules.is_held_reason(reason))
    if held and not (memory.held_seen and not n.our_drain):
        step = _held(n, memory, finding, spec.recovery)
    else:
        if held:  # an admin resumed our hold: a fresh start
            memory = NodeMemory(acted_at=memory.acted_at)
        if finding.severity is not None:
            step = _sick(n, memory, finding, spec.recovery)
        elif memory.sick_since is not None or memory.check_started is not None or n.our_drain:
            step = _recover(n, memory, spec.recovery)
        else:
            step = _healthy(n, memory)
    acted = memory.acted_at is not None and memory.acted_at >= _or(memory.sick_since, now)
    begins = step.verdict.verdict in ("sick", "held") and bool(step.verdict.actions) and not acted
    return replace(step, begins=begins)


def _breaker(steps: list[_Step], snap: HealthSnapshot, spec: HealthSpec) -> CircuitState:
    """Act on at most floor(maxSickShare x fleet) nodes per window; the rest wait."""
    window = spec.circuit_breaker.window_seconds
    allowed = math.floor(spec.circuit_breaker.max_sick_share * len(steps) + 1e-9)
    acted = sum(
        1 for m in snap.memory.values() if m.acted_at is not None and m.acted_at > snap.now - window
    )
    beginning = sorted(
        (i for i, s in enumerate(steps) if s.begins),
        key=lambda i: (_or(steps[i].memory.sick_since, snap.now), steps[i].verdict.node),
    )
    waiting: list[str] = []
    for i in beginning:
        step = steps[i]
        last = step.memory.acted_at
        counted = last is not None and last > snap.now - window  # a node counts once
        if counted or acted < allowed:
            acted += 0 if counted else 1
            steps[i] = replace(step, memory=replace(step.memory, acted_at=snap.now))
        else:
            waiting.append(step.verdict.node)
            verdict = replace(step.verdict, verdict="sick", actions=(), waiting=True)
            steps[i] = replace(step, verdict=verdict, memory=replace(step.memory, held=False))
    return CircuitState(bool(waiting), acted, allowed, tuple(waiting))


def _escalations(
    steps: list[_Step], snap: HealthSnapshot, spec: HealthSpec
) -> tuple[DomainEscalation, ...]:
    domains: dict[str, list[str]] = {}
    for node in snap.nodes:
        if node.domain is not None:
            domains.setdefault(node.domain, []).append(node.name)
    out = {
        s.verdict.node
        for s in steps
        if s.verdict.verdict in ("sick", "held", "checking") and not s.verdict.waiting
    }
    found = []
    for domain, members in sorted(domains.items()):
        taken = sum(m in out for m in members)
        if taken and taken >= spec.rack_escalation.domain_sick_share * len(members) - 1e-9:
            reason = rules.domain_reason(domain, taken, len(members))
            found.append(DomainEscalation(domain, tuple(members), taken, reason))
    return tuple(found)


def plan_health(snap: HealthSnapshot, spec: HealthSpec) -> HealthPlan:
    """Verdicts, ordered actions and the next memory for every node of `snap`."""
    steps = [
        _step(node, snap.memory.get(node.name, NodeMemory()), spec, snap.now) for node in snap.nodes
    ]
    circuit = _breaker(steps, snap, spec)
    return HealthPlan(
        verdicts=tuple(s.verdict for s in steps),
        # A node with nothing to remember takes no room (a fleet is mostly healthy).
        memory={s.verdict.node: s.memory for s in steps if s.memory != _EMPTY},
        escalations=_escalations(steps, snap, spec),
        circuit=circuit,
    )
