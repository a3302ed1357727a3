"""The slurmd-side GPU check (`spec.health.nodeCheck`): what slurm.conf gets, the
program the Slurm image ships (run here with fake device files), and how the health
planner recovers a node that program drained: its active check, then resume."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from slurmkube.api import well_known as wk
from slurmkube.api.documents import DocumentError
from slurmkube.api.models import HealthSpec
from slurmkube.controllers import health as health_controller
from slurmkube.controllers.health import node_check_enabled
from slurmkube.controllers.health_apply import CHECK_SCRIPT
from slurmkube.plan import health_rules as rules
from slurmkube.plan.health_model import NodeMemory
from slurmkube.render import RenderContext, plan_config, render_files
from slurmkube.slurm.arguments import reason as adapter_reason
from slurmkube_local.builders import bundle, nvl_fleet
from tests.unit.test_health_plan import N, kinds, plan, verdict

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "images" / "slurm" / "bin" / "slurmkube-gpu-check"
# What the program writes when one of four GPUs is gone (its own output, below).
GPU_GONE = "slurmkube:health: gpu check: 3 of 4 GPU devices found"


# --- slurm.conf ---------------------------------------------------------------------


def health_lines(health: dict[str, Any] | None, ctx: RenderContext | None = None) -> list[str]:
    extra = {"health": health} if health is not None else {}
    config = plan_config(bundle(extra=extra), nvl_fleet(1, 2), ctx)
    slurm = render_files(config).files["slurm.conf"]
    return [line for line in slurm.splitlines() if line.startswith("HealthCheck")]


@pytest.mark.parametrize(
    ("health", "want"),
    [
        pytest.param(None, [], id="no-health-no-program"),
        pytest.param({"nodeCheck": {"enabled": False}}, [], id="off-by-default"),
        pytest.param(
            {"nodeCheck": {"enabled": True}},
            [
                "HealthCheckProgram=/usr/local/bin/slurmkube-gpu-check",
                "HealthCheckInterval=300",
                "HealthCheckNodeState=ANY",
            ],
            id="on-the-image-program-every-5-minutes-in-any-state",
        ),
        pytest.param(
            {"nodeCheck": {"enabled": True, "intervalSeconds": 60, "nodeState": "IDLE"}},
            [
                "HealthCheckProgram=/usr/local/bin/slurmkube-gpu-check",
                "HealthCheckInterval=60",
                "HealthCheckNodeState=IDLE",
            ],
            id="interval-and-state-as-given",
        ),
    ],
)
def test_node_check_renders_slurmds_health_check_program(
    health: dict[str, Any] | None, want: list[str]
) -> None:
    assert health_lines(health) == want


def test_the_program_path_comes_from_the_render_context() -> None:
    ctx = RenderContext(health_check_program="/opt/site/gpu-check")
    lines = health_lines({"nodeCheck": {"enabled": True}}, ctx)
    assert lines[0] == "HealthCheckProgram=/opt/site/gpu-check"


def test_a_program_path_with_shell_characters_never_reaches_slurm_conf() -> None:
    ctx = RenderContext(health_check_program="/bin/sh -c reboot")
    with pytest.raises(ValueError, match=r"context\.health_check_program"):
        health_lines({"nodeCheck": {"enabled": True}}, ctx)


@pytest.mark.parametrize(
    ("node_check", "field"),
    [
        pytest.param({"enabled": True, "intervalSeconds": 0}, "intervalSeconds", id="interval-0"),
        pytest.param({"nodeState": "ANY\nRebootProgram=/x"}, "nodeState", id="state-injection"),
        pytest.param({"program": "/tmp/x"}, "program", id="no-program-field"),
    ],
)
def test_bad_node_check_values_are_refused_naming_the_field(
    node_check: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError, match=field):
        HealthSpec.model_validate({"nodeCheck": node_check})
    with pytest.raises(DocumentError, match=field):
        bundle(extra={"health": {"nodeCheck": node_check}})


@pytest.mark.parametrize("line", ["HealthCheckInterval=10", "HealthCheckNodeState=IDLE"])
def test_extra_config_cannot_set_what_node_check_renders(line: str) -> None:
    with pytest.raises(DocumentError, match=line.split("=", maxsplit=1)[0]):
        bundle(extra={"extraConfig": [line]})


@pytest.mark.parametrize(
    ("spec", "acts", "watched"),
    [
        pytest.param({}, False, False, id="nothing"),
        pytest.param({"health": {"nodeCheck": {"enabled": True}}}, True, True, id="node-check"),
        pytest.param({"health": {"nodeCheck": {"enabled": False}}}, False, False, id="off"),
        pytest.param(
            {"health": {"rules": [{"condition": {"type": "X"}, "severity": "drain"}]}},
            True,
            False,
            id="rules-only",
        ),
    ],
)
def test_health_acts_with_rules_or_the_node_check(
    spec: dict[str, Any], acts: bool, watched: bool
) -> None:
    """The controller keeps a key for a cluster with the node check even without rules:
    slurmd's drains need its recovery."""
    assert HealthSpec.model_validate(spec.get("health") or {}).acts is acts
    assert node_check_enabled(spec) is watched


