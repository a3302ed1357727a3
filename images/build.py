#!/usr/bin/env python3
"""Build slurmkube's container images with no container registry: `make images`.

    python3 images/build.py [build] [--only NAME ...]   build what changed (default)
    python3 images/build.py export --out DIR [--only NAME ...]   OCI archives
    python3 images/build.py list [--json]               what is built, by name
    python3 images/build.py podman ARGS ...             podman on slurmkube's image store

Every image starts from a Debian root filesystem made by `debootstrap
--variant=minbase` (Debian's packages, from the apt mirror this machine's apt
is configured with, read at build time) and is assembled by Debian's podman.
Nothing is pulled: builds run with `--pull=never` and an empty registry list.

Content-addressed: an image's key is the SHA-256 of its recipe (suite, build
arguments, base key) and of every file its build copies (the build context is
assembled from exactly those files). An image whose key is already in the store
is not built again. The store, podman's configuration and the build's
temporary files live under $SLURMKUBE_CACHE/images (default
~/.cache/slurmkube/images); the machine's own podman configuration is never
read or changed (CONTAINERS_CONF, CONTAINERS_STORAGE_CONF and
CONTAINERS_REGISTRIES_CONF point there).

What this machine needs (found when it was first tried): runc, not crun (crun
refuses hybrid cgroups); explicit ulimits no higher than the process's hard
limits (no CAP_SYS_RESOURCE to raise them); host networking for build steps.
The machine's apt settings (e.g. Acquire::Check-Valid-Until), CA bundle and pip
configuration reach the build steps that need them as build secrets: mounted
read-only under /run/secrets for one RUN, never stored in a layer.

Only the standard library: this runs before any virtualenv exists.
"""

from __future__ import annotations

import argparse
import configparser
import contextlib
import fcntl
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Bump when the recipe changes in a way the hashed inputs do not show.
RECIPE_VERSION = "1"
BASE_REPO = "localhost/slurmkube/debian"
CONMON_NPROC = 32768


@dataclass(frozen=True)
class Image:
    """One image: its Dockerfile, the files its build copies, its base suite."""

    name: str
    repo: str
    dockerfile: str
    inputs: tuple[str, ...]
    suite: str
    args: Mapping[str, str] = field(default_factory=dict)
    # Tags besides the content key; "{version}" is what `version_of` finds in the image.
    tags: tuple[str, ...] = ()
    version_of: Sequence[str] = ()


def _project_version() -> str:
    match = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    if not match:
        raise SystemExit("images: no version in pyproject.toml")
    return match.group(1)


SLURM_INPUTS = (
    "images/slurm/Dockerfile",
    "images/slurm/entrypoint.sh",
    "images/slurm/bin",
    "images/slurm/sshd_config",
)
# The Debian version of the slurmctld package, e.g. 24.11.5-4+deb13u1.
SLURM_VERSION = ("dpkg-query", "--show", "--showformat=${Version}", "slurmctld")


def slurm_image(series: str, suite: str, sssd_suite: str = "") -> Image:
    return Image(
        name=f"slurm-{series}",
        repo="localhost/slurmkube/slurm",
        dockerfile="images/slurm/Dockerfile",
        inputs=SLURM_INPUTS,
        suite=suite,
        args={"SLURM_SERIES": series, "SSSD_SUITE": sssd_suite},
        tags=(series, "{version}"),
        version_of=SLURM_VERSION,
    )


IMAGES: tuple[Image, ...] = (
    # Slurm 26.05 from Debian forky, 24.11 from trixie (Debian 13).
    # forky has no sssd (it left testing): the login pods' sssd comes from sid.
    slurm_image("26.05", "forky", sssd_suite="sid"),
    slurm_image("24.11", "trixie"),
    Image(
        name="operator",
        repo="localhost/slurmkube/operator",
        dockerfile="images/operator/Dockerfile",
        # setuptools needs every package pyproject.toml names to build the wheel.
        inputs=(
            "images/operator/Dockerfile",
            "pyproject.toml",
            "operator",
            "e2e/slurmkube_e2e",
            "e2e/local/runtime/slurmkube_runtime",
        ),
        suite="trixie",
        args={"SLURM_SERIES": "24.11"},
        tags=(_project_version(),),
    ),
)


