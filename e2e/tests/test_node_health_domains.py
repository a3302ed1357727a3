"""Node health across an NVLink domain on real slurmd (the local runtime's or eight
real nodes'): half of a 4-node domain turned sick escalates the domain (reported
with a rack-level reason) and the circuit breaker stops acting at its share;
Slurm then starts no gang of the block size there while a 1-node job still runs
on a healthy node of it."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest

from slurmkube_e2e.health import (
    SLOW,
    flags,
    health_spec,
    set_condition,
    slurm_node,
    untaint,
    wait_slurm_node,
)
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.namespaces import delete_namespace
from slurmkube_e2e.operator_cluster import API, docs, in_ctld, job_state, ready_cluster, wait_job
from slurmkube_e2e.operator_cluster import slurm_node as sample_node
from slurmkube_e2e.waiting import wait_for

pytestmark = pytest.mark.e2e
DRAIN = "E2eNvlinkDown"
# The sample's first NVLink domain: local-0..3, or the first four of eight real nodes.
DOMAIN = tuple(sample_node(i) for i in range(4))


def _health(o: dict[str, Any]) -> dict[str, Any]:
    return dict((o.get("status") or {}).get("health") or {})


@pytest.fixture
def cluster(kube: Kube, operator: None) -> Iterator[str]:
    namespace = f"e2e-node-health-domains-{secrets.token_hex(2)}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_for(kube, "v1", "ServiceAccount", "default", lambda _: True, namespace=namespace)
    try:
        cluster_doc, node_set = docs(namespace)
        spec = health_spec("E2eUnusedFatal", DRAIN)
        spec["circuitBreaker"] = {"maxSickShare": 0.25, "windowSeconds": 3600}
        spec["rackEscalation"] = {"domainSickShare": 0.5}
        cluster_doc["spec"]["health"] = spec
        for doc in (cluster_doc, node_set):
            kube.apply(doc)
        ready_cluster(kube, namespace)
        yield namespace
    finally:
        for node in DOMAIN:
            set_condition(kube, node, DRAIN, "False")
        delete_namespace(kube, namespace)
        for node in DOMAIN:
            untaint(kube, node)


def test_half_a_domain_sick_escalates_it_and_the_breaker_stops_at_its_share(
    kube: Kube, cluster: str
) -> None:
    # The breaker's allowance, as health reports it for this fleet.
    reported = wait_for(
        kube, API, "SlurmCluster", "local", lambda o: "circuit" in _health(o),
        namespace=cluster, timeout=SLOW,
    )  # fmt: skip
    allowed = int(_health(reported)["circuit"]["allowed"])
    if allowed < 2:  # a fleet of four nodes: let health act on two (half the domain)
        kube.patch(
            API, "SlurmCluster", "local",
            {"spec": {"health": {"circuitBreaker": {"maxSickShare": 0.5}}}}, cluster,
        )  # fmt: skip
        reported = wait_for(
            kube, API, "SlurmCluster", "local",
            lambda o: _health(o).get("circuit", {}).get("allowed", 0) >= 2,
            namespace=cluster, timeout=SLOW,
        )  # fmt: skip
        allowed = int(_health(reported)["circuit"]["allowed"])
    assert allowed == 2, allowed
    sick = DOMAIN[: allowed + 1]  # one more than the breaker lets health act on
    started = time.monotonic()
    for node in sick:
        set_condition(kube, node, DRAIN, "True")
    drained_in = []
    for node in sick[:allowed]:
        wait_slurm_node(cluster, node, lambda n: "DRAIN" in flags(n))
        drained_in.append(round(time.monotonic() - started, 1))
    print(f"condition set -> DRAIN in Slurm after {drained_in} s (allowed {allowed})")
    opened = wait_for(
        kube,
        API,
        "SlurmCluster",
        "local",
        lambda o: any(
            c["type"] == "HealthCircuitOpen" and c["status"] == "True"
            for c in (o.get("status") or {}).get("conditions") or []
        ),
        namespace=cluster,
        timeout=SLOW,
    )
    health = _health(opened)
    assert health["circuit"]["acted"] == allowed
    assert health["waiting"] == 1
    # The node past the share waits: not drained by health.
    waiting = sick[allowed]
    assert "DRAIN" not in flags(slurm_node(cluster, waiting))
    # Half the domain out (the waiting node does not count): escalated, reported.
    (domain,) = health["domains"]
    assert (domain["out"], domain["size"]) == (allowed, len(DOMAIN))
    assert domain["reason"].startswith("slurmkube:health: rack ")
    # Slurm: a gang of the block size (4) finds no whole block; a 1-node job still
    # runs on a healthy node of the domain.
    gang = in_ctld(cluster, "sbatch", "--parsable", "-N4", "--segment=4", "-w", ",".join(DOMAIN),
                   "--wrap", "true").strip()  # fmt: skip
    small = in_ctld(cluster, "sbatch", "--parsable", "-N1", "-w", DOMAIN[-1], "--wrap", "true")
    wait_job(cluster, small.strip(), {"COMPLETED"}, timeout=SLOW)
    assert job_state(cluster, gang)[0] == "PENDING"
    in_ctld(cluster, "scancel", gang)
