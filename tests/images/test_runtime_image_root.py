"""The e2e local runtime runs a pod in a built image's own root filesystem.

A `slurmkube/slurm:26.05.5` pod on the local runtime (docs/local-runtime.md)
gets the image's files, extracted once from the image store, as the read-only
lower layer of an overlay, with its own /etc, volumes, /proc, /dev, hostname
and address. These tests start such a sandbox directly, without Kubernetes:
the image's Slurm and users are what the pod sees, the image's entrypoint
and USER apply, the pod's writes never reach the shared extraction, and two
runtimes extracting one image at once extract it once.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slurmkube_runtime import imagespec, podspec, sandbox
from slurmkube_runtime.images import ImageRoot, ImageStore
from slurmkube_runtime.layout import AGENT_POOL, BRIDGE, RuntimeLayout

IMAGE = "slurmkube/slurm:26.05.5"
STORE_REF = "localhost/slurmkube/slurm:26.05.5"


@pytest.fixture(scope="module")
def root(images: dict[str, str]) -> ImageRoot:
    """The 26.05 image's root filesystem, as the agent gets it."""
    source = imagespec.image_source(IMAGE)
    assert source == imagespec.StoreImage(STORE_REF)
    return ImageStore(RuntimeLayout.from_env()).root(IMAGE, STORE_REF)


@pytest.fixture
def pod(root: ImageRoot, tmp_path: Path) -> Iterator[sandbox.Sandbox]:
    had_bridge = Path(f"/sys/class/net/{BRIDGE}").exists()
    sandbox.ensure_bridge()
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "slurm.conf").write_text("# from a volume\n")
    spec = sandbox.SandboxSpec(
        uid=str(uuid.uuid4()),
        namespace="images-test",
        name="root",
        hostname="image-root-pod",
        ip=str(list(AGENT_POOL.hosts())[-1]),
        gpus=2,
        volume_binds=(sandbox.VolumeBind(str(volume), "/etc/slurm", True),),
    )
    box = sandbox.start_sandbox(tmp_path / "pod", spec, root)
    try:
        yield box
    finally:
        sandbox.stop_sandbox(box)
        if not had_bridge:
            sandbox.remove_bridge()


def run(box: sandbox.Sandbox, root: ImageRoot, container: dict[str, Any]) -> str:
    """A container's argv in the pod, as the agent would start it (image config applied)."""
    container = {"name": "c", **container}
    env = imagespec.image_env(root.config, "image-root-pod")
    argv = podspec.command_line(container, env, root.config.entrypoint, root.config.cmd)
    user = imagespec.run_as({"spec": {}}, container, root.config, root.accounts)
    rc, out = sandbox.run_in_pod(box, argv, env, 60, user)
    assert rc == 0, f"{argv} as {user}: rc={rc} {out}"
    return out


def as_root(*argv: str) -> dict[str, Any]:
    return {"command": list(argv), "securityContext": {"runAsUser": 0}}


def test_the_image_is_extracted_once_with_its_config_and_users(root: ImageRoot) -> None:
    assert root.config.entrypoint == ("/usr/bin/tini", "--", "/usr/local/bin/entrypoint.sh")
    assert root.config.user == "401:401"
    assert root.accounts.uid("slurm") == (401, 401)
    assert root.accounts.uid("slurmrestd") == (402, 402)
    again = ImageStore(RuntimeLayout.from_env()).root(IMAGE, STORE_REF)
    assert again.rootfs == root.rootfs


def test_a_pod_runs_the_images_slurm_as_the_images_user(
    pod: sandbox.Sandbox, root: ImageRoot
) -> None:
    # Through the image's entrypoint (tini, entrypoint.sh), as its USER 401.
    assert "26.05.5" in run(pod, root, {"args": ["slurmctld", "-V"]})
    restd = {"args": ["slurmrestd", "-V"], "securityContext": {"runAsUser": 402}}
    assert "26.05.5" in run(pod, root, restd)
    assert run(pod, root, {"command": ["id"]}).startswith("uid=401(slurm) gid=401(slurm)")
    assert run(pod, root, {"command": ["id"], "securityContext": {"runAsUser": 402}}).startswith(
        "uid=402(slurmrestd) gid=402(slurmrestd)"
    )
    os_release = run(pod, root, as_root("cat", "/etc/os-release"))
    assert "forky" in os_release or "sid" in os_release


def test_the_pod_has_its_volumes_devices_hostname_and_own_etc(
    pod: sandbox.Sandbox, root: ImageRoot
) -> None:
    sandbox.write_etc_file(pod.rootfs, "hosts", "127.0.0.1\tlocalhost\n10.0.0.9\tctld\n")
    script = "cat /etc/slurm/slurm.conf; hostname; ls /dev; getent hosts ctld"
    out = run(pod, root, as_root("bash", "-c", script))
    assert "# from a volume" in out
    assert "image-root-pod" in out
    assert "nvidia0" in out and "nvidia1" in out
    assert "10.0.0.9" in out
    # `exec --workdir`, as the e2e helpers run Slurm commands: there, as the user.
    argv = pod.enter(["sh", "-c", "pwd; touch mine"], (401, 401), "/tmp")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout.strip() == "/tmp"


def test_writes_in_the_pod_stay_in_its_own_layer(pod: sandbox.Sandbox, root: ImageRoot) -> None:
    run(pod, root, as_root("bash", "-c", "echo x > /var/spool/slurmd/mark; rm /usr/bin/tini"))
    assert not (root.rootfs / "var/spool/slurmd/mark").exists()
    assert (root.rootfs / "usr/bin/tini").exists()
    assert (Path(pod.dir) / "upper/var/spool/slurmd/mark").exists()


def test_two_runtimes_extract_one_image_once(root: ImageRoot, tmp_path: Path) -> None:
    layout = dataclasses.replace(RuntimeLayout.from_env(), cache=tmp_path)
    stores = [ImageStore(layout), ImageStore(layout)]
    got: list[ImageRoot] = []
    threads = [
        threading.Thread(target=lambda s=s: got.append(s.root(IMAGE, STORE_REF))) for s in stores
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.rootfs for r in got] == [layout.image_roots / root.image_id / "rootfs"] * 2
    assert sorted(p.name for p in layout.image_roots.iterdir()) == [
        root.image_id,
        f"{root.image_id}.lock",
    ]
    shutil.rmtree(layout.image_roots)  # 200 MB; pytest keeps old tmp_paths


def test_an_image_that_is_not_built_names_make_images() -> None:
    store = ImageStore(RuntimeLayout.from_env())
    with pytest.raises(imagespec.ImageNotBuilt, match=r"26\.99\.0.*make images"):
        store.root("slurmkube/slurm:26.99.0", "localhost/slurmkube/slurm:26.99.0")
