"""A Slurm upgrade on real kubelets: 24.11 -> 26.05 with a job running and a
queue (issues 17 and 16).

Needs `make real-nodes` (skipped when none run) and both Slurm images `make
images` built. The cluster starts on the 24.11 image with accounting (slurmdbd
over the host's MariaDB) and slurmctld's state on its PVC; one 2-node job runs
in one NVLink block while a 4-node job and a 2-node job wait. Then
`spec.image` names the 26.05 image. Each job writes, from inside its
allocation, the Slurm release of every slurmd it ran on into its Comment, so
"no node ran a job while half upgraded" is read from the jobs themselves.
The operator is the suite's, on the host. In `make e2e-extended`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from slurmkube_e2e.accounting import sacct_state
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.kubectl import KubectlError
from slurmkube_e2e.mariadb import MariaDB
from slurmkube_e2e.pod_exec import kubectl_exec
from slurmkube_e2e.real_cluster import API, ready_real_cluster
from slurmkube_e2e.realnode_config import RealNode

pytestmark = [pytest.mark.e2e, pytest.mark.extended]

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = "upgrade"
CTLD = f"{CLUSTER}-slurmctld-0"
PHASES = ["Slurmdbd", "Slurmctld", "Clients", "Slurmd", "Complete"]

# Runs inside the allocation: "<node>=<release> ..." of every slurmd the job has,
# kept in the job's Comment (which outlives the slurmd pods it ran on).
RECORD = (
    "releases=$(srun --ntasks-per-node=1 bash -c "
    "'echo $SLURMD_NODENAME=$(/usr/sbin/slurmd -V | cut -d\" \" -f2)' | sort | tr '\\n' ' '); "
    'scontrol update jobid=$SLURM_JOB_ID comment="$releases"'
)


def release_tag(series: str) -> str:
    """The full-version tag `make images` gave the Slurm image of `series`
    (localhost/slurmkube/slurm:24.11.5), so the upgrade's versions are exact."""
    listed = subprocess.run(
        [sys.executable, str(ROOT / "images" / "build.py"), "list", "--json"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    for entry in json.loads(listed.stdout).values():
        tags = [str(t) for t in entry["tags"]]
        if any(t.endswith(f"/slurm:{series}") for t in tags):
            return tags[-1]
    pytest.fail(f"no Slurm {series} image is built: make images")


def in_ctld(namespace: str, *argv: str, timeout: float = 120) -> str:
    """Through `kubectl exec`, retried while the slurmctld pod is being replaced."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return kubectl_exec(namespace, CTLD, *argv, container="slurmctld")
        except KubectlError:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def fields_of(line: str) -> dict[str, str]:
    """One `scontrol -o show job` line; Comment may hold spaces and `=`."""
    fields: dict[str, str] = {}
    for word in line.split():
        key, _, value = word.partition("=")
        fields.setdefault(key, value)
    if "Comment=" in line:
        comment = line.split("Comment=", 1)[1]
        for stop in (" StdErr=", " Requeue=", " StdIn="):
            comment = comment.split(stop, 1)[0]
        fields["Comment"] = comment.strip()
    return fields


def jobs_shown(namespace: str) -> dict[str, dict[str, str]]:
    """Every job slurmctld still holds, by id (a finished one leaves after MinJobAge)."""
    out = in_ctld(namespace, "scontrol", "-o", "show", "job")
    shown = (fields_of(line) for line in out.splitlines() if line.startswith("JobId="))
    return {f["JobId"]: f for f in shown}


def job_fields(namespace: str, job: str) -> dict[str, str]:
    return jobs_shown(namespace).get(job, {})


def releases_of(comment: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in comment.split() if "=" in pair)


@pytest.fixture(scope="module")
def images() -> tuple[str, str]:
    return release_tag("24.11"), release_tag("26.05")


@pytest.fixture(scope="module")
def cluster(
    kube: Kube,
    operator: None,
    real_nodes: list[RealNode],
    database: MariaDB,
    images: tuple[str, str],
) -> Iterator[str]:
    with ready_real_cluster(
        kube, "real-upgrade", CLUSTER, image=images[0], replicas=len(real_nodes), database=database
    ) as namespace:
        yield namespace


def test_an_upgrade_from_24_11_to_26_05_keeps_the_running_job_and_the_queue(
    kube: Kube, cluster: str, real_nodes: list[RealNode], images: tuple[str, str]
) -> None:
    old, new = images
    old_release, new_release = old.rsplit(":", 1)[1], new.rsplit(":", 1)[1]
    nodes = sorted(n.name for n in real_nodes)
    assert len(nodes) == 4, "the test wants two NVLink blocks of two nodes"

    running = in_ctld(
        cluster, "sbatch", "--parsable", "--exclusive", "-N2", "--segment=2", "-t", "20",
        "--wrap", f"{RECORD}; sleep 100",
    ).strip()  # fmt: skip
    deadline = time.monotonic() + 90
    while job_fields(cluster, running).get("JobState") != "RUNNING":
        assert time.monotonic() < deadline, job_fields(cluster, running)
        time.sleep(1)
    whole = in_ctld(
        cluster, "sbatch", "--parsable", "--exclusive", "-N4", "-t", "10", "--wrap", RECORD
    ).strip()  # fmt: skip
    after = in_ctld(
        cluster, "sbatch", "--parsable", "--exclusive", "-N2", "--segment=2", "-t", "10",
        f"--dependency=afterany:{running}", "--wrap", RECORD,
    ).strip()  # fmt: skip
    assert job_fields(cluster, whole)["JobState"] == "PENDING"
    assert job_fields(cluster, after)["JobState"] == "PENDING"

    jobs = (running, whole, after)
    last: dict[str, dict[str, str]] = {}

    def track() -> None:
        """The jobs as slurmctld shows them now; kept, as a finished job leaves
        slurmctld's memory after MinJobAge."""
        shown = jobs_shown(cluster)
        last.update({job: shown[job] for job in jobs if job in shown})

    changed = time.monotonic()
    kube.patch(API, "SlurmCluster", CLUSTER, {"spec": {"image": new}}, namespace=cluster)
    seen: list[str] = []
    deadline = changed + 900
    while True:
        obj = kube.get(API, "SlurmCluster", CLUSTER, namespace=cluster) or {}
        upgrade = obj.get("status", {}).get("upgrade") or {}
        phase = upgrade.get("phase", "")
        if upgrade.get("to") == new and phase and (not seen or seen[-1] != phase):
            seen.append(phase)
            print(f"  {time.monotonic() - changed:6.1f}s {phase}: {upgrade.get('message', '')}")
        track()
        if phase == "Complete" and upgrade.get("to") == new:
            break
        assert phase != "Refused", upgrade
        assert time.monotonic() < deadline, (seen, obj.get("status"), last)
        time.sleep(2)
    print(
        f"\nupgrade {old_release} -> {new_release}: Complete in {time.monotonic() - changed:.1f}s"
    )

    # Slurm's order, as the operator's Events record every phase it entered.
    events = [
        e for e in kube.list("v1", "Event", namespace=cluster)
        if e.get("reason", "").startswith("Upgrade")
        and e.get("involvedObject", {}).get("kind") == "SlurmCluster"
    ]  # fmt: skip
    events.sort(key=lambda e: e.get("firstTimestamp") or e.get("eventTime") or "")
    entered = [e["reason"].removeprefix("Upgrade") for e in events]
    order = list(dict.fromkeys(p for p in entered if p in PHASES))
    assert order == PHASES, entered

    # Every job ran to its end.
    deadline = time.monotonic() + 300
    while any(last.get(j, {}).get("JobState") != "COMPLETED" for j in jobs):
        states = {j: last.get(j, {}).get("JobState") for j in jobs}
        assert not set(states.values()) - {
            "RUNNING", "PENDING", "COMPLETING", "CONFIGURING", "COMPLETED", None
        }, states  # fmt: skip
        assert time.monotonic() < deadline, states
        time.sleep(2)
        track()
    for job in jobs:
        assert sacct_state(partial(in_ctld, cluster), job) == "COMPLETED", job
    # No job ran on a block half old, half new: per NVLink block, one release.
    ran = {job: releases_of(last[job].get("Comment", "")) for job in jobs}
    print(f"releases each job saw: {ran}")
    print(in_ctld(cluster, "sacct", "-D", "-X", "-o", "JobID,State,Start,End,NodeList%60"))
    block_of = {n.name: n.place.domain for n in real_nodes}
    for job, releases in ran.items():
        assert releases, (job, last[job])
        per_block: dict[int, set[str]] = {}
        for node, release in releases.items():
            per_block.setdefault(block_of[node], set()).add(release)
        assert all(len(r) == 1 for r in per_block.values()), (job, releases)
    assert set(ran[running].values()) == {old_release}, ran
    assert sorted(ran[whole]) == nodes, ran

    listed = in_ctld(cluster, "scontrol", "-o", "show", "node")
    versions = {
        fields["NodeName"]: fields.get("Version", "")
        for line in listed.splitlines()
        if (fields := dict(w.partition("=")[::2] for w in line.split() if "=" in w))
    }
    assert versions == {n: new_release for n in nodes}, versions
    assert new_release in in_ctld(cluster, "sinfo", "--version")
    for pod in kube.list("v1", "Pod", namespace=cluster):
        images_run = {c["image"] for c in pod["spec"]["containers"]}
        assert images_run == {new}, (pod["metadata"]["name"], images_run)
