"""The lending planner: which nodes to lend to which Workload, and what to undo (pure).

Level based: every call looks at the whole world and says what should be
true, so a crash between any two steps is finished (or undone) by the next
call. One workload moves through these states, each a fact in the world, not
a memory of the planner:

    quota reserved, check Pending
      -> a Slurm reservation `slurmkube-<uid>` on the chosen nodes
         (Slurm starts nothing new there; running jobs go on: IGNORE_JOBS,
         unless busyNodes Requeue requeues them: `slurmkube.lending.requeue`)
      -> once those nodes run no Slurm job: the lease label on each node
         (the cluster reconcile then drains and removes their slurmd pods)
      -> once no slurmd pod is left on them: check Ready, with a podSetUpdate
         nodeSelector slurmkube.io/lease=<uid>

A workload that stops holding nodes (finished, evicted, deactivated, deleted,
or answered Retry) is released: labels removed, then the reservation deleted.
A label or reservation whose workload no longer exists is a leak and is
collected the same way.

Answers to Kueue: Retry (with requeueAfterSeconds) when the nodes are not there
now (Slurm unreachable, pool short, waited too long for Slurm jobs, a lent node
turned fatally sick: `lending.sick`); Rejected only when the fleet could never
hold the request.
"""

from __future__ import annotations

from collections.abc import Iterable

from slurmkube.api import well_known as wk
from slurmkube.lending.model import (
    CheckState,
    CheckUpdate,
    Lend,
    LendingPlan,
    LendingPolicy,
    LendingWorld,
    NewReservation,
    NodeView,
    ReservationView,
    SlurmState,
    WorkloadView,
    reservation_name,
)
from slurmkube.lending.placement_round import PlacementRound
from slurmkube.lending.release import leased_nodes, leases_by_workload, release_of, unheld_releases
from slurmkube.lending.requeue import judge_busy_nodes
from slurmkube.lending.sick import describe, is_fatal, sick_among, tell_ready, tell_retry
from slurmkube.lending.sizing import NodeSizing, size_lend
from slurmkube.placement import BlockPolicy, GangRequest, Verdict

# Slurm starts nothing new on reserved nodes for other users, and a reservation
# can be made while jobs still run there (scontrol(1), Flags=IGNORE_JOBS).
BASE_FLAGS = ("IGNORE_JOBS",)


def plan_lending(world: LendingWorld) -> LendingPlan:
    policies = {p.check: p for p in world.checks}
    workloads = [w for w in world.workloads if w.check in policies]
    holding = {w.uid: w for w in workloads if w.holds_nodes}
    known = {w.uid for w in world.workloads}
    releases = unheld_releases(world, holding, known)
    releasing = {r.uid for r in releases}

    state = PlacementRound(
        world=world,
        nodes={n.name: n for n in world.nodes},
        planned=frozenset(n.name for n in world.nodes if n.planned),
        leases=leases_by_workload(world.nodes),
        reservations={r.name: r for r in world.reservations},
        policies=policies,
    )
    for w in holding.values():
        state.lent_by_check[w.check] = state.lent_by_check.get(w.check, 0) + len(
            leased_nodes(w.uid, state.leases, state.reservations)
        )
    lends: list[Lend] = []
    waiting: list[str] = []
    for w in sorted(holding.values(), key=lambda w: (w.namespace, w.name)):
        lend = _lend(w, policies[w.check], state)
        if lend is None:
            continue
        if lend.check is not None and lend.check.state is CheckState.RETRY:
            # Answering Retry gives the quota back: whatever was reserved goes too.
            releases.append(release_of(w.uid, state.leases, state.reservations, check=lend.check))
            releasing.add(w.uid)
            continue
        if lend.waiting:
            waiting.append(w.uid)
        lends.append(lend)
    lent = sum(1 for n in world.nodes if n.lease and n.lease not in releasing)
    lent += sum(len(lend.label) for lend in lends)
    return LendingPlan(
        lends=tuple(lends), releases=tuple(releases), lent_nodes=lent, waiting=tuple(waiting)
    )


