"""Rotating auth/slurm's key on a live cluster (plan/key_rotation.py): a job that
runs through the rotation completes, a job after it runs, and the old key then
authenticates nothing."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmkube_e2e.kube import Kube
from slurmkube_e2e.operator_cluster import API, docs, in_ctld, job_state, ready_cluster, wait_job
from slurmkube_e2e.waiting import wait_gone

pytestmark = pytest.mark.e2e
ROTATE = "slurmkube.io/rotate-keys"
RECORD = "slurmkube.io/key-rotation"


def _phase(kube: Kube, namespace: str) -> str:
    obj = kube.get(API, "SlurmCluster", "local", namespace=namespace) or {}
    raw = (obj.get("metadata", {}).get("annotations") or {}).get(RECORD)
    return str(json.loads(raw)["phase"]) if raw else ""


def _scontrol_with_key(namespace: str, key_file: Path) -> subprocess.CompletedProcess[str]:
    """`scontrol show config` in the slurmctld pod, authenticating with `key_file` only."""
    env = ("env", "SLURM_SACK_JWKS=/nonexistent", f"SLURM_SACK_KEY={key_file}")
    return subprocess.run(
        [*_exec(namespace), *env, "scontrol", "show", "config"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _exec(namespace: str) -> list[str]:
    runtime = [sys.executable, "-m", "slurmkube_e2e", "exec", "-n", namespace]
    return [*runtime, "--workdir", "/tmp", "local-slurmctld-0", "--"]


def test_a_key_rotation_keeps_a_running_job_and_retires_the_old_key(
    kube: Kube, namespace: str, tmp_path: Path
) -> None:
    try:
        for doc in docs(namespace):
            kube.apply(doc)
        ready_cluster(kube, namespace)
        secret = kube.get("v1", "Secret", "local-auth", namespace=namespace)
        assert secret is not None
        old_key = tmp_path / "old.key"
        old_key.write_bytes(base64.b64decode(secret["data"]["slurm.key"]))
        os.chmod(old_key, 0o600)
        assert _scontrol_with_key(namespace, old_key).returncode == 0  # the key in force

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
        refused = _scontrol_with_key(namespace, old_key)
        assert refused.returncode != 0, refused.stdout
        secret = kube.get("v1", "Secret", "local-auth", namespace=namespace)
        assert secret is not None
        assert base64.b64decode(secret["data"]["slurm.key"]) != old_key.read_bytes()
        keys = json.loads(base64.b64decode(secret["data"]["slurm.jwks"]))["keys"]
        assert len(keys) == 1 and keys[0]["use"] == "default"
    finally:
        kube.delete("v1", "Namespace", namespace)
        wait_gone(kube, "v1", "Namespace", namespace, timeout=180)
