"""Rotating auth/slurm's key on a live cluster (plan/key_rotation.py): a job that
runs through the rotation completes, a job after it runs, and the old key then
authenticates nothing."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time

import pytest

from slurmkube_e2e.kube import Kube
from slurmkube_e2e.operator import OperatorProcess
from slurmkube_e2e.operator_cluster import API, docs, in_ctld, job_state, ready_cluster, wait_job
from slurmkube_e2e.waiting import wait_gone

pytestmark = [pytest.mark.e2e, pytest.mark.extended]
ROTATE = "slurmkube.io/rotate-keys"
RECORD = "slurmkube.io/key-rotation"


def _phase(kube: Kube, namespace: str) -> str:
    obj = kube.get(API, "SlurmCluster", "local", namespace=namespace) or {}
    raw = (obj.get("metadata", {}).get("annotations") or {}).get(RECORD)
    return str(json.loads(raw)["phase"]) if raw else ""


# A client signs through a sack socket, never with a key of its own: a sackd holding
# only the key to try, in a mount namespace whose /run hides the pod's sockets.
PROBE = """
set -e
umask 027
echo "$KEY" | base64 -d > /tmp/probe.key
chgrp slurm /tmp/probe.key
mount -t tmpfs tmpfs /run
mkdir -p /run/slurm
SLURM_SACK_JWKS=/nonexistent SLURM_SACK_KEY=/tmp/probe.key \\
  sackd -f /etc/slurm/slurm.conf -D >/tmp/probe-sackd.log 2>&1 &
sackd=$!
sleep 2
rc=0
timeout 30 scontrol show config >/dev/null 2>/tmp/probe.err || rc=$?
kill $sackd
exit $rc
"""


def _authenticates(namespace: str, key: bytes) -> bool:
    """Does slurmctld take a credential signed with `key` alone?"""
    encoded = base64.b64encode(key).decode()
    argv = ["unshare", "-m", "--propagation", "unchanged", "env", f"KEY={encoded}"]
    done = subprocess.run(
        [*_exec(namespace), *argv, "sh", "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    return done.returncode == 0


def _exec(namespace: str) -> list[str]:
    runtime = [sys.executable, "-m", "slurmkube_e2e", "exec", "-n", namespace]
    return [*runtime, "--workdir", "/tmp", "local-slurmctld-0", "--"]


def test_a_key_rotation_keeps_a_running_job_and_retires_the_old_key(
    kube: Kube, operator: OperatorProcess, namespace: str
) -> None:
    try:
        for doc in docs(namespace):
            kube.apply(doc)
        ready_cluster(kube, namespace)
        secret = kube.get("v1", "Secret", "local-auth", namespace=namespace)
        assert secret is not None
        old_key = base64.b64decode(secret["data"]["slurm.key"])
        assert _authenticates(namespace, old_key)  # the key in force, and the probe works

        job = in_ctld(namespace, "sbatch", "--parsable", "-N2", "--wrap", "sleep 45").strip()
        wait_job(namespace, job, {"RUNNING"})
        began = time.monotonic()
        kube.patch(
            API,
            "SlurmCluster",
            "local",
            {"metadata": {"annotations": {ROTATE: "e2e-1"}}},
            namespace,
        )

        seen: list[str] = []
        deadline = time.monotonic() + 300
        while (phase := _phase(kube, namespace)) != "done":
            if not seen or seen[-1] != phase:
                seen.append(phase)
                print(f"rotation phase {phase!r} after {time.monotonic() - began:.1f}s")
            assert time.monotonic() < deadline, f"rotation stuck in {phase!r}: {seen}"
            time.sleep(1)
        print(f"rotation done after {time.monotonic() - began:.1f}s, phases {seen}")
        # The job from before the rotation ran to its end.
        state, _ = job_state(namespace, job)
        assert state == "COMPLETED", state
        after = in_ctld(namespace, "sbatch", "--parsable", "-N2", "--wrap", "hostname").strip()
        wait_job(namespace, after, {"COMPLETED"}, timeout=120)
        assert not _authenticates(namespace, old_key)
        secret = kube.get("v1", "Secret", "local-auth", namespace=namespace)
        assert secret is not None
        new_key = base64.b64decode(secret["data"]["slurm.key"])
        assert new_key != old_key
        assert _authenticates(namespace, new_key)
        keys = json.loads(base64.b64decode(secret["data"]["slurm.jwks"]))["keys"]
        assert len(keys) == 1 and keys[0]["use"] == "default"
    finally:
        kube.delete("v1", "Namespace", namespace)
        wait_gone(kube, "v1", "Namespace", namespace, timeout=180)