# --- where things live ------------------------------------------------------


def cache_dir() -> Path:
    base = os.environ.get("SLURMKUBE_CACHE") or str(Path.home() / ".cache" / "slurmkube")
    return Path(base) / "images"


def podman_env(cache: Path) -> dict[str, str]:
    """podman on slurmkube's own store and settings, written on first use."""
    cache.mkdir(parents=True, exist_ok=True)
    # Without CAP_SYS_RESOURCE a container's limits must stay within the hard
    # limits of the runtime's parent, conmon, whose nproc podman caps at 32768.
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], CONMON_NPROC)
    limits = [f"nofile={nofile}:{nofile}", f"nproc={nproc}:{nproc}"]
    files = {
        "containers.conf": (
            "[containers]\n"
            f"default_ulimits = {json.dumps(limits)}\n"
            "[engine]\n"
            'runtime = "runc"\n'
            'cgroup_manager = "cgroupfs"\n'
            'events_logger = "file"\n'
            f'tmp_dir = "{cache / "tmp"}"\n'
        ),
        "storage.conf": (
            "[storage]\n"
            'driver = "overlay"\n'
            f'graphroot = "{cache / "storage"}"\n'
            f'runroot = "{cache / "run"}"\n'
        ),
        # No registry to search or pull from: every name is local.
        "registries.conf": "unqualified-search-registries = []\n",
    }
    for name, text in files.items():
        path = cache / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return {
        **os.environ,
        "CONTAINERS_CONF": str(cache / "containers.conf"),
        "CONTAINERS_STORAGE_CONF": str(cache / "storage.conf"),
        "CONTAINERS_REGISTRIES_CONF": str(cache / "registries.conf"),
        "TMPDIR": str(cache / "tmp"),
    }


# --- the machine's package sources ------------------------------------------


def _os_codename() -> str:
    for line in Path("/etc/os-release").read_text().splitlines():
        key, _, value = line.partition("=")
        if key == "VERSION_CODENAME":
            return value.strip().strip('"')
    raise SystemExit("images: no VERSION_CODENAME in /etc/os-release")


def _source_entries(text: str, deb822: bool) -> Iterator[tuple[list[str], str, list[str]]]:
    """(types, uri, suites) of each enabled entry of one sources file."""
    if deb822:
        for stanza in re.split(r"\n\s*\n", text):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if line.startswith("#") or ":" not in line or line[0].isspace():
                    continue
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
            if fields.get("enabled", "yes").lower() == "no":
                continue
            for uri in fields.get("uris", "").split():
                yield fields.get("types", "").split(), uri, fields.get("suites", "").split()
        return
    for raw in text.splitlines():
        line = re.sub(r"\[[^]]*\]", " ", raw.split("#", 1)[0]).split()
        if len(line) >= 3:
            yield [line[0]], line[1], [line[2]]


def mirror_from_sources(sources: Iterable[tuple[str, str]], codename: str) -> str | None:
    """The first URI of a `deb` entry for `codename` in (file name, text) pairs."""
    for name, text in sources:
        if not (name.endswith((".list", ".sources")) or name == "sources.list"):
            continue
        for types, uri, suites in _source_entries(text, name.endswith(".sources")):
            if "deb" in types and codename in suites:
                return uri.rstrip("/")
    return None


def debian_mirror() -> str:
    """The URI this machine's apt fetches its own release's binary packages from."""
    if override := os.environ.get("SLURMKUBE_DEBIAN_MIRROR"):
        return override
    codename = _os_codename()
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    sources = [(f.name, f.read_text()) for f in files if f.is_file()]
    mirror = mirror_from_sources(sources, codename)
    if mirror is None:
        raise SystemExit(
            f"images: no 'deb' source for {codename} in /etc/apt/sources.list*; "
            "set SLURMKUBE_DEBIAN_MIRROR to a Debian mirror URI"
        )
    return mirror


def apt_settings() -> str:
    """The machine's apt settings a build's apt-get must share (freshness, proxy)."""
    dump = subprocess.run(["apt-config", "dump"], capture_output=True, text=True, check=True).stdout
    wanted = re.compile(r"^Acquire::(Check-Valid-Until|Check-Date|https?::Proxy) ")
    return "".join(f"{line}\n" for line in dump.splitlines() if wanted.match(line))


