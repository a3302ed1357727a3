"""The bridge lends by the sharing policy (`slurmkube.lending.sharing`) on real parts:
Slurm's queue head keeps the idle nodes it will start on, so a Kueue workload is told
to retry (naming Slurm's queue) and gets nodes only once the head has started; with
`entitledNodes`, Kubernetes gets its share whatever Slurm's queue waits for.

Real slurmctld and slurmd pods on `LENDERS` (one NVLink block), real Kueue. In
`make e2e-extended` (about 110 s; CI's warm budget has no room for it).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from slurmkube_e2e.kube import Kube
from slurmkube_e2e.lending import (
    Bridge,
    events_of,
    expand,
    gpu_job,
    leased_nodes,
    lending_cluster,
    reservations,
    wait_complete,
    wait_workload,
    workload_of,
)
from slurmkube_e2e.operator import OperatorProcess
from slurmkube_e2e.operator_cluster import API, in_ctld, job_state, slurm_node, wait_job
from slurmkube_e2e.waiting import has_condition, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.extended]

# One NVLink block: local-0..3, or the first four of eight real nodes; in name
# order, as Slurm's node lists are compared.
LENDERS = sorted(slurm_node(i) for i in range(4))
KEPT = "Slurm's queue counts on its idle nodes"


@pytest.fixture(scope="module")
def bridge(kube: Kube, operator: OperatorProcess) -> Iterator[Bridge]:
    with lending_cluster(kube, "e2e-share") as found:
        yield found


def sbatch(namespace: str, nodes: list[str], seconds: int) -> str:
    """A job on exactly `nodes`, whole (GPU jobs take whole nodes), with a 1-minute
    time limit (so it ends within the policy's horizon)."""
    return in_ctld(
        namespace,
        "sbatch",
        "--parsable",
        "--exclusive",
        f"-N{len(nodes)}",
        "-w",
        ",".join(nodes),
        "-t",
        "1",
        "--wrap",
        f"sleep {seconds}",
    ).strip()


def retried_for_slurms_queue(kube: Kube, namespace: str, job: str) -> list[str]:
    w = workload_of(kube, namespace, job)
    return [m for m in events_of(kube, namespace, w, "CheckRetry") if KEPT in m] if w else []


def test_slurms_queue_head_keeps_the_idle_nodes_it_will_start_on(
    kube: Kube, bridge: Bridge
) -> None:
    ns = bridge.namespace
    busy = sbatch(ns, LENDERS[:2], seconds=25)
    wait_job(ns, busy, {"RUNNING"})
    # The head wants all four: two idle now, two whose job ends within the horizon.
    head = sbatch(ns, LENDERS, seconds=5)
    wait_job(ns, head, {"PENDING"})
    kube.create(gpu_job("kept-out", pods=1, seconds=5), namespace=ns)
    wait_for(
        kube,
        API,
        "SlurmCluster",
        "local",
        lambda _: bool(retried_for_slurms_queue(kube, ns, "kept-out")),
        namespace=ns,
        timeout=60,
        what="a CheckRetry event naming Slurm's queue",
    )
    message = retried_for_slurms_queue(kube, ns, "kept-out")[0]
    assert "want 4 nodes" in message, message
    # Nothing of the block is reserved for Kubernetes while the head waits, and the
    # head starts on all four nodes as soon as the busy job ends.
    while (state := job_state(ns, head))[0] == "PENDING":
        lending = [name for name in reservations(ns) if name.startswith("slurmkube-")]
        assert not lending, f"reserved for Kubernetes while Slurm's head waits: {lending}"
        time.sleep(1)
    assert sorted(expand(state[1])) == LENDERS, state
    assert job_state(ns, busy)[0] == "COMPLETED"
    # Then the workload gets a node and runs.
    wait_workload(kube, ns, "kept-out", lambda w: has_condition(w, "Admitted"), timeout=150)
    wait_complete(kube, ns, "kept-out")
    wait_job(ns, head, {"COMPLETED"}, timeout=60)


def test_kubernetes_gets_its_entitled_nodes_whatever_slurm_waits_for(
    kube: Kube, bridge: Bridge
) -> None:
    ns = bridge.namespace
    kube.patch(API, "SlurmReservationCheck", bridge.check, {"spec": {"entitledNodes": 1}})
    try:
        # Long enough to outlast the admission on a loaded machine (the lend must
        # choose while it runs); cancelled once the lend is checked.
        busy = sbatch(ns, LENDERS[:2], seconds=120)
        wait_job(ns, busy, {"RUNNING"})
        head = sbatch(ns, LENDERS, seconds=5)
        wait_job(ns, head, {"PENDING"})
        kube.create(gpu_job("entitled", pods=1, seconds=30), namespace=ns)
        admitted = wait_workload(
            kube, ns, "entitled", lambda w: has_condition(w, "Admitted"), timeout=120
        )
        lent = leased_nodes(kube, admitted["metadata"]["uid"])
        assert len(lent) == 1 and lent[0] in LENDERS[2:], lent
        assert job_state(ns, head)[0] == "PENDING"
        in_ctld(ns, "scancel", busy)
        wait_complete(kube, ns, "entitled")
        # The lent node returns, and the head runs once it has all four.
        wait_job(ns, head, {"RUNNING", "COMPLETING", "COMPLETED"}, timeout=180)
        wait_job(ns, head, {"COMPLETED"}, timeout=60)
    finally:
        kube.patch(API, "SlurmReservationCheck", bridge.check, {"spec": {"entitledNodes": None}})
