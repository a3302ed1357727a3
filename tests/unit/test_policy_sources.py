"""Allocation sources -> one team model: the document, inline teams, ColdFront's answers;
bad input is refused with the source, team and field named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkube.api.allocation_source import AllocationSource, ColdFrontSource
from slurmkube.plan.policy import PolicyError
from slurmkube.plan.policy.coldfront import account_from_title, teams_from_coldfront
from slurmkube.plan.policy.sources import (
    document_schema_text,
    policy_from_object,
    policy_from_source,
    teams_from_document,
)
from tests.unit.policy_builders import TeamBuilder, policy, recorded_coldfront, source

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "coldfront"
DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_document_and_inline_source_give_the_same_teams() -> None:
    teams = [TeamBuilder("team-a").gpus(8).budget(100).users("alice").obj()]
    from_document = policy_from_object({"teams": teams}, "doc.json")
    from_source = policy_from_object(source(*teams), "src.yaml")
    assert from_document.teams == from_source.teams
    (team,) = from_document.teams
    assert (team.name, team.gpus, team.users, team.tier) == ("team-a", 8, ("alice",), "normal")
    assert team.budget is not None and team.budget.gpu_hours == 100


def test_published_schema_is_what_the_model_generates() -> None:
    assert (DOCS / "allocations.schema.json").read_text() == document_schema_text(), (
        "docs/allocations.schema.json is stale: run `.venv/bin/slurmkube policy schema`"
    )


BAD_TEAMS: dict[str, tuple[dict[str, Any], str]] = {
    "account injects a key": (TeamBuilder("a b=c").obj(), "teams.0.name"),
    "account injects a line": (TeamBuilder("a\nb").obj(), "teams.0.name"),
    "user injects a key": (TeamBuilder("t").users("bob Account=root").obj(), "slurmUsers"),
    "user with a comma": (TeamBuilder("t").users("bob,root").obj(), "slurmUsers"),
    "negative gpus": (TeamBuilder("t").gpus(-1).obj(), "teams.0.gpus"),
    "budget without period": (
        TeamBuilder("t").set("gpuHours", 10).obj(),
        "gpuHours needs a period",
    ),
    "naive period start": (
        TeamBuilder("t")
        .budget(10)
        .set("period", {"start": "2026-10-01T00:00:00", "lengthDays": 1})
        .obj(),
        "time zone",
    ),
    "namespace not a label": (TeamBuilder("t").namespaces("Team_A").obj(), "namespaces"),
    "unknown field": (TeamBuilder("t").set("gpu", 3).obj(), "teams.0.gpu"),
}


@pytest.mark.parametrize("case", sorted(BAD_TEAMS))
def test_bad_team_is_refused_naming_the_field(case: str) -> None:
    team, expected = BAD_TEAMS[case]
    with pytest.raises(PolicyError) as err:
        teams_from_document({"teams": [team]}, "doc.json")
    assert "doc.json" in str(err.value)
    assert expected in str(err.value)


@pytest.mark.parametrize(
    ("teams", "expected"),
    [
        (
            [TeamBuilder("a").tier("gold").obj()],
            "teams[0] (a).tier: 'gold' is not one of the tiers",
        ),
        (
            [TeamBuilder("a").obj(), TeamBuilder("a").obj()],
            "teams[1] (a).name: team 'a' is defined twice",
        ),
        (
            [TeamBuilder("a").namespaces("ml").obj(), TeamBuilder("b").namespaces("ml").obj()],
            "teams[1] (b).members.namespaces: 'ml' already belongs to team 'a'",
        ),
    ],
)
def test_inconsistent_teams_are_refused_naming_source_and_team(
    teams: list[dict[str, Any]], expected: str
) -> None:
    with pytest.raises(PolicyError) as err:
        policy(*teams)
    assert str(err.value).startswith("AllocationSource fleet: ")
    assert expected in str(err.value)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"http": {"url": "https://alloc.example.org/teams.json"}}, "set exactly one"),
        ({"defaultTier": "gold"}, "defaultTier: 'gold' is not one of tiers"),
        ({"tiers": [{"name": "a", "priority": 1}, {"name": "a", "priority": 2}]}, "used twice"),
        ({"halfLifeHours": 0}, "spec.halfLifeHours"),
    ],
)
def test_bad_source_spec_is_refused_naming_the_field(spec: dict[str, Any], expected: str) -> None:
    with pytest.raises(PolicyError) as err:
        policy_from_object(source(TeamBuilder("a").obj(), **spec), "src.yaml")
    assert "src.yaml: AllocationSource fleet" in str(err.value)
    assert expected in str(err.value)


def test_a_live_source_without_its_teams_is_refused() -> None:
    obj = source()
    obj["spec"] = {"http": {"url": "https://alloc.example.org/teams.json"}}
    with pytest.raises(PolicyError, match=r"spec\.http: its teams come from a live sync"):
        policy_from_source(AllocationSource.model_validate(obj))


def _coldfront(**extra: Any) -> ColdFrontSource:
    return ColdFrontSource.model_validate(
        {
            "url": "https://coldfront.example.org/api",
            "tokenSecretRef": {"name": "coldfront", "key": "token"},
            "resourceName": "GPU fleet",
            "defaultQuota": {"gpus": 4},
            **extra,
        }
    )


def _answers() -> tuple[Any, Any]:
    return (
        json.loads((FIXTURES / "allocations.json").read_text()),
        json.loads((FIXTURES / "projects.json").read_text()),
    )


def test_coldfront_projects_with_an_active_allocation_on_the_fleet_become_teams() -> None:
    allocations, projects = _answers()
    cf = _coldfront(
        projects=[
            {
                "title": "Protein folding at scale",
                "account": "team-a",
                "namespaces": ["team-a"],
                "quota": {
                    "gpus": 8,
                    "gpuHours": 5000,
                    "period": {"start": "2026-10-01T00:00:00Z", "lengthDays": 91},
                },
            }
        ]
    )
    teams = {t.name: t for t in teams_from_coldfront(cf, allocations, projects)}
    assert sorted(teams) == ["speech-models", "team-a"]  # expired and CPU-only projects are not
    assert teams["team-a"].members.slurm_users == ["alice", "bob"]  # dave was removed
    assert (teams["team-a"].gpus, teams["team-a"].gpu_hours) == (8, 5000)
    assert teams["team-a"].members.namespaces == ["team-a"]
    assert (teams["speech-models"].gpus, teams["speech-models"].members.slurm_users) == (
        4,
        ["carol"],
    )


def test_coldfront_paginated_answers_are_read_too() -> None:
    allocations, projects = _answers()
    teams = teams_from_coldfront(_coldfront(), {"results": allocations}, {"results": projects})
    assert len(teams) == 2


def _no_project_users(a: list[Any], p: list[Any]) -> tuple[Any, Any]:
    p[0]["project_users"] = None
    return a, p


def _injecting_user(a: list[Any], p: list[Any]) -> tuple[Any, Any]:
    p[0]["project_users"].append({"user": "eve x=1", "role": "User", "status": "Active"})
    return a, p


def _colliding_accounts(a: list[Any], p: list[Any]) -> tuple[Any, Any]:
    a.append(
        {
            "id": 9,
            "project": "Protein folding, at scale",
            "resource": "GPU fleet",
            "status": "Active",
        }
    )
    p[1]["title"] = "Protein folding, at scale"
    return a, p


def _allocation_without_status(a: list[Any], p: list[Any]) -> tuple[Any, Any]:
    a[0].pop("status")
    return a, p


def _error_answer(a: list[Any], p: list[Any]) -> tuple[Any, Any]:
    return a, {"detail": "Invalid token."}


BAD_ANSWERS = {
    "project users not asked for": (
        _no_project_users,
        "project_users: missing; ask with ?project_users=true",
    ),
    "a user name that injects": (
        _injecting_user,
        "id=11 ('Protein folding at scale').project_users[3].user",
    ),
    "two titles, one account": (_colliding_accounts, "is also project 'Protein folding at scale'"),
    "an allocation without status": (_allocation_without_status, "/api/allocations[0]: status"),
    "an error instead of a list": (_error_answer, "/api/projects: expected a JSON list"),
}


@pytest.mark.parametrize("case", sorted(BAD_ANSWERS))
def test_bad_coldfront_answers_are_refused_naming_the_project_and_field(case: str) -> None:
    mutate, expected = BAD_ANSWERS[case]
    allocations, projects = mutate(*_answers())
    with pytest.raises(PolicyError) as err:
        teams_from_coldfront(_coldfront(), allocations, projects)
    assert expected in str(err.value)


@pytest.mark.parametrize(
    ("title", "account"),
    [
        ("Protein folding at scale", "protein-folding-at-scale"),
        ("42 Answers", "p-42-answers"),
        ("ML/Vision (2026)", "ml-vision-2026"),
        ("?!", "p"),
    ],
)
def test_coldfront_titles_become_valid_account_names(title: str, account: str) -> None:
    assert account_from_title(title) == account


def _recorded_source(**extra: Any) -> ColdFrontSource:
    return _coldfront(resourceName="slurmkube fleet", **extra)


def test_a_live_coldfronts_allocation_attributes_become_the_teams_quota() -> None:
    """Answers recorded from ColdFront 1.1.10 (e2e/local/coldfront/seed.py's data)."""
    teams = {t.name: t for t in teams_from_coldfront(_recorded_source(), *recorded_coldfront())}
    assert sorted(teams) == ["speech-models", "team-a"]  # the expired allocation is not a team
    a, b = teams["team-a"], teams["speech-models"]  # slurm_account_name; the title made a name
    assert a.members.slurm_users == ["alice", "bob"]  # dave was removed from the project
    assert a.members.namespaces == ["team-a"]
    assert (a.gpus, a.gpu_hours, a.fair_share_weight, a.tier, a.borrowing) == (
        8,
        5000,
        2,
        "high",
        False,
    )
    assert a.period is not None and (a.period.start.isoformat(), a.period.length_days) == (
        "2026-10-01T00:00:00+00:00",
        91,
    )
    assert (b.gpus, b.gpu_hours, b.borrowing, b.members.slurm_users) == (4, None, True, ["carol"])


@pytest.mark.parametrize(
    ("mapped_quota", "expected_gpus", "expected_weight"),
    [
        pytest.param(None, 8, 2, id="attributes over defaultQuota"),
        pytest.param(
            {"gpus": 16, "fairShareWeight": 5}, 8, 2, id="attributes over projects[].quota"
        ),
    ],
)
def test_coldfront_attributes_override_the_sources_quotas(
    mapped_quota: dict[str, Any] | None, expected_gpus: int, expected_weight: int
) -> None:
    entry = {"title": "Protein folding at scale", "account": "team-a"}
    cf = _recorded_source(projects=[{**entry, "quota": mapped_quota}] if mapped_quota else [])
    team = {t.name: t for t in teams_from_coldfront(cf, *recorded_coldfront())}["team-a"]
    assert (team.gpus, team.fair_share_weight) == (expected_gpus, expected_weight)


def test_without_attributes_the_sources_quota_holds() -> None:
    allocations, projects = recorded_coldfront()
    for allocation in allocations:
        allocation["allocation_attributes"] = None  # asked without ?allocation_attributes=true
    cf = _recorded_source(
        projects=[{"title": "Speech models", "account": "speech", "quota": {"gpus": 3}}]
    )
    teams = {t.name: t.gpus for t in teams_from_coldfront(cf, allocations, projects)}
    assert teams == {"protein-folding-at-scale": 4, "speech": 3}


def _with_attribute(name: str, value: str) -> tuple[Any, Any]:
    allocations, projects = recorded_coldfront()
    team_a = next(a for a in allocations if a["id"] == 1)
    attrs = [x for x in team_a["allocation_attributes"] if x["allocation_attribute_type"] != name]
    team_a["allocation_attributes"] = [
        *attrs,
        {"allocation_attribute_type": name, "value": value, "usage": None},
    ]
    return allocations, projects


BAD_ATTRIBUTES = {
    "gpus not a number": (
        "slurmkube_gpus",
        "eight",
        "id=1 (project 'Protein folding at scale') attributes: gpus",
    ),
    "a fair-share weight of 0": ("slurmkube_fairshare_weight", "0", "attributes: fairShareWeight"),
    "a namespace that is no DNS label": (
        "slurmkube_namespaces",
        "team-a,Team B",
        "attributes: members.namespaces",
    ),
    "a budget without its period start": ("slurmkube_period_start", "", "gpuHours needs a period"),
    "an account that injects": (
        "slurm_account_name",
        "team-a\nx",
        "/api/allocations id=1 attribute 'slurm_account_name'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_ATTRIBUTES))
def test_bad_coldfront_attributes_are_refused_naming_the_allocation_and_field(case: str) -> None:
    name, value, expected = BAD_ATTRIBUTES[case]
    allocations, projects = _with_attribute(name, value)
    if case == "a budget without its period start":
        for a in allocations:
            a["allocation_attributes"] = [
                x
                for x in a["allocation_attributes"]
                if not x["allocation_attribute_type"].startswith("slurmkube_period")
            ]
    with pytest.raises(PolicyError) as err:
        teams_from_coldfront(_recorded_source(), allocations, projects)
    assert expected in str(err.value)


@given(
    name=st.sampled_from(
        [
            "slurmkube_gpus",
            "slurmkube_fairshare_weight",
            "slurmkube_tier",
            "slurm_account_name",
            "slurmkube_namespaces",
            "slurmkube_borrowing",
            "slurmkube_period_days",
        ]
    ),
    value=st.one_of(st.integers(-5, 10**12).map(str), st.text(max_size=40)),
)
def test_any_attribute_value_gives_a_team_or_a_policy_error(name: str, value: str) -> None:
    """Whatever a ColdFront admin types into an attribute, the parser refuses it with
    a PolicyError naming the allocation or takes it as the field's value."""
    allocations, projects = _with_attribute(name, value)
    try:
        teams = {t.name: t for t in teams_from_coldfront(_recorded_source(), allocations, projects)}
    except PolicyError as err:
        assert "id=1" in str(err)
        return
    if name == "slurmkube_gpus" and value.strip():
        assert teams["team-a"].gpus == int(value)
