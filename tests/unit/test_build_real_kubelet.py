"""What a real kubelet needs of slurmkube's pods (issue 16; found by running
them on containerd): the state volume slurm's, slurmd's cgroups writable, the
reloader reaching slurmctld's auth socket, bash sidecars stopping on SIGTERM."""

from __future__ import annotations

from typing import Any

import pytest

from slurmkube.build.reloader import SCRIPT
from slurmkube.build.slurmctld import SACK_DIR, controller_statefulset
from slurmkube.build.slurmd import slurmd_pod
from slurmkube_local.builders import bundle

Manifest = dict[str, Any]


def slurmctld_pod(persistence: bool) -> Manifest:
    b = bundle(extra={"controller": {"persistence": {"enabled": persistence}}})
    spec: Manifest = controller_statefulset(b.cluster)["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("persistence", [True, False])
def test_the_state_volume_is_handed_to_slurm_only_when_it_is_a_claim(persistence: bool) -> None:
    init = slurmctld_pod(persistence).get("initContainers") or []
    assert [c["name"] for c in init] == (["state-owner"] if persistence else [])
    if persistence:
        (owner,) = init
        context = owner["securityContext"]
        assert context["runAsUser"] == 0 and context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "DAC_READ_SEARCH"]}
        # The path is an argument, never part of the script's text.
        assert owner["command"][-1] == "/var/spool/slurmctld"
        assert "401:401" in owner["command"][2]


def test_slurmctld_and_its_reloader_share_the_auth_socket_directory() -> None:
    spec = slurmctld_pod(False)
    mounts = {
        c["name"]: {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        for c in spec["containers"]
    }
    assert mounts["slurmctld"][SACK_DIR] == mounts["config-reloader"][SACK_DIR]
    volume = next(v for v in spec["volumes"] if v["name"] == mounts["slurmctld"][SACK_DIR])
    assert "emptyDir" in volume


@pytest.mark.parametrize("cgroups", [True, False])
def test_slurmd_is_privileged_only_when_it_confines_jobs_in_cgroups(cgroups: bool) -> None:
    b = bundle(extra={"slurmd": {"cgroups": cgroups}})
    pod = slurmd_pod(b.cluster, b.node_sets[0], "gpu-0001", 4, "hash")
    context = pod["spec"]["containers"][0]["securityContext"]
    assert context.get("privileged", False) is cgroups
    assert (context["runAsUser"], context["runAsGroup"]) == (0, 0)


def test_the_reloader_exits_on_sigterm() -> None:
    assert "trap 'exit 0' TERM INT" in SCRIPT.splitlines()[:3]
