"""Names the builders derive: every one a name the API server accepts."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkube.build.names import dns_label, pod_hostname
from slurmkube.build.slurmd import slurmd_pod
from slurmkube_local.builders import bundle

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_LABEL_PART = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)


@pytest.mark.parametrize(
    ("node", "hostname"),
    [
        ("gpu-0001", "gpu-0001"),
        ("ip-10-4-0-10.ec2.internal", "ip-10-4-0-10-ec2-internal"),
        ("a" * 63, "a" * 63),
    ],
)
def test_a_pod_hostname_is_the_node_name_without_dots(node: str, hostname: str) -> None:
    assert pod_hostname(node) == hostname


@given(st.lists(_LABEL_PART, min_size=1, max_size=6).map(".".join))
def test_every_node_name_gives_a_hostname_the_api_server_accepts(node: str) -> None:
    assert _DNS_LABEL.match(pod_hostname(node))


def test_a_long_name_is_shortened_deterministically() -> None:
    name = "x" * 80
    assert dns_label(name) == dns_label(name)
    assert len(dns_label(name)) == 63


def test_the_slurmd_pod_on_a_dotted_node_keeps_the_node_name_for_slurm() -> None:
    b = bundle()
    pod = slurmd_pod(b.cluster, b.node_sets[0], "ip-10-4-0-10.ec2.internal", 8, "hash")
    assert pod["spec"]["hostname"] == "ip-10-4-0-10-ec2-internal"
    assert pod["spec"]["containers"][0]["args"][2:4] == ["-N", "ip-10-4-0-10.ec2.internal"]
