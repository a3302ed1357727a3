"""`slurmkube policy plan`: both schedulers' objects without a cluster; bad input exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from slurmkube.cli import main
from tests.unit.policy_builders import TeamBuilder, source

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "allocations.yaml"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_prints_sacctmgr_commands_and_kueue_objects(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "policy", "plan", "--source", str(EXAMPLE))
    assert code == 0
    assert "#   sacctmgr -i add account Name=team-a " in out
    assert "GrpTRES=gres/gpu=8" in out
    assert "#   PriorityDecayHalfLife=7-00:00:00" in out
    kinds = [d["kind"] for d in yaml.safe_load_all(out) if d]
    assert kinds.count("ClusterQueue") == 2
    assert {"Cohort", "LocalQueue", "WorkloadPriorityClass", "Configuration"} <= set(kinds)


def test_plan_reads_a_plain_allocations_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "teams.json"
    doc.write_text(json.dumps({"teams": [TeamBuilder("ml").gpus(2).users("ann").obj()]}))
    code, out, _ = run(capsys, "policy", "plan", "--source", str(doc))
    assert code == 0
    assert "sacctmgr -i add user Name=ann Account=ml" in out


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (source(TeamBuilder("team a").obj()), "spec.inline.teams.0.name"),
        (source(TeamBuilder("a").users("bob;rm").obj()), "slurmUsers"),
        (source(TeamBuilder("a").tier("gold").obj()), "teams[0] (a).tier"),
        ({"teams": [{"name": "a"}]}, "teams.0.gpus: Field required"),
        ({"kind": "SlurmCluster"}, "expected AllocationSource"),
    ],
)
def test_bad_input_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: object, expected: str
) -> None:
    path = tmp_path / "source.yaml"
    path.write_text(yaml.safe_dump(content))
    code, out, err = run(capsys, "policy", "plan", "--source", str(path))
    assert code == 2
    assert out == ""
    assert err.startswith("slurmkube policy: ")
    assert expected in err
    assert "Traceback" not in err


def test_a_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "policy", "plan", "--source", str(tmp_path / "none.yaml"))
    assert code == 2
    assert "none.yaml" in err


COLDFRONT = Path(__file__).resolve().parents[1] / "fixtures" / "coldfront"


def _live_source(tmp_path: Path, spec: dict[str, object]) -> str:
    obj = source()
    obj["spec"] = spec
    path = tmp_path / "source.yaml"
    path.write_text(yaml.safe_dump(obj))
    return str(path)


def test_plan_of_a_coldfront_source_reads_its_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _live_source(
        tmp_path,
        {
            "coldfront": {
                "url": "https://coldfront.example.org/api",
                "tokenSecretRef": {"name": "coldfront", "key": "token"},
                "resourceName": "GPU fleet",
                "defaultQuota": {"gpus": 4},
                "projects": [{"title": "Protein folding at scale", "account": "team-a"}],
            }
        },
    )
    code, out, err = run(
        capsys,
        "policy",
        "plan",
        "--source",
        path,
        "--coldfront-allocations",
        str(COLDFRONT / "allocations.json"),
        "--coldfront-projects",
        str(COLDFRONT / "projects.json"),
    )
    assert (code, err) == (0, "")
    assert "sacctmgr -i add user Name=bob Account=team-a" in out
    assert "sacctmgr -i add account Name=speech-models " in out


def test_plan_of_an_http_source_reads_its_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _live_source(tmp_path, {"http": {"url": "https://alloc.example.org/teams.json"}})
    teams = tmp_path / "teams.json"
    teams.write_text(json.dumps({"teams": [TeamBuilder("ml").gpus(2).obj()]}))
    code, out, _ = run(capsys, "policy", "plan", "--source", path, "--teams", str(teams))
    assert code == 0
    assert "GrpTRES=gres/gpu=2" in out


def test_plan_of_a_live_source_without_its_answers_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _live_source(tmp_path, {"http": {"url": "https://alloc.example.org/teams.json"}})
    code, _, err = run(capsys, "policy", "plan", "--source", path)
    assert code == 2
    assert "spec.http: its teams come from a live sync" in err


def test_plan_names_the_groups_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    team = TeamBuilder("ml").gpus(2).users("ann").obj()
    team["members"]["groups"] = ["ml-lab", "vision"]
    doc = tmp_path / "teams.json"
    doc.write_text(json.dumps({"teams": [team]}))
    code, out, _ = run(capsys, "policy", "plan", "--source", str(doc))
    assert code == 0
    assert "# ml: the members of groups ml-lab, vision join its users at each sync" in out
    assert "sacctmgr -i add user Name=ann Account=ml" in out
