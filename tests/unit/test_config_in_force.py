"""Where the controller reads that a config is in force: the operator's scontrol
when it is of slurmctld's release, else slurmrestd's `GET /conf` (v0.0.45+)."""

from __future__ import annotations

import datetime as dt
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from slurmkube.controllers.reconfigure import config_in_force
from slurmkube.plan.model import Plan
from slurmkube.plan.reconfigure import ConfigClock
from slurmkube.render import plan_config, render_files
from slurmkube.slurm import CliClient
from slurmkube.slurm.rest import RestClient
from slurmkube_local.builders import bundle, nvl_fleet

from .slurm_recorded import body

WRITTEN = dt.datetime(2026, 12, 4, 12, 0, 0, 300_000, tzinfo=dt.UTC)
AFTER = WRITTEN + dt.timedelta(seconds=5)
BEFORE = WRITTEN - dt.timedelta(seconds=5)


def plan_for(version: str) -> Plan:
    nodes = nvl_fleet(domains=2, per_domain=2)
    config = plan_config(bundle(block_size=2, extra={"slurm": {"version": version}}), nodes)
    return Plan(rendered=render_files(config), config=config, slurm_version=version)


def stand_in_scontrol(tmp_path: Path, release: str, loaded: dt.datetime, plan: Plan) -> CliClient:
    """Prints its release, the load time, and the rendered topology as in force."""
    assert plan.rendered is not None
    files = plan.rendered.files
    (tmp_path / "shown").write_text(files.get("topology.yaml") or files["topology.conf"])
    script = tmp_path / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {tmp_path}/argv\n'
        'case "$*" in\n'
        f'  "--version") echo "slurm {release}";;\n'
        f'  "show config") echo "Configuration data as of {loaded:%Y-%m-%dT%H:%M:%S}";;\n'
        f"  *) cat {tmp_path}/shown;;\n"
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return CliClient(bin_dir=tmp_path, env=dict(os.environ))


def slurmrestd(loaded: dt.datetime, asked: list[str]) -> RestClient:
    """slurmrestd 26.05 answering `GET /conf` as recorded, with `loaded` as LastUpdate."""
    conf = body("26.05", "v0.0.45", "conf")
    conf["slurm_conf_meta"]["LastUpdate"] = int(loaded.timestamp())

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return httpx.Response(200, json=conf)

    return RestClient(
        "http://rest", token="t", data_parser="v0.0.45", transport=httpx.MockTransport(answer)
    )


@dataclass(frozen=True)
class Case:
    cluster: str  # the release slurmctld runs (the config is rendered for)
    client: str  # `scontrol --version` of the operator's scontrol
    loaded: dt.datetime  # when slurmctld last read its files
    in_force: bool
    scontrol_asked: tuple[str, ...]
    rest_asked: tuple[str, ...] = ()


CASES = {
    # Its own release: scontrol gives the load time and the topology.
    "24.11 by scontrol": Case(
        "24.11", "24.11.5", AFTER, True, ("--version", "show config", "show topology")
    ),
    "24.11 loaded before the write": Case(
        "24.11", "24.11.5", BEFORE, False, ("--version", "show config")
    ),
    "26.05 by its own scontrol": Case(
        "26.05", "26.05.5", AFTER, True, ("--version", "show config", "show topoconf")
    ),
    # 24.11's scontrol on 26.05 (no `show topoconf`): slurmrestd's /conf instead.
    "26.05 by slurmrestd": Case(
        "26.05", "24.11.5", AFTER, True, ("--version",), ("/slurm/v0.0.45/conf",)
    ),
    "26.05 loaded before the write": Case(
        "26.05", "24.11.5", BEFORE, False, ("--version",), ("/slurm/v0.0.45/conf",)
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_config_in_force_is_read_from_scontrol_only_on_its_own_release(
    tmp_path: Path, case: Case
) -> None:
    plan = plan_for(case.cluster)
    scontrol = stand_in_scontrol(tmp_path, case.client, case.loaded, plan)
    asked: list[str] = []
    clock = ConfigClock("h", 0.0, WRITTEN)
    assert config_in_force(plan, clock, slurmrestd(case.loaded, asked), scontrol) is case.in_force
    assert tuple((tmp_path / "argv").read_text().splitlines()) == case.scontrol_asked
    assert tuple(asked) == case.rest_asked


def test_without_scontrol_a_slurmrestd_without_conf_gives_no_evidence() -> None:
    """24.11's slurmrestd (v0.0.42) serves no /conf: nothing is confirmed, the
    backstop reconfigure follows the propagation window."""
    rest = RestClient(
        "http://rest",
        token="t",
        data_parser="v0.0.42",
        transport=httpx.MockTransport(lambda r: httpx.Response(404, json={})),
    )
    clock = ConfigClock("h", 0.0, WRITTEN)
    assert config_in_force(plan_for("26.05"), clock, rest, None) is False


def test_a_scontrol_that_does_not_run_leaves_the_evidence_to_slurmrestd(tmp_path: Path) -> None:
    asked: list[str] = []
    missing = CliClient(bin_dir=tmp_path / "nowhere", env=dict(os.environ))
    clock = ConfigClock("h", 0.0, WRITTEN)
    assert config_in_force(plan_for("26.05"), clock, slurmrestd(AFTER, asked), missing) is True
    assert asked == ["/slurm/v0.0.45/conf"]
