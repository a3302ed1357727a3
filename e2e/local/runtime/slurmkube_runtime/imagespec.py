"""Pure rules for the image a pod names: which root filesystem, argv, env and user.

The runtime runs two kinds of `slurmkube/slurm:<tag>`:

- the **host build**: tags of the host build's series (24.11, the Slurm that
  `make slurm` builds) and references without a tag run on the host's /usr
  plus that build, as the runtime always did; the "image" has no entrypoint,
  no user and a PATH that starts with the build's sbin and bin;
- a **built image**: any other tag is `localhost/slurmkube/slurm:<tag>` from
  the project's image store (`make images`, images/build.py), run in its own
  root filesystem with its config (entrypoint, cmd, env, user) applied the way
  a kubelet does.

No I/O here: the image's config and its /etc/passwd and /etc/group come in
as values (images.py reads them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmkube_runtime.layout import HOST_BUILD_SERIES, IMAGE_REPOSITORY
from slurmkube_runtime.podspec import SpecError

Manifest = dict[str, Any]
# Where `make images` puts the project's images (images/build.py: repo names).
STORE_REPOSITORY = f"localhost/{IMAGE_REPOSITORY}"
_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ImageNotBuilt(SpecError):
    """The pod names an image the project's image store does not hold."""


@dataclass(frozen=True)
class ImageConfig:
    """What an OCI image config says about running it (Config.Entrypoint, ...)."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    user: str = ""
    working_dir: str = ""

    @classmethod
    def from_oci(cls, config: Mapping[str, Any] | None) -> ImageConfig:
        """From `podman image inspect --format '{{json .Config}}'` (null fields allowed)."""
        config = config or {}
        env = []
        for item in config.get("Env") or []:
            key, _, value = str(item).partition("=")
            env.append((key, value))
        return cls(
            entrypoint=tuple(str(a) for a in config.get("Entrypoint") or ()),
            cmd=tuple(str(a) for a in config.get("Cmd") or ()),
            env=tuple(env),
            user=str(config.get("User") or ""),
            working_dir=str(config.get("WorkingDir") or ""),
        )


def host_build_config(prefix: Path) -> ImageConfig:
    """The host build as an image: no entrypoint or user, its bin dirs first on PATH."""
    return ImageConfig(env=(("PATH", f"{prefix}/sbin:{prefix}/bin:{_DEFAULT_PATH}"),))


def image_tag(image: str) -> str | None:
    """The tag of `[registry/]repo[:tag][@digest]`, None if it has none."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else None


@dataclass(frozen=True)
class HostBuild:
    """Run on the host's /usr and the Slurm build (slurmkube_runtime.layout)."""


@dataclass(frozen=True)
class StoreImage:
    """Run in the root filesystem of this image of the project's store."""

    ref: str


ImageSource = HostBuild | StoreImage


def image_source(image: str) -> ImageSource:
    """Where a `slurmkube/slurm` image's files come from (see the module docstring).

    The registry host is ignored on purpose: the runtime stands in for any
    registry a cluster would pull the project's image from."""
    tag = image_tag(image)
    if tag is None or tag == HOST_BUILD_SERIES or tag.startswith(f"{HOST_BUILD_SERIES}."):
        return HostBuild()
    return StoreImage(f"{STORE_REPOSITORY}:{tag}")


def pod_image_source(images: Sequence[str]) -> ImageSource:
    """The one source every container of a pod runs from (they share one filesystem)."""
    sources = {image_source(i) for i in images}
    if len(sources) != 1:
        raise SpecError(
            f"images {sorted(set(images))} need different root filesystems; containers "
            "of a pod share one filesystem on the local runtime"
        )
    return sources.pop()


def not_built_message(image: str, ref: str) -> str:
    return (
        f'image "{image}" is not built: {ref} is not in the project\'s image store; '
        "run `make images`"
    )


def image_env(config: ImageConfig, hostname: str) -> dict[str, str]:
    """The environment a container starts from: the image's Env, HOME and HOSTNAME."""
    env = dict(config.env)
    env.setdefault("PATH", _DEFAULT_PATH)
    env.setdefault("HOME", "/root")
    env["HOSTNAME"] = hostname
    return env


@dataclass(frozen=True)
class Accounts:
    """An image's /etc/passwd and /etc/group, as text: names to IDs."""

    passwd: str = ""
    group: str = ""

    @staticmethod
    def _table(text: str) -> list[list[str]]:
        return [line.split(":") for line in text.splitlines() if line and not line.startswith("#")]

    def uid(self, name: str) -> tuple[int, int] | None:
        for row in self._table(self.passwd):
            if len(row) >= 4 and row[0] == name and row[2].isdigit() and row[3].isdigit():
                return int(row[2]), int(row[3])
        return None

    def primary_gid(self, uid: int) -> int | None:
        for row in self._table(self.passwd):
            if len(row) >= 4 and row[2] == str(uid) and row[3].isdigit():
                return int(row[3])
        return None

    def gid(self, name: str) -> int | None:
        for row in self._table(self.group):
            if len(row) >= 3 and row[0] == name and row[2].isdigit():
                return int(row[2])
        return None


def _image_user(user: str, accounts: Accounts) -> tuple[int, int | None]:
    """Config.User (`uid`, `name`, `uid:gid`, `name:group`) as numbers."""
    name, _, group = user.partition(":")
    if name.isdigit():
        uid, gid = int(name), accounts.primary_gid(int(name))
    else:
        found = accounts.uid(name)
        if found is None:
            raise SpecError(f"image user {user!r}: no user {name!r} in the image's /etc/passwd")
        uid, gid = found
    if group:
        gid = int(group) if group.isdigit() else accounts.gid(group)
        if gid is None:
            raise SpecError(f"image user {user!r}: no group {group!r} in the image's /etc/group")
    return uid, gid


def run_as(
    pod: Manifest, container: Manifest, config: ImageConfig, accounts: Accounts | None = None
) -> tuple[int | None, int | None]:
    """The (uid, gid) a container runs as; None keeps the agent's (root).

    securityContext.runAsUser/runAsGroup of the container, else of the pod,
    win over the image's USER; a uid without a group gets its primary group
    from the image's /etc/passwd, or 0, as container runtimes do. With no
    image user and no accounts (the host build) the context is taken as it is.
    """
    ctx = {**(pod["spec"].get("securityContext") or {}), **(container.get("securityContext") or {})}
    uid, gid = ctx.get("runAsUser"), ctx.get("runAsGroup")
    if accounts is None:
        return uid, gid
    if uid is None and config.user:
        uid, image_gid = _image_user(config.user, accounts)
        gid = image_gid if gid is None else gid
    if uid is not None and gid is None:
        gid = accounts.primary_gid(int(uid))
        gid = 0 if gid is None else gid
    return uid, gid


__all__ = [
    "STORE_REPOSITORY",
    "Accounts",
    "HostBuild",
    "ImageConfig",
    "ImageNotBuilt",
    "ImageSource",
    "StoreImage",
    "host_build_config",
    "image_env",
    "image_source",
    "image_tag",
    "not_built_message",
    "pod_image_source",
    "run_as",
]
