"""images/build.py without podman: where the Debian mirror comes from, what of
pip's configuration reaches a build, and when an image's content key changes."""

from __future__ import annotations

import configparser
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from images import build

MIRROR = "http://mirror.invalid/debian"
OTHER = "http://other.invalid/debian"

DEB822 = f"""Types: deb
URIs: {MIRROR}/
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: {OTHER}-security
Suites: bookworm-security
Components: main
"""


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        ([("debian.sources", DEB822)], MIRROR),
        ([("sources.list", f"deb [signed-by=/k.gpg] {MIRROR} bookworm main\n")], MIRROR),
        # deb-src, another suite, a disabled stanza and a comment are not the mirror.
        (
            [
                ("src.sources", f"Types: deb-src\nURIs: {OTHER}\nSuites: bookworm\n"),
                ("off.sources", f"Types: deb\nURIs: {OTHER}\nSuites: bookworm\nEnabled: no\n"),
                ("x.list", f"# deb {OTHER} bookworm main\ndeb {OTHER} trixie main\n"),
                ("debian.sources", DEB822),
            ],
            MIRROR,
        ),
        # Files apt ignores (by name) are ignored here too.
        ([("debian.sources.disabled", DEB822)], None),
        ([], None),
    ],
    ids=["deb822", "one-line", "skips-others", "disabled-file", "none"],
)
def test_mirror_is_the_deb_source_of_the_machines_release(
    sources: list[tuple[str, str]], expected: str | None
) -> None:
    assert build.mirror_from_sources(sources, "bookworm") == expected


def test_pip_config_keeps_the_index_and_drops_host_paths() -> None:
    merged = build.merge_pip_config(
        [
            "[global]\ncert = /etc/ssl/host.pem\nindex-url = https://a.invalid/simple\n",
            "[global]\nfind-links = /opt/wheels\ntimeout = 60\n[install]\nno-compile = yes\n",
        ],
        {"PIP_INDEX_URL": "https://b.invalid/simple", "PIP_CERT": "/etc/ssl/other.pem"},
    )
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(merged)
    assert dict(parser["global"]) == {"index-url": "https://b.invalid/simple", "timeout": "60"}
    assert dict(parser["install"]) == {"no-compile": "yes"}


IMAGE = build.Image(
    name="t",
    repo="localhost/t",
    dockerfile="images/t/Dockerfile",
    inputs=("images/t/Dockerfile", "pkg"),
    suite="trixie",
    args={"SLURM_SERIES": "24.11"},
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "images/t").mkdir(parents=True)
    (tmp_path / "images/t/Dockerfile").write_text("FROM x\n")
    (tmp_path / "pkg/sub").mkdir(parents=True)
    (tmp_path / "pkg/a.py").write_text("a = 1\n")
    (tmp_path / "pkg/sub/b.sh").write_text("echo b\n")
    return tmp_path


def test_key_ignores_bytecode_and_install_metadata(tree: Path) -> None:
    before = build.image_key(IMAGE, tree)
    (tree / "pkg/__pycache__").mkdir()
    (tree / "pkg/__pycache__/a.cpython-311.pyc").write_bytes(b"\0")
    (tree / "pkg/stray.pyc").write_bytes(b"\0")
    (tree / "pkg/t.egg-info").mkdir()
    (tree / "pkg/t.egg-info/PKG-INFO").write_text("Name: t\n")
    assert build.image_key(IMAGE, tree) == before
    assert [str(p) for p in build.input_files(IMAGE, tree)] == [
        "images/t/Dockerfile",
        "pkg/a.py",
        "pkg/sub/b.sh",
    ]


@pytest.mark.parametrize(
    "change",
    ["content", "mode", "new-file", "removed-file", "args", "suite"],
)
def test_key_changes_with_every_input(tree: Path, change: str) -> None:
    image = IMAGE
    before = build.image_key(image, tree)
    if change == "content":
        (tree / "pkg/sub/b.sh").write_text("echo c\n")
    elif change == "mode":
        (tree / "pkg/sub/b.sh").chmod(0o755)
    elif change == "new-file":
        (tree / "pkg/c.py").write_text("")
    elif change == "removed-file":
        (tree / "pkg/a.py").unlink()
    elif change == "args":
        image = build.Image(**{**IMAGE.__dict__, "args": {"SLURM_SERIES": "26.05"}})
    elif change == "suite":
        image = build.Image(**{**IMAGE.__dict__, "suite": "forky"})
    assert build.image_key(image, tree) != before


@given(st.binary(max_size=64))
def test_key_is_a_function_of_content_not_of_where_the_tree_is(data: bytes) -> None:
    keys = set()
    for _ in range(2):
        root = Path(tempfile.mkdtemp())
        try:
            (root / "images/t").mkdir(parents=True)
            (root / "images/t/Dockerfile").write_bytes(data)
            (root / "pkg").mkdir()
            keys.add(build.image_key(IMAGE, root))
        finally:
            shutil.rmtree(root)
    assert len(keys) == 1


def test_a_missing_input_fails_loudly(tree: Path) -> None:
    shutil.rmtree(tree / "pkg")
    with pytest.raises(SystemExit, match="input pkg does not exist"):
        build.image_key(IMAGE, tree)


def test_unknown_image_names_are_refused() -> None:
    with pytest.raises(SystemExit, match="unknown image"):
        build.selected(["slurm-23.02"])


def test_every_image_copies_only_files_that_exist() -> None:
    # The real recipes against this checkout: a renamed file fails here, not in a build.
    for image in build.IMAGES:
        assert build.input_files(image)
        assert (build.ROOT / image.dockerfile).is_file()
