"""Crash consistency: the operator is SIGKILLed at random points while it
reconciles a changing SlurmCluster (scale-out, scale-in with drain, partition
changes that need a reconfigure) and restarted each time. The next operator must
finish what the dead one started: the objects of a clean reconcile, one slurmd
pod per wanted node, nothing orphaned, the config in force, the drains undone.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from typing import Any

import pytest

from slurmkube_e2e.kube import Kube
from slurmkube_e2e.operator import OperatorProcess
from slurmkube_e2e.operator_cluster import (
    API,
    docs,
    free_the_nodes,
    in_ctld,
    ready_cluster,
    slurm_node,
)
from slurmkube_e2e.replicas import STARTED
from slurmkube_e2e.waiting import wait_for

pytestmark = pytest.mark.e2e

KILLS = 20
# Specs the loop moves through: each change gives the next operator real work.
STEPS = [(4, "1-00:00:00"), (2, "2-00:00:00"), (3, "1-12:00:00"), (4, "3-00:00:00")]
OWNED_KINDS = [
    ("v1", "ConfigMap"),
    ("v1", "Service"),
    ("v1", "Secret"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "Deployment"),
    ("v1", "Pod"),
]


def owned_objects(kube: Kube, namespace: str) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for api_version, kind in OWNED_KINDS:
        for obj in kube.list(api_version, kind, namespace=namespace):
            meta = obj["metadata"]
            # slurmrestd's pods belong to its ReplicaSet and have random names.
            if any(o["kind"] == "ReplicaSet" for o in meta.get("ownerReferences") or []):
                continue
            if (meta.get("labels") or {}).get("slurmkube.io/cluster") == "local":
                out[(kind, meta["name"])] = obj
    return out


def _wait_started(operator: OperatorProcess, before: int, timeout: float = 120) -> int:
    """Wait until the operator's log shows one more finished start-up than `before`."""
    deadline = time.monotonic() + timeout
    while (seen := operator.tail(10**7).count(STARTED)) <= before:
        assert time.monotonic() < deadline, f"operator not started:\n{operator.tail()}"
        time.sleep(0.1)
    return seen


def test_operator_killed_twenty_times_mid_reconcile_converges(
    kube: Kube, operator: OperatorProcess, namespace: str
) -> None:
    seed = int(os.environ.get("SLURMKUBE_E2E_SEED", "20261202"))
    rng = random.Random(seed)
    for doc in docs(namespace, replicas=STEPS[0][0], max_time=STEPS[0][1]):
        kube.apply(doc)
    # The first clean reconcile of a Ready cluster: the reference set of objects.
    ready_cluster(kube, namespace, timeout=240)
    reference = set(owned_objects(kube, namespace))

    started = operator.tail(10**7).count(STARTED) - 1  # the running one has started
    for kill in range(KILLS):
        if kill % 5 == 0:
            replicas, max_time = STEPS[(kill // 5) % len(STEPS)]
            for doc in docs(namespace, replicas=replicas, max_time=max_time):
                kube.apply(doc)
        # Start-up (kopf, watches, lease) takes a second on an idle machine and ten
        # under load; reconciles follow each second: waiting for it, these delays
        # cut into the middle of one whatever the load.
        started = _wait_started(operator, started)
        time.sleep(rng.uniform(0.3, 4.0))
        operator.kill()
        operator.start()

    replicas, max_time = STEPS[-1]
    for doc in docs(namespace, replicas=replicas, max_time=max_time):
        kube.apply(doc)
    final = wait_for(
        kube,
        API,
        "SlurmCluster",
        "local",
        # Ready for the last spec: a status written before it (the operators may
        # all die before reconciling it) says Ready for an older generation.
        lambda o: (
            any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (o.get("status") or {}).get("conditions") or []
            )
            and (o.get("status") or {}).get("observedGeneration") == o["metadata"]["generation"]
            and (o.get("status") or {}).get("nodes", {}).get("idle") == replicas
        ),
        namespace=namespace,
        timeout=240,
    )

    objects = owned_objects(kube, namespace)
    assert set(objects) == reference, f"converged objects differ: {set(objects) ^ reference}"
    pods = [o for (kind, _), o in objects.items() if kind == "Pod"]
    slurmd = [p for p in pods if p["metadata"]["labels"].get("app.kubernetes.io/name") == "slurmd"]
    per_node = Counter(p["spec"].get("nodeName") for p in slurmd)
    assert all(n == 1 for n in per_node.values()), f"duplicate slurmd pods: {per_node}"
    assert sorted(per_node) == sorted(slurm_node(i) for i in range(replicas))
    for obj in objects.values():
        owners = obj["metadata"].get("ownerReferences") or []
        assert owners, f"{obj['kind']} {obj['metadata']['name']} has no owner"
    # The last partition spec is in force, and nothing the dead operators drained
    # stayed drained.
    assert f"MaxTime={max_time}" in in_ctld(namespace, "scontrol", "show", "partition", "gpu")
    states = in_ctld(namespace, "sinfo", "-h", "-N", "-o", "%N %T").split("\n")
    assert all("drain" not in line for line in states), states
    assert final["status"]["nodes"]["drain"] == 0
    assert operator.starts > KILLS

    free_the_nodes(kube, namespace)
