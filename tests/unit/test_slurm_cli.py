"""CliClient's process handling with a stand-in scontrol script, and its error mapping."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import jwt
import pytest

from slurmkube.api.grammar import InvalidValue
from slurmkube.api.slurm_version import SlurmVersion
from slurmkube.slurm import (
    CliClient,
    SlurmAuthError,
    SlurmError,
    SlurmNotFound,
    SlurmRejected,
    SlurmUnreachable,
    drain,
    resume_if_ours,
)
from slurmkube.slurm.cli import classify_failure
from slurmkube.slurm.jwt_cli import client_config, jwt_cli_client

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


@pytest.mark.parametrize(
    ("stderr", "error"),
    [
        # Texts scontrol 24.11.5 printed in the integration cluster.
        (
            "slurm_load_node error: Unable to contact slurm controller (connect failure)",
            SlurmUnreachable,
        ),
        ("slurm_load_node error: Protocol authentication error", SlurmAuthError),
        ("slurm_update error: Access/permission denied", SlurmAuthError),
        ("slurm_update error: Invalid node name specified", SlurmNotFound),
        ("Node nosuch not found", SlurmNotFound),
        ("Reservation nosuch not found", SlurmNotFound),
        ("Error creating the reservation: Requested nodes are busy", SlurmRejected),
        (
            "scontrol: error: Either Users/Groups and/or Accounts must be specified.  "
            "No reservation created.",
            SlurmRejected,
        ),
        # `scontrol requeue` of a --no-requeue job (ESLURM_DISABLED) and of one
        # that ended meanwhile (ESLURM_INVALID_JOB_ID), slurm_errno.c's texts.
        ("12: Requested operation is presently disabled", SlurmRejected),
        ("Invalid job id specified for job 12", SlurmNotFound),
        ("", SlurmRejected),
    ],
)
def test_scontrol_messages_map_to_typed_errors(stderr: str, error: type[SlurmError]) -> None:
    raised = classify_failure(stderr, "op")
    assert type(raised) is error
    if stderr:
        assert raised.message == stderr  # Slurm's words, unchanged


@pytest.fixture
def scontrol(tmp_path: Path) -> Path:
    """A stand-in scontrol: logs argv and TZ, answers `show node` from a fixture,
    fails like scontrol for node `gone`."""
    log = tmp_path / "argv.log"
    nodes = FIXTURES / "cli" / "show-node.json"
    script = tmp_path / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "TZ=$TZ $*" >> {log}\n'
        'case "$*" in\n'
        '  *NodeName=gone*) echo "slurm_update error: Invalid node name specified" >&2; exit 1;;\n'
        f'  "--json show node"*) cat {nodes};;\n'
        f'  "show topoconf") cat {FIXTURES / "cli" / "show-topoconf-26.05.yaml"};;\n'
        '  "--version") echo "slurm 24.11.5";;\n'
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return tmp_path


def calls(bin_dir: Path) -> list[str]:
    return (bin_dir / "argv.log").read_text().splitlines()


def test_drain_and_resume_send_exact_argv_in_utc(scontrol: Path) -> None:
    cli = CliClient(bin_dir=scontrol, env=dict(os.environ))

    drain(cli, "gb200-004", "lent to w-1")
    assert resume_if_ours(cli, "gb200-001") is True  # fixture: "slurmkube: test"
    assert resume_if_ours(cli, "gb200-022") is False  # fixture: "admin: bad gpu"
    assert resume_if_ours(cli, "gb200-004") is False  # fixture: not drained

    assert calls(scontrol) == [
        "TZ=UTC update NodeName=gb200-004 State=DRAIN Reason=slurmkube: lent to w-1",
        "TZ=UTC --json show node gb200-001",
        "TZ=UTC update NodeName=gb200-001 State=UNDRAIN",
        "TZ=UTC --json show node gb200-022",
        "TZ=UTC --json show node gb200-004",
    ]


def test_requeue_runs_scontrol_requeue_with_the_job_id(scontrol: Path) -> None:
    CliClient(bin_dir=scontrol, env=dict(os.environ)).requeue_job(12)
    assert calls(scontrol) == ["TZ=UTC requeue 12"]


def test_failures_and_missing_scontrol_are_typed(scontrol: Path, tmp_path: Path) -> None:
    cli = CliClient(bin_dir=scontrol, env=dict(os.environ))
    with pytest.raises(SlurmNotFound, match="Invalid node name"):
        drain(cli, "gone", "x")
    with pytest.raises(SlurmError, match="scontrol not found"):
        CliClient(bin_dir=tmp_path / "nowhere").list_nodes()


def test_scontrol_release_is_asked_once(scontrol: Path) -> None:
    cli = CliClient(bin_dir=scontrol, env=dict(os.environ))
    assert cli.release() == cli.release() == SlurmVersion(24, 11)
    assert calls(scontrol) == ["TZ=UTC --version"]


def test_wrapper_decides_how_scontrol_runs(scontrol: Path) -> None:
    seen: list[list[str]] = []

    def wrapper(argv: list[str]) -> list[str]:
        seen.append(argv)
        return argv

    nodes = CliClient(bin_dir=scontrol, env=dict(os.environ), wrapper=wrapper).list_nodes()

    assert len(nodes) == len(json.loads((FIXTURES / "cli" / "show-node.json").read_text())["nodes"])
    assert seen == [[str(scontrol / "scontrol"), "--json", "show", "node"]]


def test_jwt_client_sends_a_fresh_token_and_its_own_config(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "env.log"
    script = bin_dir / "scontrol"
    script.write_text(f'#!/bin/sh\necho "$SLURM_CONF $SLURM_JWT" >> {log}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    config = client_config("gpu", "gpu-slurmctld-0", "10.0.0.7", 6817)
    cli = jwt_cli_client(
        config=config,
        config_dir=tmp_path / "conf",
        jwt_key=b"k" * 32,
        user="slurm",
        bin_dir=bin_dir,
    )

    cli.reconfigure()

    conf_path, token = log.read_text().split()
    assert Path(conf_path).read_text() == config
    assert "SlurmctldHost=gpu-slurmctld-0(10.0.0.7)\n" in config
    assert jwt.decode(token, b"k" * 32, algorithms=["HS256"])["sun"] == "slurm"


@pytest.mark.parametrize(
    ("cluster", "host", "addr"),
    [
        ("gpu\nInclude=/etc/x", "h", "10.0.0.1"),
        ("gpu", "h(evil)", "10.0.0.1"),
        ("gpu", "h", "10.0.0.1\nAuthType=auth/none"),
    ],
    ids=["cluster", "host", "address"],
)
def test_client_config_refuses_values_that_would_add_lines(
    cluster: str, host: str, addr: str
) -> None:
    with pytest.raises(InvalidValue):
        client_config(cluster, host, addr, 6817)


def test_show_topologies_reads_every_named_topology_in_force(scontrol: Path) -> None:
    topologies = CliClient(bin_dir=scontrol, env=dict(os.environ)).show_topologies()
    assert sorted(topologies) == ["flat", "network", "nvlink"]
    assert topologies["network"]["spine-01"].switches == {"leaf-01", "leaf-02"}
    assert topologies["nvlink"]["b1"].nodes == {"gpu-0001", "gpu-0002"}
    assert calls(scontrol) == ["TZ=UTC show topoconf"]


def test_unreadable_topologies_are_a_slurm_error(tmp_path: Path) -> None:
    script = tmp_path / "scontrol"
    script.write_text("#!/bin/sh\necho 'Topology=flat: not yaml ['\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(SlurmError, match="show topoconf: unreadable topologies"):
        CliClient(bin_dir=tmp_path, env=dict(os.environ)).show_topologies()
