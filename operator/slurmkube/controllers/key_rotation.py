"""kopf wiring of auth/slurm key rotation: observe -> `plan_rotation` -> apply.

A SlurmCluster whose `slurmkube.io/rotate-keys` annotation has a value its
`slurmkube.io/key-rotation` record has not finished gets a key in this
module's work queue; a pass reads the record, the cluster's auth Secret and
the start times of Slurm's running jobs, and carries out the planner's step:
the Secret's `slurm.jwks` (and, at the end, `slurm.key`) written, every
daemon made to reload its keys (`scontrol reconfigure` re-executes slurmctld,
slurmd and sackd; slurmdbd's pod is deleted, it reads keys only at start),
the record and an Event. Key bytes are made here, never logged. Only the
leader acts; a cluster that names its own key Secret (`spec.auth.slurmKeySecret`)
is left alone: whoever owns that Secret rotates it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import secrets
import time
import uuid
from collections.abc import Mapping
from typing import Any

import kopf

from slurmkube.api import well_known as wk
from slurmkube.api.models import SlurmCluster, from_object
from slurmkube.build.auth import key_set, key_set_keys
from slurmkube.build.names import names_of
from slurmkube.build.pod import SLURM_JWKS, SLURM_KEY
from slurmkube.controllers.memory import State, leading
from slurmkube.controllers.queue import Key, Result, WorkQueue
from slurmkube.kube.client import Kube, Manifest
from slurmkube.plan.key_rotation import (
    INITIAL_KID,
    KeyEntry,
    KeyStep,
    Phase,
    Rotation,
    plan_rotation,
)
from slurmkube.slurm.errors import SlurmError

log = logging.getLogger(__name__)
RUNNING = frozenset({"RUNNING", "SUSPENDED", "STOPPED", "COMPLETING"})
KEY_BYTES = 1024  # as the first slurm.key


async def _pass(key: Key) -> Result:
    kube = State.kube
    if kube is None:
        return Result(requeue_after=1.0)
    after = await asyncio.to_thread(rotate_keys, kube, key)
    return Result(requeue_after=after)


PASSES: WorkQueue[Key] = WorkQueue(_pass, name="key-rotation")
TASK: list[asyncio.Task[None]] = []


def _record(annotations: Mapping[str, str]) -> Rotation | None:
    """The rotation's record; None when there is none or it is not one we wrote (a
    hand edit): a rotation then starts afresh, adding a new key beside the default."""
    raw = annotations.get(wk.ANNOTATION_KEY_ROTATION)
    if not raw:
        return None
    try:
        return Rotation.from_dict(json.loads(raw))
    except (ValueError, KeyError, TypeError) as err:
        log.warning("key rotation record unreadable, ignored: %s", err)
        return None


@kopf.on.event(wk.GROUP, "v1alpha1", "slurmclusters", id="key-rotation")
def cluster_event(
    type: str | None,
    namespace: str | None,
    name: str,
    annotations: kopf.Annotations,
    spec: kopf.Spec,
    **_: Any,
) -> None:
    key = (wk.namespace_or_default(namespace), name)
    if (spec.get("auth") or {}).get("slurmKeySecret"):
        PASSES.forget(key)  # its own key Secret: rotated by whoever owns it
        return
    requested = annotations.get(wk.ANNOTATION_ROTATE_KEYS, "")
    record = _record(annotations)
    # A rotation under way goes on even if its request is taken back: its key set is
    # consistent in every phase, but only its end retires the old key.
    running = record is not None and record.phase is not Phase.DONE
    wanted = bool(requested) and (record is None or record.request != requested)
    if type == "DELETED" or not (running or wanted):
        PASSES.forget(key)
    else:
        PASSES.add(key)


@kopf.on.startup()
async def start_key_rotation(**_: Any) -> None:
    TASK.append(asyncio.get_running_loop().create_task(PASSES.run(leading)))


@kopf.on.cleanup()
async def stop_key_rotation(**_: Any) -> None:
    for task in TASK:
        task.cancel()


def _current(
    secret: Manifest | None,
) -> tuple[dict[str, tuple[bytes, bool]], tuple[KeyEntry, ...]]:
    """The Secret's key bytes by kid, and its key set as the planner sees it: none for
    a plain slurm.key (its tokens carry no kid, plan/key_rotation.py), whose bytes
    are the old key under INITIAL_KID."""
    data = (secret or {}).get("data") or {}
    if SLURM_JWKS in data:
        keys = key_set_keys(base64.b64decode(data[SLURM_JWKS]).decode())
        return keys, tuple(KeyEntry(k, d) for k, (_, d) in sorted(keys.items()))
    if SLURM_KEY in data:
        return {INITIAL_KID: (base64.b64decode(data[SLURM_KEY]), True)}, ()
    return {}, ()


def rotate_keys(kube: Kube, key: Key) -> float | None:
    """One pass (module docstring); returns when to come back (None: done)."""
    namespace, name = key
    obj = kube.get(wk.API_VERSION, "SlurmCluster", name, namespace)
    if obj is None or obj["metadata"].get("deletionTimestamp"):
        return None
    cluster = from_object(SlurmCluster, obj)
    annotations = obj["metadata"].get("annotations") or {}
    requested = annotations.get(wk.ANNOTATION_ROTATE_KEYS, "")
    if cluster.spec.auth.slurm_key_secret:
        return None  # cluster_event keeps such clusters out; the spec changed since
    secret_name = names_of(cluster).auth
    secret = kube.get("v1", "Secret", secret_name, namespace)
    keys, current = _current(secret)
    rest = State.clients.rest(kube, cluster)
    if rest is None or not keys:
        return 5.0  # slurmrestd or the keys not there yet
    try:
        starts = [
            j.start_time.timestamp()
            for j in rest.list_jobs(RUNNING)
            if j.start_time is not None and j.state & RUNNING
        ]
    except SlurmError as err:
        log.info("key rotation: jobs not read cluster=%s/%s error=%s", namespace, name, err)
        return 5.0
    step = plan_rotation(
        requested,
        _record(annotations),
        current,
        starts,
        now=time.time(),
        window=State.settings.propagation_seconds,
        new_kid=str(uuid.uuid4()),
    )
    try:
        _apply(kube, obj, cluster, step, keys)
    except SlurmError as err:
        log.warning("key rotation step failed cluster=%s/%s error=%s", namespace, name, err)
        return 5.0
    if step.waiting:
        log.info("key rotation waits cluster=%s/%s: %s", namespace, name, step.waiting)
    return step.requeue_after


def _apply(
    kube: Kube,
    obj: Manifest,
    cluster: SlurmCluster,
    step: KeyStep,
    keys: dict[str, tuple[bytes, bool]],
) -> None:
    namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    if step.keys is not None:
        material = {kid: key for kid, (key, _) in keys.items()}
        entries = [
            (k.kid, material.get(k.kid) or secrets.token_bytes(KEY_BYTES), k.default)
            for k in step.keys
        ]
        data = {SLURM_JWKS: base64.b64encode(key_set(entries).encode()).decode()}
        if len(entries) == 1:  # the old key is gone: slurm.key is the new one too
            data[SLURM_KEY] = base64.b64encode(entries[0][1]).decode()
        names = names_of(cluster)
        kube.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": names.auth, "namespace": namespace},
                "data": data,
            }
        )
        # The kubelet copies a changed Secret into a pod's volume at its next periodic
        # sync (about a minute, beyond the propagation window); a pod update makes it
        # sync that pod now, as the config hash does for slurmctld (build/reloader.py).
        digest = hashlib.sha256(data[SLURM_JWKS].encode()).hexdigest()[:16]
        selector = f"{wk.LABEL_CLUSTER}={name}"
        for pod in kube.list("v1", "Pod", namespace, label_selector=selector):
            kube.annotate_pod(namespace, pod["metadata"]["name"], wk.ANNOTATION_KEY_SET, digest)
    if step.reload:
        rest = State.clients.rest(kube, cluster)
        if rest is None:
            raise SlurmError("slurmrestd is not up", operation="reconfigure")
        rest.reconfigure()
        selector = f"{wk.LABEL_NAME}=slurmdbd,{wk.LABEL_CLUSTER}={name}"
        for pod in kube.list("v1", "Pod", namespace, label_selector=selector):
            kube.delete("v1", "Pod", pod["metadata"]["name"], namespace)
    if step.record is not None:
        text = json.dumps(step.record.as_dict(), sort_keys=True)
        record = {wk.ANNOTATION_KEY_ROTATION: text}
        kube.annotate(wk.API_VERSION, "SlurmCluster", name, namespace, record)
    if step.event:
        kube.event(obj, "KeyRotation", step.event)