def pip_settings() -> str:
    """The machine's pip configuration, in pip's order of precedence."""
    candidates = [
        Path("/etc/xdg/pip/pip.conf"),
        Path("/etc/pip.conf"),
        Path.home() / ".pip" / "pip.conf",
        Path.home() / ".config" / "pip" / "pip.conf",
    ]
    if env_file := os.environ.get("PIP_CONFIG_FILE"):
        candidates.append(Path(env_file))
    return merge_pip_config([p.read_text() for p in candidates if p.is_file()], os.environ)


# pip's environment settings a build shares; PIP_CERT and host paths it does not.
PIP_ENV_KEYS = {
    "PIP_INDEX_URL": "index-url",
    "PIP_EXTRA_INDEX_URL": "extra-index-url",
    "PIP_TRUSTED_HOST": "trusted-host",
    "PIP_DEFAULT_TIMEOUT": "timeout",
}
# Options naming files on this machine: the build mounts the CA bundle itself
# (PIP_CERT), and host directories do not exist in a build container.
PIP_HOST_PATHS = ("cert", "client-cert", "find-links")


def merge_pip_config(texts: Sequence[str], env: Mapping[str, str]) -> str:
    """pip config files (later wins) and pip's environment, minus host paths."""
    parser = configparser.ConfigParser(interpolation=None)
    for text in texts:
        parser.read_string(text)
    if not parser.has_section("global"):
        parser.add_section("global")
    for variable, key in PIP_ENV_KEYS.items():
        if value := env.get(variable):
            parser.set("global", key, value)
    lines = []
    for section in parser.sections():
        lines.append(f"[{section}]")
        lines.extend(
            f"{k} = {v}" for k, v in parser.items(section, raw=True) if k not in PIP_HOST_PATHS
        )
    return "\n".join(lines) + "\n"


def ca_bundle() -> Path:
    for candidate in (os.environ.get("PIP_CERT"), os.environ.get("SSL_CERT_FILE")):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return Path("/etc/ssl/certs/ca-certificates.crt")


# --- content keys -----------------------------------------------------------


def _generated(path: Path) -> bool:
    """Bytecode and the metadata of an editable install (`make venv` writes
    operator/slurmkube.egg-info): not sources, never copied."""
    return path.suffix == ".pyc" or any(
        part == "__pycache__" or part.endswith(".egg-info") for part in path.parts
    )


def input_files(image: Image, root: Path = ROOT) -> list[Path]:
    """Every file the build copies, relative to the repo root, sorted."""
    found: list[Path] = []
    for entry in image.inputs:
        path = root / entry
        if not path.exists():
            raise SystemExit(f"images: {image.name}: input {entry} does not exist")
        if path.is_file():
            found.append(Path(entry))
            continue
        for file in path.rglob("*"):
            if file.is_file() and not _generated(file.relative_to(root)):
                found.append(file.relative_to(root))
    return sorted(found)


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def base_key(suite: str) -> str:
    return _digest({"recipe": RECIPE_VERSION, "suite": suite, "variant": "minbase"})


def image_key(image: Image, root: Path = ROOT) -> str:
    """Changes when the recipe, the base or any copied file (content or x bit) does."""
    files = {}
    for rel in input_files(image, root):
        data = (root / rel).read_bytes()
        executable = os.access(root / rel, os.X_OK)
        files[str(rel)] = f"{hashlib.sha256(data).hexdigest()}:{int(executable)}"
    return _digest(
        {
            "recipe": RECIPE_VERSION,
            "dockerfile": image.dockerfile,
            "args": dict(image.args),
            "base": base_key(image.suite),
            "files": files,
        }
    )


# --- podman -----------------------------------------------------------------