def _lend(w: WorkloadView, policy: LendingPolicy, state: PlacementRound) -> Lend | None:
    res = state.reservations.get(reservation_name(w.uid))
    if w.check_state is CheckState.READY:
        return _running(w, policy, state, res)
    if not state.world.slurm_reachable:
        return Lend(w.uid, check=_retry(w, policy, "Slurm is not reachable; retrying"))
    if res is None:
        return _place(w, policy, state)
    return _progress(w, policy, state.world, state.nodes, res)


def _running(
    w: WorkloadView, policy: LendingPolicy, state: PlacementRound, res: ReservationView | None
) -> Lend | None:
    """An admitted workload: its reservation kept, and it told of nodes turned sick."""
    leased = state.leases.get(w.uid, ())
    create = None
    if res is None and state.world.slurm_reachable and leased:  # deleted under a running one
        create = _new_reservation(w.uid, leased, policy)
    lent = res.nodes if res is not None else leased
    sick = sick_among(lent, state.nodes)
    if not sick:
        return None if create is None else Lend(w.uid, create=create)
    if is_fatal(sick):
        return Lend(w.uid, check=_retry(w, policy, tell_retry(sick)))
    note = tell_ready(sick)
    return Lend(w.uid, create=create, check=_ready(w, policy, lent, note=note), sick=note)


def _place(w: WorkloadView, policy: LendingPolicy, state: PlacementRound) -> Lend:
    sizing = size_lend(w.pod_sets, state.pool_gpus(policy.check))
    if sizing is None:
        return Lend(
            w.uid,
            check=_update(
                w,
                CheckState.REJECTED,
                f"no PodSet of workload {w.name} requests {wk.RESOURCE_GPU}; "
                "the Slurm reservation check lends whole GPU nodes",
            ),
        )
    gang = gang_of(w, sizing, policy)
    if policy.max_nodes is not None:
        if gang.nodes > policy.max_nodes:
            return Lend(
                w.uid,
                check=_update(
                    w,
                    CheckState.REJECTED,
                    f"workload needs {gang.nodes} nodes; check {policy.check} lends at most "
                    f"{policy.max_nodes} (SlurmReservationCheck spec.maxNodes)",
                ),
            )
        lent = state.lent_by_check.get(policy.check, 0)
        if lent + gang.nodes > policy.max_nodes:
            return Lend(
                w.uid,
                check=_retry(
                    w,
                    policy,
                    f"{lent} of at most {policy.max_nodes} nodes are lent already; "
                    f"{gang.nodes} more do not fit",
                ),
            )
    decision = state.decide(policy.check, gang)
    if decision.verdict is Verdict.CAN_NEVER_FIT:
        return Lend(w.uid, check=_update(w, CheckState.REJECTED, decision.message))
    if decision.verdict is Verdict.DOES_NOT_FIT_NOW:
        return Lend(w.uid, check=_retry(w, policy, decision.message))
    state.lent_by_check[policy.check] = state.lent_by_check.get(policy.check, 0) + len(
        decision.nodes
    )
    idle = not decision.busy_nodes
    label = tuple(sorted(decision.nodes)) if idle else ()
    busy = judge_busy_nodes(
        [state.nodes[name] for name in decision.busy_nodes], policy.requeue, waited=0.0
    )
    next_step = "labelling them for the workload" if idle else busy.message
    return Lend(
        w.uid,
        create=_new_reservation(w.uid, tuple(sorted(decision.nodes)), policy),
        requeue=busy.requeue,
        label=label,
        waiting=not idle,
        check=_update(
            w,
            CheckState.PENDING,
            f"reserved {', '.join(sorted(decision.nodes))} in Slurm for {sizing.describe()} "
            f"({decision.message}); " + next_step,
        ),
        placed=decision.message,
    )


