"""Pure: a pod's status (phase, conditions, container statuses) from what runs.

Follows kubelet's rules (pkg/kubelet/kubelet_pods.go, getPhase): Pending until
every init container succeeded and a main container started; Running while a
main container runs or will be restarted; Succeeded/Failed once every main
container terminated and restartPolicy restarts none of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from slurmkube_runtime.layout import AGENT_NAME, BRIDGE_IP

Manifest = dict[str, Any]


@dataclass(frozen=True)
class Terminated:
    exit_code: int
    reason: str
    started_at: str
    finished_at: str
    message: str = ""

    def as_state(self) -> Manifest:
        state: Manifest = {
            "exitCode": self.exit_code,
            "reason": self.reason,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
        }
        if self.message:
            state["message"] = self.message
        return state


@dataclass(frozen=True)
class ContainerView:
    """One container as the agent sees it now."""

    name: str
    image: str
    restart_count: int = 0
    running_since: str | None = None
    terminated: Terminated | None = None
    last_terminated: Terminated | None = None
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    ready: bool = False
    started: bool = False
    will_restart: bool = False

    def as_status(self, uid: str) -> Manifest:
        if self.running_since is not None:
            state: Manifest = {"running": {"startedAt": self.running_since}}
        elif self.terminated is not None and not self.will_restart:
            state = {"terminated": self.terminated.as_state()}
        else:
            waiting: Manifest = {"reason": self.waiting_reason}
            if self.waiting_message:
                waiting["message"] = self.waiting_message
            state = {"waiting": waiting}
        status: Manifest = {
            "name": self.name,
            "image": self.image,
            "imageID": f"{AGENT_NAME}://{self.image}",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": state,
            "lastState": (
                {"terminated": self.last_terminated.as_state()} if self.last_terminated else {}
            ),
        }
        if self.running_since is not None or self.terminated is not None:
            status["containerID"] = f"{AGENT_NAME}://{uid}/{self.name}"
        return status


def phase(init: Sequence[ContainerView], main: Sequence[ContainerView], sandbox_ready: bool) -> str:
    if any(c.terminated and c.terminated.exit_code != 0 and not c.will_restart for c in init):
        return "Failed"
    if not sandbox_ready or any(c.terminated is None or c.terminated.exit_code for c in init):
        return "Pending"
    if any(c.running_since is not None or c.will_restart for c in main):
        return "Running"
    if main and all(c.terminated is not None for c in main):
        return (
            "Succeeded"
            if all(c.terminated and not c.terminated.exit_code for c in main)
            else ("Failed")
        )
    return "Pending"


def _condition(type_: str, ok: bool, stamp: str, reason: str = "") -> Manifest:
    cond: Manifest = {"type": type_, "status": "True" if ok else "False"}
    cond["lastTransitionTime"] = stamp
    if reason and not ok:
        cond["reason"] = reason
    return cond


def pod_status(
    uid: str,
    pod_ip: str | None,
    *,
    init: Sequence[ContainerView],
    main: Sequence[ContainerView],
    start_time: str,
    transitions: dict[str, tuple[bool, str]],
    now: str,
) -> Manifest:
    """The status subresource body. `transitions` keeps each condition's last flip
    (type -> (value, time)) across calls, so lastTransitionTime only moves on change."""
    sandbox_ready = pod_ip is not None
    current = phase(init, main, sandbox_ready)
    initialized = all(c.terminated is not None and not c.terminated.exit_code for c in init)
    ready = current == "Running" and bool(main) and all(c.ready for c in main)
    values = {
        "PodReadyToStartContainers": sandbox_ready,
        "Initialized": initialized,
        "ContainersReady": ready,
        "Ready": ready,
    }
    reasons = {
        "Initialized": "ContainersNotInitialized",
        "ContainersReady": "ContainersNotReady",
        "Ready": "ContainersNotReady",
    }
    conditions = []
    for type_, ok in values.items():
        before = transitions.get(type_)
        if before is None or before[0] != ok:
            transitions[type_] = (ok, now)
        conditions.append(_condition(type_, ok, transitions[type_][1], reasons.get(type_, "")))
    status: Manifest = {
        "phase": current,
        "conditions": conditions,
        "hostIP": str(BRIDGE_IP),
        "hostIPs": [{"ip": str(BRIDGE_IP)}],
        "startTime": start_time,
        "initContainerStatuses": [c.as_status(uid) for c in init],
        "containerStatuses": [c.as_status(uid) for c in main],
    }
    if pod_ip:
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": pod_ip}]
    return status
