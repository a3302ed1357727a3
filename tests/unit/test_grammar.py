"""Every validator refuses what could break a Slurm line, and says where and what is accepted."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from slurmkube.api import grammar
from slurmkube.api.grammar import InvalidValue, SlurmToken

Validator = Callable[[object, str], SlurmToken]

INJECTIONS = [
    "a\nInclude=/etc/passwd",
    "a\rb",
    "a b",
    "a#comment",
    "a=b",
    "",
    "x" * 200,
    "a,b",
    "a[1-2]",
    "a\tb",
    "a\x00b",
]

VALIDATORS: dict[str, Validator] = {
    "hostname": grammar.hostname,
    "partition_name": grammar.partition_name,
    "cluster_name": grammar.cluster_name,
    "feature": grammar.feature,
    "gres_type": grammar.gres_type,
    "topology_name": grammar.topology_name,
    "slurm_time": grammar.slurm_time,
    "slurm_account": grammar.slurm_account,
    "slurm_user": grammar.slurm_user,
    "slurm_qos": grammar.slurm_qos,
}


@pytest.mark.parametrize("value", INJECTIONS)
@pytest.mark.parametrize("name", sorted(VALIDATORS))
def test_validators_refuse_line_breaking_values(name: str, value: str) -> None:
    with pytest.raises(InvalidValue) as err:
        VALIDATORS[name](value, "Obj x spec.field")
    assert "Obj x spec.field" in str(err.value)
    assert "expected" in str(err.value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("hostname", "gpu-0001"),
        ("hostname", "ip-10-0-0-1.ec2.internal"),
        ("partition_name", "gpu_big-1"),
        ("cluster_name", "fleet"),
        ("feature", "nvl72"),
        ("gres_type", "h100-80gb-hbm3"),
        ("topology_name", "3c9d6e2a-4b7f-4f3e-9a51-2d8c0e7b1f64.1"),
        ("slurm_time", "2-00:00:00"),
        ("slurm_time", "UNLIMITED"),
        ("slurm_time", "90"),
        ("slurm_account", "team-a"),
        ("slurm_qos", "budget-team-a"),
        ("slurm_user", "alice.smith"),
        ("slurm_user", "_svc-batch"),
    ],
)
def test_validators_accept_domain_values(name: str, value: str) -> None:
    token = VALIDATORS[name](value, "where")
    assert token == value
    assert isinstance(token, SlurmToken)


@pytest.mark.parametrize(
    "value",
    ["GPU-1", "-gpu", "gpu-", "a..b", "a" * 64],
)
def test_hostname_follows_kubernetes_and_slurm_rules(value: str) -> None:
    with pytest.raises(InvalidValue):
        grammar.hostname(value, "Node x metadata.name")


def test_partition_named_default_is_refused() -> None:
    with pytest.raises(InvalidValue):
        grammar.partition_name("DEFAULT", "p")


@pytest.mark.parametrize(
    ("line", "accepted"),
    [
        ("MaxArraySize=100001", True),
        ("KillWait=30", True),
        ("Include=/etc/passwd", False),
        ("include=/etc/passwd", False),
        ("SlurmctldHost=evil", False),
        ("Prolog=/tmp/x.sh", False),
        ("NodeName=x", False),
        ("KillWait=30\nInclude=/x", False),
        ("KillWait=30 Include=/x", False),
        ("KillWait=30#x", False),
        ("KillWait", False),
        ("=30", False),
    ],
)
def test_extra_config_lines(line: str, accepted: bool) -> None:
    if accepted:
        assert grammar.config_line(line, "extraConfig[0]") == line
    else:
        with pytest.raises(InvalidValue):
            grammar.config_line(line, "extraConfig[0]")


def test_joined_refuses_plain_strings() -> None:
    with pytest.raises(TypeError):
        grammar.joined([grammar.feature("a", "x"), "b"])  # type: ignore[list-item]