def _progress(
    w: WorkloadView,
    policy: LendingPolicy,
    world: LendingWorld,
    nodes: dict[str, NodeView],
    res: ReservationView,
) -> Lend:
    views = [nodes.get(name) for name in res.nodes]
    gone = [name for name, v in zip(res.nodes, views, strict=True) if v is None]
    if gone:
        return Lend(w.uid, check=_retry(w, policy, f"reserved nodes left the pool: {gone}"))
    present = [v for v in views if v is not None]
    sick = sick_among(res.nodes, nodes)
    if sick:  # never lent while sick: these nodes will not come
        return Lend(w.uid, check=_retry(w, policy, f"{describe(sick, lent=False)}; nodes returned"))
    taken = [v.name for v in present if v.lease and v.lease != w.uid]
    if taken:
        return Lend(w.uid, check=_retry(w, policy, f"reserved nodes are lent elsewhere: {taken}"))
    busy = [v for v in present if v.slurm is SlurmState.BUSY]
    if busy:
        waited = world.now - res.start
        if waited > policy.wait_timeout_seconds:
            return Lend(
                w.uid,
                check=_retry(
                    w,
                    policy,
                    f"Slurm jobs on {', '.join(v.name for v in busy)} still run after "
                    f"{waited:.0f}s (busyNodes timeout {policy.wait_timeout_seconds:.0f}s); "
                    "nodes returned",
                ),
            )
        verdict = judge_busy_nodes(busy, policy.requeue, waited)
        return Lend(
            w.uid,
            requeue=verdict.requeue,
            waiting=True,
            check=_update(
                w, CheckState.PENDING, f"reserved {', '.join(res.nodes)}; {verdict.message}"
            ),
        )
    label = tuple(v.name for v in present if v.lease != w.uid)
    with_slurmd = [v.name for v in present if v.has_slurmd_pod]
    if label or with_slurmd:
        return Lend(
            w.uid,
            label=label,
            check=_update(
                w,
                CheckState.PENDING,
                f"reserved {', '.join(res.nodes)}; waits for the slurmd pods on "
                f"{', '.join(with_slurmd or label)} to leave",
            ),
        )
    return Lend(w.uid, check=_ready(w, policy, res.nodes))


def _ready(
    w: WorkloadView, policy: LendingPolicy, nodes: Iterable[str], *, note: str = ""
) -> CheckUpdate:
    updates = []
    for ps in w.pod_sets:
        update: dict[str, object] = {"name": ps.name, "nodeSelector": {wk.LABEL_LEASE: w.uid}}
        if policy.tolerations:
            update["tolerations"] = [dict(t) for t in policy.tolerations]
        updates.append(update)
    return _update(
        w,
        CheckState.READY,
        f"lent {', '.join(nodes)} from Slurm (reservation {reservation_name(w.uid)})"
        + (f"; {note}" if note else ""),
        pod_set_updates=tuple(updates),
    )


def gang_of(
    w: WorkloadView, sizing: NodeSizing, policy: LendingPolicy | None = None
) -> GangRequest:
    """The placement request of a workload sized by `size_lend`."""
    single = any(ps.single_block for ps in w.pod_sets if ps.gpus_per_pod > 0 and ps.count > 0)
    return GangRequest(
        name=f"{w.namespace}/{w.name}",
        nodes=sizing.nodes,
        gpus_per_node=sizing.gpus_per_node,
        block_policy=BlockPolicy.SINGLE_BLOCK if single else BlockPolicy.MIN_BLOCKS,
        # Busy Slurm nodes may be chosen (last), and waited for; under Requeue, those
        # whose jobs may be requeued before those whose jobs must be waited for.
        allow_busy=True,
        prefer_busy_below=policy.requeue.below_priority if policy and policy.requeue else None,
    )


def _new_reservation(uid: str, nodes: tuple[str, ...], policy: LendingPolicy) -> NewReservation:
    flags = tuple(sorted(set(BASE_FLAGS) | set(policy.flags)))
    return NewReservation(reservation_name(uid), nodes, flags)


def _retry(w: WorkloadView, policy: LendingPolicy, message: str) -> CheckUpdate:
    return _update(w, CheckState.RETRY, message, requeue_after=policy.retry_after_seconds)


def _update(
    w: WorkloadView,
    state: CheckState,
    message: str,
    *,
    pod_set_updates: tuple[dict[str, object], ...] = (),
    requeue_after: int | None = None,
) -> CheckUpdate:
    return CheckUpdate(
        namespace=w.namespace,
        workload=w.name,
        check=w.check,
        state=state,
        message=message,
        pod_set_updates=pod_set_updates,
        requeue_after_seconds=requeue_after,
    )
