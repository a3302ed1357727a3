"""What a bridge round gives back: leases and reservations no live workload holds,
and everything a workload answered Retry holds (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from slurmkube.lending.model import (
    CheckUpdate,
    LendingWorld,
    NodeView,
    Release,
    ReservationView,
    WorkloadView,
    reservation_name,
    uid_of_reservation,
)


def unheld_releases(
    world: LendingWorld, holding: dict[str, WorkloadView], known: set[str]
) -> list[Release]:
    keep = set(holding) | world.live_elsewhere
    uids: set[str] = {n.lease for n in world.nodes if n.lease and n.lease not in keep}
    for res in world.reservations:
        uid = uid_of_reservation(res.name)
        if uid is not None and uid not in keep:
            uids.add(uid)
    leases = leases_by_workload(world.nodes)
    reservations = {r.name: r for r in world.reservations}
    return [
        replace(release_of(uid, leases, reservations), orphan=uid not in known)
        for uid in sorted(uids)
    ]


def leases_by_workload(nodes: Iterable[NodeView]) -> dict[str, tuple[str, ...]]:
    """Workload uid -> the nodes labelled as lent to it, by name: one pass over the
    fleet per round, not one per workload."""
    leases: dict[str, list[str]] = {}
    for node in nodes:
        if node.lease:
            leases.setdefault(node.lease, []).append(node.name)
    return {uid: tuple(sorted(names)) for uid, names in leases.items()}


def release_of(
    uid: str,
    leases: Mapping[str, tuple[str, ...]],
    reservations: dict[str, ReservationView],
    check: CheckUpdate | None = None,
) -> Release:
    name = reservation_name(uid)
    return Release(
        uid=uid,
        unlabel=leases.get(uid, ()),
        delete_reservation=name if name in reservations else None,
        check=check,
    )


def leased_nodes(
    uid: str, leases: Mapping[str, tuple[str, ...]], reservations: dict[str, ReservationView]
) -> set[str]:
    res = reservations.get(reservation_name(uid))
    return set(leases.get(uid, ())) | set(res.nodes if res else ())
