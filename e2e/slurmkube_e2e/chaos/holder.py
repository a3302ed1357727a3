"""A Kueue workload holding lent nodes through the whole chaos run: admitted
through the cluster's SlurmReservationCheck before the first fault, checked
after every fault (still admitted, its lease and reservation in place, its pods
the same and running), and released at the end, when its reservation and lease
must go."""

from __future__ import annotations

import time
from contextlib import suppress
from dataclasses import dataclass, field

from slurmkube_e2e.kube import Kube
from slurmkube_e2e.lending import (
    KUEUE,
    LEASE,
    RESERVATION_PREFIX,
    cluster_scoped,
    gpu_job,
    kueue_docs,
    leased_nodes,
    reservations,
    wait_pods_started,
    wait_workload,
    workload_of,
)
from slurmkube_e2e.operator_cluster import slurm_image
from slurmkube_e2e.waiting import has_condition, wait_for

JOB = "chaos-holder"
# Longer than any run: the suite ends it.
HOLD_SECONDS = 6 * 3600
RELEASE_SECONDS = 180


@dataclass
class LentHolder:
    kube: Kube
    namespace: str
    uid: str = ""
    nodes: list[str] = field(default_factory=list)
    pods: dict[str, str] = field(default_factory=dict)  # pod name -> uid

    @property
    def reservation(self) -> str:
        return f"{RESERVATION_PREFIX}{self.uid}"

    def admit(self, nodes: int = 1, timeout: float = 240) -> None:
        """The check's Kueue objects and a Job of `nodes` whole-node pods, until
        its pods run on lent nodes."""
        for doc in kueue_docs(self.namespace, gpu_quota=4 * nodes):
            self.kube.apply(doc)
        wait_for(
            self.kube,
            KUEUE,
            "AdmissionCheck",
            self.namespace,
            lambda o: has_condition(o, "Active"),
            timeout=60,
        )
        job = gpu_job(JOB, nodes, HOLD_SECONDS)
        image = slurm_image()  # on real nodes: an image their containerd holds
        if image:
            job["spec"]["template"]["spec"]["containers"][0]["image"] = image
        self.kube.create(job, namespace=self.namespace)
        w = wait_workload(
            self.kube, self.namespace, JOB, lambda w: has_condition(w, "Admitted"), timeout
        )
        self.uid = str(w["metadata"]["uid"])
        pods = wait_pods_started(self.kube, self.namespace, JOB, nodes)
        self.pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
        self.nodes = leased_nodes(self.kube, self.uid)
        assert len(self.nodes) == nodes, f"{JOB}: leased {self.nodes}, want {nodes}"

    def broken(self) -> list[str]:
        """What a fault took from the workload; empty when it still holds its nodes."""
        found = []
        w = workload_of(self.kube, self.namespace, JOB)
        if w is None or str(w["metadata"]["uid"]) != self.uid:
            return [f"workload of {JOB} gone or replaced"]
        if not has_condition(w, "Admitted"):
            found.append(f"workload of {JOB} no longer admitted")
        if has_condition(w, "Evicted"):
            found.append(f"workload of {JOB} evicted")
        if leased_nodes(self.kube, self.uid) != self.nodes:
            found.append(f"lease moved: {leased_nodes(self.kube, self.uid)}, was {self.nodes}")
        held = reservations(self.namespace).get(self.reservation)
        if sorted(held or []) != self.nodes:
            found.append(f"reservation {self.reservation}: {held}, want {self.nodes}")
        now = {
            p["metadata"]["name"]: p
            for p in self.kube.list(
                "v1", "Pod", namespace=self.namespace, label_selector=f"job-name={JOB}"
            )
        }
        for name, uid in self.pods.items():
            pod = now.get(name)
            if pod is None or pod["metadata"]["uid"] != uid:
                found.append(f"{JOB} pod {name} gone or replaced")
            elif (pod.get("status") or {}).get("phase") != "Running":
                found.append(f"{JOB} pod {name} {pod['status'].get('phase')}")
        return found

    def release(self) -> tuple[float | None, list[str]]:
        """The Job deleted: seconds until its reservation and lease are gone (None:
        not within RELEASE_SECONDS), and what was left then."""
        started = time.monotonic()
        self.kube.delete("batch/v1", "Job", JOB, namespace=self.namespace)
        while True:
            left = self._left()
            if not left:
                return round(time.monotonic() - started, 1), []
            if time.monotonic() - started > RELEASE_SECONDS:
                return None, left
            time.sleep(2)

    def _left(self) -> list[str]:
        left = [
            f"Node {node['metadata']['name']} lease label"
            for node in self.kube.list("v1", "Node", label_selector=f"{LEASE}={self.uid}")
        ]
        if self.reservation in reservations(self.namespace):
            left.append(f"reservation {self.reservation}")
        return left

    def remove_queue(self) -> None:
        """The Kueue objects outside the namespace (the namespace's go with it)."""
        for api, kind, name in cluster_scoped(self.namespace):
            with suppress(Exception):
                self.kube.delete(api, kind, name)
