"""Operator HA: two operators on one Lease (client-go's leader election rules,
kube/leader_election.py). Kill the leader: the standby takes over. Restart the
API server while both run: at no sampled moment do both say they lead, and the
SlurmCluster still converges. Takeover times are printed (run with -s) and
recorded as test properties; they are measured, not asserted.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slurmkube_e2e.cluster import LocalCluster
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.layout import Layout
from slurmkube_e2e.operator_cluster import API, docs, free_the_nodes, in_ctld, ready_cluster
from slurmkube_e2e.replicas import Replica, Sampler, the_leader
from slurmkube_e2e.waiting import wait_for

pytestmark = pytest.mark.e2e


def test_a_standby_takes_over_and_an_api_server_restart_never_makes_two_leaders(
    kube: Kube,
    kubeconfig: Path,
    namespace: str,
    replicas: list[Replica],
    record_property: pytest.RecordProperty,
) -> None:
    for doc in docs(namespace, replicas=2, max_time="1-00:00:00"):
        kube.apply(doc)
    ready_cluster(kube, namespace, timeout=240)
    first, elected = the_leader(replicas)
    print(f"\nfirst leader {first.name} after {elected:.1f}s")

    # SIGKILL: no release, the standby waits out the lease duration by its clock.
    killed_at = time.monotonic()
    first.process.kill()
    second, _ = the_leader(replicas, besides=first)
    crash_takeover = time.monotonic() - killed_at
    assert second is not first
    print(f"takeover after SIGKILL of {first.name}: {crash_takeover:.1f}s")
    record_property("takeover_after_kill_seconds", round(crash_takeover, 1))
    first.restart()

    # SIGTERM: the leader steps down and releases; the standby takes it at its
    # next try.
    stopped_at = time.monotonic()
    second.terminate()
    third, _ = the_leader(replicas, besides=second)
    clean_takeover = time.monotonic() - stopped_at
    assert third is first
    print(f"takeover after SIGTERM of {second.name}: {clean_takeover:.1f}s")
    record_property("takeover_after_stop_seconds", round(clean_takeover, 1))
    second.process.stop()
    second.restart()

    layout = Layout.from_env()
    if kubeconfig.resolve() != layout.kubeconfig.resolve():
        pytest.skip("restarting the API server needs the local control plane (not kind)")
    sampler = Sampler(replicas)
    sampler.start()
    try:
        # Down longer than the renew deadline: the leader steps down; the lease
        # is still its own when the API server is back, so it takes it again.
        LocalCluster(layout).restart("kube-apiserver", down_seconds=9)
        back_at = time.monotonic()
        leader, _ = the_leader(replicas, timeout=90)
        print(f"leader {leader.name} {time.monotonic() - back_at:.1f}s after the API server")
        time.sleep(5)
    finally:
        sampler.done.set()
        sampler.join(10)
    assert sampler.samples > 50
    assert sampler.overlaps == [], f"two leaders at {len(sampler.overlaps)} samples"

    # The SlurmCluster still converges: a new spec is carried out by the leader.
    for doc in docs(namespace, replicas=3, max_time="2-00:00:00"):
        kube.apply(doc)
    wait_for(
        kube,
        API,
        "SlurmCluster",
        "local",
        lambda o: (o.get("status") or {}).get("nodes", {}).get("idle") == 3,
        namespace=namespace,
        timeout=240,
    )
    assert "MaxTime=2-00:00:00" in in_ctld(namespace, "scontrol", "show", "partition", "gpu")

    free_the_nodes(kube, namespace)
