"""Keys only where a daemon reads them, always through a read-only mount."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from slurmkube.api.models import SlurmCluster
from slurmkube.build.login import login_deployment
from slurmkube.build.slurmctld import controller_statefulset
from slurmkube.build.slurmd import slurmd_pod
from slurmkube.build.slurmdbd import slurmdbd_deployment
from slurmkube.build.slurmrestd import restapi_deployment
from slurmkube_local.builders import bundle

Manifest = dict[str, Any]
ACCOUNTING = {"enabled": True, "database": {"host": "db", "secretName": "db-login"}}


def cluster(accounting: bool = False) -> SlurmCluster:
    return bundle(extra={"accounting": ACCOUNTING} if accounting else {}).cluster


def slurmd(c: SlurmCluster) -> Manifest:
    return slurmd_pod(c, bundle().node_sets[0], "gpu-0001", 4, "hash")


def pod_spec(obj: Manifest) -> Manifest:
    spec: Manifest = obj["spec"]["template"]["spec"] if "template" in obj["spec"] else obj["spec"]
    return spec


def key_sources(obj: Manifest) -> Iterator[tuple[Manifest, Manifest]]:
    """(volume, secret source) for every Secret a pod projects or mounts."""
    for volume in pod_spec(obj)["volumes"]:
        if "secret" in volume:
            yield volume, volume["secret"]
        for source in (volume.get("projected") or {}).get("sources", []):
            if "secret" in source:
                yield volume, source["secret"]


def keys_of(obj: Manifest) -> set[str]:
    return {
        item["key"]
        for _, secret in key_sources(obj)
        for item in secret.get("items", [])
        if item["key"].endswith(".key")
    }


BUILDERS: dict[str, tuple[Callable[[SlurmCluster], Manifest], bool, set[str]]] = {
    "slurmctld verifies both": (controller_statefulset, False, {"slurm.key", "jwt.key"}),
    "slurmdbd verifies both": (
        lambda c: slurmdbd_deployment(c, "h"),
        True,
        {"slurm.key", "jwt.key"},
    ),
    # tls.key: stunnel's, in front of slurmrestd (test_build_restapi_tls.py).
    "slurmrestd forwards tokens, holds no key": (restapi_deployment, False, {"tls.key"}),
    "slurmrestd with accounting keeps slurm.key": (
        restapi_deployment,
        True,
        {"slurm.key", "tls.key"},
    ),
    "login holds only slurm.key (sackd signs)": (login_deployment, False, {"slurm.key"}),
    "slurmd holds only slurm.key": (slurmd, False, {"slurm.key"}),
}


@pytest.mark.parametrize("case", sorted(BUILDERS))
def test_each_component_mounts_only_the_keys_it_reads(case: str) -> None:
    build, accounting, keys = BUILDERS[case]
    assert keys_of(build(cluster(accounting))) == keys


@pytest.mark.parametrize("case", sorted(BUILDERS))
def test_key_volumes_are_mounted_read_only_and_unreadable_to_others(case: str) -> None:
    build, accounting, _ = BUILDERS[case]
    obj = build(cluster(accounting))
    spec = pod_spec(obj)
    key_volumes = {volume["name"] for volume, _ in key_sources(obj)}
    for container in spec["containers"] + spec.get("initContainers", []):
        for mount in container.get("volumeMounts", []):
            if mount["name"] in key_volumes:
                assert mount.get("readOnly") is True, (case, container["name"], mount)
    for volume in spec["volumes"]:
        if volume["name"] in key_volumes:
            mode = (volume.get("projected") or volume.get("secret") or {})["defaultMode"]
            assert mode & 0o007 == 0, (case, volume["name"], oct(mode))


def test_login_pods_never_get_the_jwt_key_even_with_a_named_secret() -> None:
    docs_cluster = bundle(
        extra={"auth": {"jwtKeySecret": "jwt", "slurmKeySecret": "slurm"}}
    ).cluster
    names = {secret["name"] for _, secret in key_sources(login_deployment(docs_cluster))}
    assert names == {"slurm"}
