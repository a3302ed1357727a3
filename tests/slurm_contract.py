"""What every SlurmClient backend must do, on every Slurm release.

Shared by the integration tests (24.11 on the host, both backends) and the image
tests (26.05 in its image, slurmrestd writing reservations itself), so the same
assertions hold on every release and data_parser version.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import timedelta

import pytest

from slurmkube.api.well_known import DRAIN_REASON_PREFIX
from slurmkube.slurm import (
    ReservationRequest,
    ReservationUpdate,
    RestClient,
    SlurmClient,
    SlurmNotFound,
    SlurmRejected,
    drain,
    resume_if_ours,
)


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def check_reservation_update_and_delete(
    client: SlurmClient, nodes: tuple[str, str], user: str, shown: Callable[[], str]
) -> None:
    """Created on the first node, moved to both, shortened, then deleted; `shown`
    is `scontrol show reservation` as the cluster prints it."""
    name = unique("upd")
    client.create_reservation(ReservationRequest(name=name, nodes=nodes[:1], users=(user,)))

    updated = client.update_reservation(
        ReservationUpdate(name=name, nodes=nodes, duration=timedelta(minutes=30))
    )

    assert updated.nodes == nodes
    assert updated.duration == timedelta(minutes=30)
    assert client.get_reservation(name) == updated
    assert name in shown()
    client.delete_reservation(name)
    assert name not in {r.name for r in client.list_reservations()}
    with pytest.raises(SlurmNotFound):
        client.get_reservation(name)
    with pytest.raises(SlurmNotFound):
        client.delete_reservation(name)
    with pytest.raises(SlurmNotFound):
        client.update_reservation(ReservationUpdate(name=name, duration=timedelta(minutes=5)))


def check_bad_reservations_are_rejected(
    client: SlurmClient, busy: str, free: tuple[str, str], user: str
) -> None:
    """Slurm's own words for a reservation nobody may use and for busy nodes; a taken
    name is refused and the first reservation of that name is left as it was.
    `busy` runs a job; `free` do not."""
    with pytest.raises(SlurmRejected, match=r"Users.*Accounts must be specified"):
        client.create_reservation(ReservationRequest(name=unique("nobody"), nodes=(busy,)))
    with pytest.raises(SlurmRejected, match="Requested nodes are busy"):
        client.create_reservation(
            ReservationRequest(name=unique("busy"), nodes=(busy,), users=(user,))
        )

    name = unique("dup")
    client.create_reservation(ReservationRequest(name=name, nodes=free[:1], users=(user,)))
    with pytest.raises(SlurmRejected) as err:
        client.create_reservation(ReservationRequest(name=name, nodes=free[1:], users=(user,)))
    assert err.value.message  # Slurm's text, not ours
    assert [r.nodes for r in client.list_reservations() if r.name == name] == [free[:1]]


def check_nodes_read_and_updated(
    rest: RestClient, nodes: set[str], node: tuple[str, tuple[str, ...]], featured: str
) -> None:
    """One data_parser version lists the nodes, reads `node` (name, partitions),
    drains and resumes it, and sets and clears features of `featured`."""
    name, partitions = node
    version = rest.data_parser
    assert {n.name for n in rest.list_nodes()} == nodes
    assert rest.get_node(name).partitions == partitions
    drain(rest, name, f"version {version}")
    assert rest.get_node(name).reason == f"{DRAIN_REASON_PREFIX} version {version}"
    assert resume_if_ours(rest, name)
    assert not rest.get_node(name).drain
    rest.set_node_features(featured, ["x"])
    assert rest.get_node(featured).features == ("x",)
    rest.set_node_features(featured, [])
    assert rest.get_node(featured).features == ()
