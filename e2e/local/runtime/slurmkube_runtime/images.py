"""The project's images as root filesystems for sandboxes (podman, tar, files).

`make images` keeps the images in podman's store under $SLURMKUBE_CACHE/images
(images/build.py, whose `podman` command runs podman on that store). A sandbox
needs a plain directory tree: the first pod of an image ID extracts it once
(`podman create` + `podman export`, untarred as root with the owners kept)
into `<image_roots>/<image id>/rootfs`, beside the image's `config.json`.
Every pod of that image then mounts it read-only as the lower layer of an
overlay (init.py), so nothing a pod writes reaches it.

Runtimes of several slots share the folder: an extraction holds an flock on
`<image id>.lock`, works in a temporary folder and renames it into place, so
a root filesystem is there complete or not at all, and two runtimes starting
together extract it once. A moved tag (`make images` rebuilt it) is seen
within CACHE_SECONDS, as a kubelet sees a new image for new containers.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmkube_runtime.imagespec import Accounts, ImageConfig, ImageNotBuilt, not_built_message
from slurmkube_runtime.layout import RuntimeLayout

CACHE_SECONDS = 30.0
EXTRACT_TIMEOUT = 600.0
# podman prints the ID, a space, then the config as JSON.
_INSPECT_FORMAT = "{{.Id}} {{json .Config}}"


class ImageError(RuntimeError):
    """podman or tar failed while a root filesystem was extracted."""


@dataclass(frozen=True)
class ImageRoot:
    """An extracted image: its read-only files and what its config says."""

    image_id: str
    rootfs: Path
    config: ImageConfig
    accounts: Accounts


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def load_root(folder: Path) -> ImageRoot:
    """An extraction folder (`<id>/rootfs`, `<id>/config.json`) as an ImageRoot."""
    rootfs = folder / "rootfs"
    config: dict[str, Any] | None = json.loads((folder / "config.json").read_text())
    return ImageRoot(
        image_id=folder.name,
        rootfs=rootfs,
        config=ImageConfig.from_oci(config),
        accounts=Accounts(_read(rootfs / "etc" / "passwd"), _read(rootfs / "etc" / "group")),
    )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


class ImageStore:
    """Image references to extracted root filesystems, for one agent."""

    def __init__(self, layout: RuntimeLayout) -> None:
        self.layout = layout
        self._resolved: dict[str, tuple[float, ImageRoot]] = {}

    def _podman(self, *args: str) -> list[str]:
        return [sys.executable, str(self.layout.image_tool), "podman", *args]

    def root(self, image: str, ref: str) -> ImageRoot:
        """The root filesystem of `ref` (the store's name for the pod's `image`).

        Raises ImageNotBuilt when the store does not hold it, ImageError when
        the extraction fails."""
        seen = self._resolved.get(ref)
        if seen is not None and time.monotonic() - seen[0] < CACHE_SECONDS:
            return seen[1]
        inspect = subprocess.run(
            self._podman("image", "inspect", "--format", _INSPECT_FORMAT, ref),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if inspect.returncode != 0:
            raise ImageNotBuilt(not_built_message(image, ref))
        image_id, _, config = inspect.stdout.strip().partition(" ")
        folder = self.layout.image_roots / image_id
        if not folder.is_dir():
            self._extract(ref, image_id, config)
        root = load_root(folder)
        self._resolved[ref] = (time.monotonic(), root)
        return root

    def _extract(self, ref: str, image_id: str, config: str) -> None:
        roots = self.layout.image_roots
        with _locked(roots / f"{image_id}.lock"):
            if (roots / image_id).is_dir():
                return  # another runtime extracted it while we waited
            for stale in roots.glob(f"{image_id}.tmp-*"):
                shutil.rmtree(stale, ignore_errors=True)
            work = roots / f"{image_id}.tmp-{os.getpid()}"
            (work / "rootfs").mkdir(parents=True)
            try:
                self._export(ref, work / "rootfs")
                (work / "config.json").write_text(config + "\n")
                work.chmod(0o755)
                work.rename(roots / image_id)
            finally:
                shutil.rmtree(work, ignore_errors=True)

    def _export(self, ref: str, dest: Path) -> None:
        name = f"slurmkube-runtime-{secrets.token_hex(4)}"
        _check(self._podman("create", "--pull=never", "--name", name, ref), "podman create")
        try:
            with subprocess.Popen(self._podman("export", name), stdout=subprocess.PIPE) as export:
                untar = subprocess.run(
                    ["tar", "-x", "-p", "--numeric-owner", "-C", str(dest)],
                    stdin=export.stdout,
                    capture_output=True,
                    timeout=EXTRACT_TIMEOUT,
                    check=False,
                )
                exported = export.wait(EXTRACT_TIMEOUT)
            if exported != 0 or untar.returncode != 0:
                raise ImageError(
                    f"export of {ref} failed (podman export {exported}, tar {untar.returncode}): "
                    f"{untar.stderr.decode(errors='replace')[-500:]}"
                )
        finally:
            _check(self._podman("rm", "--force", "--ignore", name), "podman rm", strict=False)


def _check(argv: Sequence[str], what: str, strict: bool = True) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=120, check=False)
    if strict and done.returncode != 0:
        raise ImageError(f"{what} failed: {done.stderr.strip()[-500:]}")


__all__ = ["ImageError", "ImageRoot", "ImageStore", "load_root"]