def test_a_cluster_with_only_the_node_check_gets_health_passes() -> None:
    key = ("ns", "node-check-only")
    on = {"health": {"nodeCheck": {"enabled": True}}}
    try:
        health_controller.cluster_event("ADDED", "ns", key[1], on, {})  # type: ignore[arg-type]
        assert health_controller.HEALTH.clusters[key] == frozenset()
        health_controller.cluster_event("MODIFIED", "ns", key[1], {}, {})  # type: ignore[arg-type]
        assert key not in health_controller.HEALTH.clusters
    finally:
        health_controller.HEALTH.clusters.pop(key, None)
        health_controller.PASSES.forget(key)


# --- the program, with fake GPU device files ----------------------------------------


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str

    @property
    def reason(self) -> str:
        """The drain reason the program reports (after `<node>: `)."""
        line = next(x for x in self.err.splitlines() if wk.HEALTH_REASON_PREFIX in x)
        return line[line.index(wk.HEALTH_REASON_PREFIX) :]


def devices(directory: Path, names: Sequence[str]) -> Path:
    directory.mkdir(exist_ok=True)
    for name in names:
        (directory / name).touch()
    return directory


def run(*args: str, env: dict[str, str] | None = None) -> Run:
    proc = subprocess.run(
        [str(PROGRAM), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"SLURMD_NODENAME": "gpu-0001", **(env or {})},
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


CONTROL = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-caps"]


@pytest.mark.parametrize(
    ("files", "gpus", "code"),
    [
        pytest.param(["nvidia0", "nvidia1", "nvidia2", "nvidia3"], 4, 0, id="all-there"),
        pytest.param(["nvidia0", "nvidia1", "nvidia3"], 4, 1, id="one-gone"),
        pytest.param([], 4, 1, id="all-gone"),
        pytest.param(CONTROL, 1, 1, id="control-devices-are-no-gpus"),
        pytest.param(["nvidia10", "nvidia11"], 2, 0, id="two-digit-indexes"),
        pytest.param([], 0, 0, id="a-cpu-node-passes"),
        pytest.param(["nvidia0", "nvidia1"], 1, 0, id="more-than-configured-passes"),
    ],
)
def test_the_gpu_check_compares_device_files_with_the_configured_count(
    tmp_path: Path, files: list[str], gpus: int, code: int
) -> None:
    dev = devices(tmp_path / "dev", [*files, *CONTROL])
    got = run("--no-drain", "--gpus", str(gpus), "--dev", str(dev))
    assert got.code == code, got


def test_a_failing_check_reports_an_owned_reason_slurm_accepts(tmp_path: Path) -> None:
    dev = devices(tmp_path / "dev", ["nvidia0", "nvidia1", "nvidia3"])
    got = run("--no-drain", "--gpus", "4", "--dev", str(dev))
    assert got.reason == GPU_GONE
    assert wk.is_health_drain(got.reason) and not rules.is_held_reason(got.reason)
    assert adapter_reason(got.reason) == got.reason


@pytest.mark.parametrize(
    ("args", "env"),
    [
        pytest.param(["--gpus", "4;reboot"], {}, id="count-not-a-number"),
        pytest.param(["--gpus"], {}, id="count-missing"),
        pytest.param(["--frobnicate"], {}, id="unknown-option"),
        pytest.param([], {"SLURMD_NODENAME": "gpu$(reboot)"}, id="node-name-injection"),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(
    args: list[str], env: dict[str, str]
) -> None:
    got = run("--no-drain", *args, env=env)
    assert got.code == 64, got


def tool(directory: Path, name: str, body: str) -> None:
    """A fake of a program the check calls, as a small sh script."""
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def fake_scontrol(tools: Path, record: str | None) -> Path:
    """`scontrol -o show node` prints `record` (None: slurmctld unreachable); an
    `update` is written, one argument a line, to the returned file."""
    updates = tools / "updates"
    show = f"printf '%s\\n' '{record}'" if record is not None else "exit 1"
    tool(
        tools,
        "scontrol",
        f'case "$1" in -o) {show} ;; update) printf "%s\\n" "$@" >{updates} ;; esac',
    )
    return updates


def record(state: str, gres: str) -> str:
    return f"NodeName=gpu-0001 Arch=x86_64 CPUs=64 Gres={gres} State={state} Weight=1"


FOUR = [f"nvidia{i}" for i in range(4)]


@pytest.mark.parametrize(
    ("shown", "files", "code", "drained"),
    [
        pytest.param(
            record("IDLE", "gpu:gb200:4(S:0-1)"), FOUR[:3], 1, GPU_GONE, id="gpu-gone-drains"
        ),
        pytest.param(
            record("MIXED", "gpu:gb200:4(S:0,1)"), FOUR[:3], 1, GPU_GONE, id="busy-drains-too"
        ),
        pytest.param(
            record("IDLE+DRAIN", "gpu:gb200:4"), FOUR[:3], 1, None, id="drained-keeps-reason"
        ),
        pytest.param(
            record("IDLE", "gpu:a:2(S:0),gpu:b:2(S:1)"), FOUR, 0, None, id="typed-gres-summed"
        ),
        pytest.param(record("IDLE", "gpu:4,shard:8"), FOUR, 0, None, id="other-gres-ignored"),
        pytest.param(record("IDLE", "(null)"), [], 0, None, id="no-gres-cpu-node"),
        pytest.param(None, FOUR, 1, None, id="slurmctld-unreachable-no-drain"),
    ],
)
def test_as_health_check_program_it_drains_only_an_undrained_node_with_too_few_gpus(
    tmp_path: Path, shown: str | None, files: list[str], code: int, drained: str | None
) -> None:
    updates = fake_scontrol(tmp_path / "tools", shown)
    dev = devices(tmp_path / "dev", files)
    got = run("--tools", str(tmp_path / "tools"), "--dev", str(dev))
    assert got.code == code, got
    sent = updates.read_text().splitlines() if updates.exists() else None
    want = ["update", "NodeName=gpu-0001", "State=DRAIN", f"Reason={drained}"]
    assert sent == (want if drained else None)


GPU_LIST = 'for i in 0 1 2 3; do echo "GPU $i: NVIDIA GB200 (UUID: GPU-$i)"; done'


@pytest.mark.parametrize(
    ("nvidia_smi", "dcgmi", "reason"),
    [
        pytest.param(GPU_LIST, None, None, id="nvidia-smi-lists-all"),
        pytest.param(f"{GPU_LIST} | head -3", None, "nvidia-smi lists 3 of 4 GPUs", id="one-gone"),
        pytest.param("exit 9", None, "nvidia-smi failed, 4 GPUs configured", id="smi-fails"),
        pytest.param(GPU_LIST, "exit 0", None, id="dcgm-diag-passes"),
        pytest.param(
            GPU_LIST,
            '[ "$1" = diag ] && exit 1 || exit 0',
            "dcgmi diag -r 1 failed",
            id="dcgm-diag-fails",
        ),
        pytest.param(GPU_LIST, "exit 1", None, id="no-host-engine-diag-skipped"),
    ],
)
def test_with_the_drivers_tools_nvidia_smi_counts_and_dcgm_diagnoses(
    tmp_path: Path, nvidia_smi: str, dcgmi: str | None, reason: str | None
) -> None:
    tools = tmp_path / "tools"
    tool(tools, "nvidia-smi", nvidia_smi)
    if dcgmi is not None:
        tool(tools, "dcgmi", dcgmi)
    # No device files at all: with nvidia-smi there, they are not what counts.
    dev = devices(tmp_path / "dev", [])
    got = run("--no-drain", "--gpus", "4", "--tools", str(tools), "--dev", str(dev))
    assert got.code == (1 if reason else 0), got
    if reason:
        assert got.reason == f"{wk.HEALTH_REASON_PREFIX} gpu check: {reason}"


def test_the_active_check_script_runs_the_gpu_check_with_slurms_count(tmp_path: Path) -> None:
    """The check job's script as slurmd runs it: the program on PATH; this host has no
    /dev/nvidia*, so a node Slurm counts GPUs on fails and a CPU node passes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "slurmkube-gpu-check").symlink_to(PROGRAM)
    assert not list(Path("/dev").glob("nvidia[0-9]*"))
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SLURM_JOB_RESERVATION": "slurmkube-check-gpu-0001",
        "SLURMD_NODENAME": "gpu-0001",
    }

    def check(gpus: int) -> int:
        script = CHECK_SCRIPT.format(reservation="slurmkube-check-gpu-0001", gpus=gpus)
        proc = subprocess.run(
            ["/bin/sh", "-c", script], env=env, capture_output=True, timeout=30, check=False
        )
        return proc.returncode

    assert (check(0), check(2)) == (0, 1)


def test_the_program_is_executable_by_slurmd_and_not_writable_by_others() -> None:
    mode = PROGRAM.stat().st_mode
    assert os.access(PROGRAM, os.X_OK) and not mode & 0o022


# --- the planner: a drain slurmd's check wrote is health's own ----------------------


CHECKING = NodeMemory(sick_since=900.0, check_started=990.0)


@pytest.mark.parametrize(
    ("node", "memory", "want_verdict", "want_actions"),
    [
        pytest.param(
            N("g").drained(GPU_GONE),
            None,
            "checking",
            ["reserve", "resume", "run-check"],
            id="a-node-check-drain-goes-to-its-active-check",
        ),
        pytest.param(
            N("g", busy=True).drained(GPU_GONE),
            None,
            "checking",
            ["reserve", "resume", "run-check"],
            id="jobs-still-running-the-reservation-ignores-them",
        ),
        pytest.param(
            N("g", check="running").drained(GPU_GONE),
            CHECKING,
            "checking",
            [],
            id="drained-again-by-slurmd-while-its-check-runs",
        ),
        pytest.param(
            N("g", check="failed").drained(GPU_GONE),
            CHECKING,
            "sick",
            ["drain", "release", "taint"],
            id="gpus-still-gone-the-check-fails-drained-and-tainted",
        ),
        pytest.param(
            N("g", check="failed").drained(GPU_GONE),
            NodeMemory(sick_since=900.0, check_started=990.0, failures=(950.0,)),
            "held",
            ["drain", "release", "taint"],
            id="failing-twice-it-is-held",
        ),
        pytest.param(
            N("g", check="passed"),
            CHECKING,
            "healthy",
            ["release"],
            id="gpus-back-the-check-passes-it-stays-resumed",
        ),
        pytest.param(
            N("g").drained("RMA GPU 3"),
            None,
            "healthy",
            [],
            id="an-admins-drain-is-never-resumed",
        ),
        pytest.param(
            N("g").drained("slurmkube: slurmd pod removal"),
            None,
            "healthy",
            [],
            id="another-slurmkube-drain-is-not-healths",
        ),
    ],
)
def test_a_drain_by_the_node_check_is_recovered_only_by_an_active_check(
    node: N, memory: NodeMemory | None, want_verdict: str, want_actions: list[str]
) -> None:
    # No rules at all: the node check alone can make a node sick.
    p = plan([node], {node.name: memory} if memory else None, rules=[])
    assert (verdict(p, node.name), kinds(p, node.name)) == (want_verdict, want_actions)


def test_a_node_check_episode_ends_with_the_node_resumed_and_nothing_remembered() -> None:
    first = plan([N("g").drained(GPU_GONE)], rules=[])
    assert verdict(first, "g") == "checking"
    # The planner resumed it for the check; the GPUs are back and the check passes.
    passed = plan([N("g", check="passed")], first.memory, now=1030.0, rules=[])
    assert (verdict(passed, "g"), kinds(passed, "g")) == ("healthy", ["release"])
    assert passed.memory == {}


def test_a_node_check_drain_never_counts_against_the_circuit_breaker() -> None:
    """slurmd drained them itself: health begins no action a breaker would hold back."""
    nodes = [N(f"g{i}").drained(GPU_GONE) for i in range(4)]
    p = plan(nodes, rules=[], circuitBreaker={"maxSickShare": 0.25})
    assert {v.verdict for v in p.verdicts} == {"checking"}
    assert not p.circuit.open
    assert "taint" not in [str(a.kind) for a in p.actions]
