"""Each daemon's container runs as the user the Slurm image expects of it
(docs/install.md, "What the images expect of a pod"; images/slurm/entrypoint.sh
refuses any other uid)."""

from __future__ import annotations

from typing import Any

import pytest

from slurmkube.build.names import RESTD_UID, SLURM_GID
from slurmkube.build.slurmctld import controller_statefulset
from slurmkube.build.slurmd import slurmd_pod
from slurmkube.build.slurmrestd import restapi_deployment
from slurmkube_local.builders import bundle

Manifest = dict[str, Any]
IMAGE_USER = None  # no runAsUser: the image's USER, slurm (401)


def containers() -> dict[str, Manifest]:
    b = bundle()
    pods = {
        "slurmctld": controller_statefulset(b.cluster)["spec"]["template"]["spec"],
        "slurmrestd": restapi_deployment(b.cluster)["spec"]["template"]["spec"],
        "slurmd": slurmd_pod(b.cluster, b.node_sets[0], "gpu-0001", 4, "hash")["spec"],
    }
    return {name: spec["containers"][0] for name, spec in pods.items()}


@pytest.mark.parametrize(
    ("daemon", "uid", "gid"),
    [
        ("slurmctld", IMAGE_USER, None),
        ("slurmrestd", RESTD_UID, RESTD_UID),
        ("slurmd", 0, 0),
    ],
)
def test_each_daemon_runs_as_the_user_its_entrypoint_accepts(
    daemon: str, uid: int | None, gid: int | None
) -> None:
    context = containers()[daemon].get("securityContext") or {}
    assert (context.get("runAsUser"), context.get("runAsGroup")) == (uid, gid)


def test_slurmctld_reads_its_keys_through_the_slurm_group() -> None:
    spec = controller_statefulset(bundle().cluster)["spec"]["template"]["spec"]
    assert spec["securityContext"] == {"fsGroup": SLURM_GID}
