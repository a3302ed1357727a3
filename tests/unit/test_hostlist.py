from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from slurmkube.render.hostlist import compress
from slurmkube.slurm.hostlist import expand

name = st.builds(
    lambda prefix, n, width: f"{prefix}{str(n).zfill(width)}",
    st.sampled_from(["gpu-", "cpu-", "node", "a.b-", "x"]),
    st.integers(0, 2000),
    st.integers(1, 4),
) | st.sampled_from(["login", "ctl", "head-a"])


@given(st.lists(name, min_size=1, max_size=200))
def test_compress_expands_back_to_the_same_names(names: list[str]) -> None:
    assert sorted(expand(compress(names))) == sorted(set(names))


@given(st.lists(name, min_size=1, max_size=100), st.randoms())
def test_compress_is_independent_of_order(names: list[str], rnd: random.Random) -> None:
    shuffled = list(names)
    rnd.shuffle(shuffled)
    assert compress(shuffled) == compress(names)


def test_ranges_keep_zero_padding() -> None:
    assert compress(["gpu-08", "gpu-09", "gpu-10", "gpu-12"]) == "gpu-[08-10,12]"
    assert compress(["gpu-7", "gpu-12"]) == "gpu-7,gpu-12"
    assert compress(["n1"]) == "n1"
