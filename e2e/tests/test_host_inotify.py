"""The inotify limits real nodes need (no cluster needed)."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkube_e2e import host_inotify
from slurmkube_e2e.host_inotify import InotifyUse, LimitRaise, limits_to_raise

PER_NODE = InotifyUse(instances=9, watches=100)
HEADROOM = InotifyUse(instances=20, watches=50)
DEFAULTS = InotifyUse(instances=128, watches=8192)

CASES = {
    "eight nodes beside four exceed the default 128 instances": (
        DEFAULTS,
        InotifyUse(56, 1000),
        8,
        [LimitRaise("max_user_instances", 128, 56 + 8 * 9 + 20, 56)],
    ),
    "four nodes on an idle host fit": (DEFAULTS, InotifyUse(10, 20), 4, []),
    "watches run out first": (
        InotifyUse(1024, 1000),
        InotifyUse(10, 700),
        3,
        [LimitRaise("max_user_watches", 1000, 700 + 300 + 50, 700)],
    ),
    "both run out": (
        InotifyUse(50, 100),
        InotifyUse(40, 90),
        1,
        [
            LimitRaise("max_user_instances", 50, 69, 40),
            LimitRaise("max_user_watches", 100, 240, 90),
        ],
    ),
    "exactly enough is enough": (
        InotifyUse(10 + 18 + 20, 20 + 200 + 50),
        InotifyUse(10, 20),
        2,
        [],
    ),
    "nodes already running need nothing more": (InotifyUse(1, 1), InotifyUse(500, 500), 0, []),
}


@pytest.mark.parametrize("case", CASES)
def test_limits_to_raise(case: str) -> None:
    limits, in_use, new_nodes, expected = CASES[case]
    assert limits_to_raise(limits, in_use, new_nodes, PER_NODE, HEADROOM) == expected


uses = st.builds(InotifyUse, st.integers(0, 10**6), st.integers(0, 10**7))


@given(uses, uses, st.integers(0, 8))
def test_a_limit_is_only_ever_raised(limits: InotifyUse, in_use: InotifyUse, new: int) -> None:
    for r in limits_to_raise(limits, in_use, new, PER_NODE, HEADROOM):
        assert r.needed > r.current == getattr(limits, r.sysctl.removeprefix("max_user_"))


def _sysctls(tmp_path: Path, instances: int, watches: int) -> Path:
    (tmp_path / "max_user_instances").write_text(f"{instances}\n")
    (tmp_path / "max_user_watches").write_text(f"{watches}\n")
    return tmp_path


def test_ensure_room_writes_the_value_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_inotify, "root_use", lambda: InotifyUse(56, 1000))
    d = _sysctls(tmp_path, 128, 10**7)
    (raised,) = host_inotify.ensure_room(8, d)
    assert (d / "max_user_instances").read_text() == f"{raised.needed}\n"
    assert raised.needed > 128 and (d / "max_user_watches").read_text() == f"{10**7}\n"


def test_a_refused_write_names_the_sysctl_and_the_value_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_inotify, "root_use", lambda: InotifyUse(56, 1000))
    d = _sysctls(tmp_path, 128, 10**7)

    def refuse(self: Path, text: str) -> int:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "write_text", refuse)
    needed = limits_to_raise(InotifyUse(128, 10**7), InotifyUse(56, 1000), 8)[0].needed
    with pytest.raises(host_inotify.InotifyLimitError) as err:
        host_inotify.ensure_room(8, d)
    assert f"fs.inotify.max_user_instances is 128; 8 new real nodes need {needed}" in str(err.value)
    assert f"sysctl -w fs.inotify.max_user_instances={needed}" in str(err.value)


def test_a_process_is_counted_one_instance_and_one_watch_per_watch() -> None:
    me = Path(f"/proc/{os.getpid()}")
    before = host_inotify.process_use(me)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = int(libc.inotify_init())
    assert fd >= 0
    try:
        for path in (b"/", b"/tmp"):
            assert libc.inotify_add_watch(fd, path, 0x100) >= 0  # IN_CREATE
        assert host_inotify.process_use(me) == before + InotifyUse(1, 2)
    finally:
        os.close(fd)
    assert host_inotify.process_use(me) == before