@dataclass
class Podman:
    env: dict[str, str]

    def run(self, *args: str, capture: bool = False) -> str:
        proc = subprocess.run(
            ["podman", *args],
            env=self.env,
            text=True,
            stdout=subprocess.PIPE if capture else None,
            check=False,
        )
        if proc.returncode != 0:
            raise SystemExit(f"images: `podman {' '.join(args)}` failed (exit {proc.returncode})")
        return proc.stdout or ""

    def exists(self, ref: str) -> bool:
        return (
            subprocess.run(["podman", "image", "exists", ref], env=self.env, check=False).returncode
            == 0
        )

    def image_id(self, ref: str) -> str:
        return self.run("image", "inspect", "--format", "{{.Id}}", ref, capture=True).strip()


def require_tools() -> None:
    missing = [t for t in ("podman", "runc", "debootstrap") if shutil.which(t) is None]
    if missing:
        raise SystemExit(
            f"images: {', '.join(missing)} not found; install Debian's packages: "
            "apt-get install podman runc debootstrap"
        )


def debootstrap_script(suite: str) -> list[str]:
    """debootstrap knows a suite by its script; an older debootstrap lacks the
    newest testing suite, which is built like sid."""
    scripts = Path("/usr/share/debootstrap/scripts")
    if (scripts / suite).exists():
        return []
    return [str(scripts / "sid")]


def build_base(podman: Podman, cache: Path, suite: str) -> str:
    ref = f"{BASE_REPO}:{suite}-{base_key(suite)}"
    if podman.exists(ref):
        return ref
    mirror = debian_mirror()
    work = Path(tempfile.mkdtemp(prefix=f"base-{suite}-", dir=cache / "tmp"))
    try:
        rootfs = work / "rootfs"
        print(f"images: debootstrap --variant=minbase {suite} (mirror from apt's sources)")
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                suite,
                str(rootfs),
                mirror,
                *debootstrap_script(suite),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        # Downloaded packages and the host's resolver and name do not belong in
        # an image; the runtime provides /etc/resolv.conf and /etc/hostname.
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for path in (rootfs / junk).glob("*"):
                if path.is_file():
                    path.unlink()
        for name in ("etc/resolv.conf", "etc/hostname"):
            (rootfs / name).unlink(missing_ok=True)
        tarball = work / "rootfs.tar"
        subprocess.run(
            ["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", str(tarball), "."],
            check=True,
        )
        podman.run("import", "--change", 'CMD ["/bin/bash"]', str(tarball), ref)
    except subprocess.CalledProcessError as err:
        raise SystemExit(f"images: base {suite}: {err}") from err
    finally:
        shutil.rmtree(work, ignore_errors=True)
    podman.run("tag", ref, f"{BASE_REPO}:{suite}")
    return ref


def assemble_context(image: Image, dest: Path) -> None:
    for rel in input_files(image):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)


def secrets(cache: Path) -> dict[str, Path]:
    """Build secrets: regenerated each build, never part of a key or a layer."""
    generated = {"apt.conf": apt_settings(), "pip.conf": pip_settings()}
    paths = {"host-ca.crt": ca_bundle()}
    for name, text in generated.items():
        path = cache / f"secret-{name}"
        path.write_text(text)
        paths[name] = path
    return paths


@dataclass(frozen=True)
class Built:
    name: str
    key: str
    ref: str
    image_id: str
    tags: tuple[str, ...]
    seconds: float
    cached: bool


def build_image(podman: Podman, cache: Path, image: Image) -> Built:
    start = time.monotonic()
    key = image_key(image)
    ref = f"{image.repo}:{image.name}-{key}"
    cached = podman.exists(ref)
    if not cached:
        base = build_base(podman, cache, image.suite)
        context = Path(tempfile.mkdtemp(prefix=f"ctx-{image.name}-", dir=cache / "tmp"))
        try:
            assemble_context(image, context)
            args = [f"--build-arg={k}={v}" for k, v in {"BASE_IMAGE": base, **image.args}.items()]
            mounts = [f"--secret=id={k},src={v}" for k, v in secrets(cache).items()]
            print(f"images: building {image.name} ({ref})")
            podman.run(
                "build",
                "--pull=never",
                "--network=host",
                "--layers",
                "--file",
                str(context / image.dockerfile),
                *args,
                *mounts,
                "--tag",
                ref,
                str(context),
            )
        finally:
            shutil.rmtree(context, ignore_errors=True)
    tags = []
    version = ""
    if image.version_of:
        out = podman.run(
            "run",
            "--rm",
            "--network=none",
            "--user=0",
            "--entrypoint",
            image.version_of[0],
            ref,
            *image.version_of[1:],
            capture=True,
        )
        # Debian's 24.11.5-4+deb13u1 -> upstream 24.11.5.
        version = out.strip().split("-", 1)[0].split(":")[-1]
    for tag in image.tags:
        full = f"{image.repo}:{tag.format(version=version)}"
        podman.run("tag", ref, full)
        tags.append(full)
    return Built(
        image.name, key, ref, podman.image_id(ref), tuple(tags), time.monotonic() - start, cached
    )


