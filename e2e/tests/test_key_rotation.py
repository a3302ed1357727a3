"""Rotating auth/slurm's key on a live cluster (plan/key_rotation.py): a job that
runs through the rotation completes, a job after it runs, and the old key then
authenticates nothing."""

from __future__ import annotations

import base64
import json
import secrets
import time

import pytest

from slurmkube.build.names import SLURM_GID
from slurmkube_e2e.kube import Kube, Manifest
from slurmkube_e2e.namespaces import delete_namespace
from slurmkube_e2e.operator import OperatorProcess
from slurmkube_e2e.operator_cluster import (
    API,
    LOCAL,
    TOLERATE,
    docs,
    in_ctld,
    job_state,
    pod_log,
    ready_cluster,
    wait_job,
)
from slurmkube_e2e.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.extended]
ROTATE = "slurmkube.io/rotate-keys"
RECORD = "slurmkube.io/key-rotation"


def _phase(kube: Kube, namespace: str) -> str:
    obj = kube.get(API, "SlurmCluster", "local", namespace=namespace) or {}
    raw = (obj.get("metadata", {}).get("annotations") or {}).get(RECORD)
    return str(json.loads(raw)["phase"]) if raw else ""


# A client signs through a sack socket, never with a key of its own: a pod of its
# own runs sackd holding only the key to try (the cluster's slurm.conf beside it,
# so nothing is fetched with that key) and asks slurmctld for its config.
PROBE = """
sackd -f /etc/slurm/slurm.conf -D >/tmp/sackd.log 2>&1 &
for _ in $(seq 30); do [ -S /run/slurm/sack.socket ] && break; sleep 1; done
if timeout 30 scontrol show config >/dev/null 2>/tmp/probe.err; then
  echo PROBE-AUTHENTICATED
else
  echo PROBE-REFUSED; cat /tmp/probe.err /tmp/sackd.log
fi
"""
PROBE_SECONDS = 150


def _probe_pod(namespace: str, name: str, image: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": LOCAL,
            "tolerations": TOLERATE,
            "securityContext": {"fsGroup": SLURM_GID},  # the key is 0440, group slurm
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", PROBE],
                    "env": [
                        {"name": "SLURM_CONF", "value": "/etc/slurm/slurm.conf"},
                        {"name": "SLURM_SACK_KEY", "value": "/etc/slurm/slurm.key"},
                        {"name": "SLURM_SACK_JWKS", "value": "/nonexistent"},
                    ],
                    "volumeMounts": [
                        {"name": "etc", "mountPath": "/etc/slurm", "readOnly": True},
                        {"name": "run", "mountPath": "/run/slurm"},
                    ],
                }
            ],
            "volumes": [
                {
                    "name": "etc",
                    "projected": {
                        "defaultMode": 0o440,
                        "sources": [
                            {"configMap": {"name": "local-slurm-config"}},
                            {"secret": {"name": name}},
                        ],
                    },
                },
                {"name": "run", "emptyDir": {"medium": "Memory"}},
            ],
        },
    }


def _authenticates(kube: Kube, namespace: str, key: bytes) -> bool:
    """Does slurmctld take a credential signed with `key` alone? A refusal must be
    slurmctld's authentication error, not a probe that could not ask."""
    name = f"key-probe-{secrets.token_hex(3)}"
    ctld = kube.get("v1", "Pod", "local-slurmctld-0", namespace=namespace)
    assert ctld is not None
    image = ctld["spec"]["containers"][0]["image"]
    secret = {"slurm.key": base64.b64encode(key).decode()}
    kube.create(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": secret},
        namespace=namespace,
    )
    try:
        kube.create(_probe_pod(namespace, name, image), namespace=namespace)
        wait_for(
            kube,
            "v1",
            "Pod",
            name,
            lambda p: (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
            namespace=namespace,
            timeout=PROBE_SECONDS,
        )
        log = pod_log(namespace, name, "probe")
        print(f"{name}: {log.strip()[-400:]}")
        if "PROBE-AUTHENTICATED" in log:
            return True
        assert "PROBE-REFUSED" in log and "authentication" in log.lower(), log
        return False
    finally:
        kube.delete("v1", "Pod", name, namespace=namespace)
        kube.delete("v1", "Secret", name, namespace=namespace)


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
        assert _authenticates(kube, namespace, old_key)  # the key in force, and the probe works

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
        assert not _authenticates(kube, namespace, old_key)
        secret = kube.get("v1", "Secret", "local-auth", namespace=namespace)
        assert secret is not None
        new_key = base64.b64decode(secret["data"]["slurm.key"])
        assert new_key != old_key
        assert _authenticates(kube, namespace, new_key)
        keys = json.loads(base64.b64decode(secret["data"]["slurm.jwks"]))["keys"]
        assert len(keys) == 1 and keys[0]["use"] == "default"
    finally:
        delete_namespace(kube, namespace)