@contextlib.contextmanager
def store_lock(cache: Path) -> Iterator[None]:
    """One build at a time per store: sessions share ~/.cache/slurmkube."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def selected(only: Sequence[str] | None) -> list[Image]:
    if not only:
        return list(IMAGES)
    known = {i.name: i for i in IMAGES}
    unknown = [n for n in only if n not in known]
    if unknown:
        raise SystemExit(f"images: unknown image {unknown}; known: {sorted(known)}")
    return [known[n] for n in only]


def manifest_path(cache: Path) -> Path:
    return cache / "built.json"


def cmd_build(only: Sequence[str] | None) -> list[Built]:
    require_tools()
    cache = cache_dir()
    podman = Podman(podman_env(cache))
    (cache / "tmp").mkdir(parents=True, exist_ok=True)
    results = []
    with store_lock(cache):
        for image in selected(only):
            built = build_image(podman, cache, image)
            how = "cached" if built.cached else "built"
            print(f"images: {built.name}: {how} in {built.seconds:.1f} s: {', '.join(built.tags)}")
            results.append(built)
        manifest = {}
        if manifest_path(cache).exists():
            manifest = json.loads(manifest_path(cache).read_text())
        for built in results:
            manifest[built.name] = {
                "key": built.key,
                "ref": built.ref,
                "id": built.image_id,
                "tags": list(built.tags),
            }
        manifest_path(cache).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return results


def built_images() -> dict[str, dict[str, Any]]:
    """What the builds recorded, by image name: key, ref, id, tags."""
    path = manifest_path(cache_dir())
    data: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.exists() else {}
    return data


def cmd_export(out: Path, only: Sequence[str] | None) -> None:
    cache = cache_dir()
    podman = Podman(podman_env(cache))
    out.mkdir(parents=True, exist_ok=True)
    recorded = built_images()
    for image in selected(only):
        key = image_key(image)
        ref = f"{image.repo}:{image.name}-{key}"
        entry = recorded.get(image.name)
        if not podman.exists(ref) or entry is None:
            raise SystemExit(
                f"images: {image.name} is not built for its current inputs; make images"
            )
        tags = [str(t) for t in entry["tags"]]
        name = tags[-1].rsplit("/", 1)[-1].replace(":", "-")
        archive = out / f"{name}.oci.tar"
        archive.unlink(missing_ok=True)
        # The archive's reference name is the last tag (e.g. slurm:24.11.5).
        podman.run("save", "--format", "oci-archive", "--output", str(archive), tags[-1])
        print(f"images: {image.name}: {archive} ({archive.stat().st_size // 2**20} MiB)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="images/build.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command")
    build = sub.add_parser("build", help="build what changed")
    build.add_argument("--only", nargs="+", metavar="NAME")
    export = sub.add_parser("export", help="write OCI archives")
    export.add_argument("--out", type=Path, required=True)
    export.add_argument("--only", nargs="+", metavar="NAME")
    listing = sub.add_parser("list", help="the built images")
    listing.add_argument("--json", action="store_true")
    sub.add_parser("podman", help="podman on slurmkube's store", add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command == "podman":
        env = podman_env(cache_dir())
        os.execvpe("podman", ["podman", *rest], env)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command in (None, "build"):
        cmd_build(getattr(args, "only", None))
    elif args.command == "export":
        cmd_export(args.out, args.only)
    elif args.command == "list":
        data = built_images()
        if args.json:
            print(json.dumps(data, indent=2, sort_keys=True))
        else:
            for name, entry in sorted(data.items()):
                print(f"{name}: {' '.join(entry['tags'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
