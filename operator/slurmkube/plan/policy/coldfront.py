"""ColdFront's REST API answers -> teams.

ColdFront's `api` plugin (coldfront/plugins/api, 1.1.x) serialises:
- `GET /api/allocations`: `[{"id", "project": <title>, "resource": "<name>, <name>",
  "status": <name>}]` (`resource` is `Allocation.get_resources_as_string`);
- `GET /api/projects?project_users=true`: `[{"id", "title", "pi": <username>,
  "status", "project_users": [{"user": <username>, "role", "status"}],
  "allocations": null | [...]}]`.
Answers are plain lists (the plugin sets no pagination); a DRF page
(`{"results": [...]}`) is accepted too. Allocation attributes (GPU counts,
budgets) are not serialised, so quotas come from the AllocationSource
(`defaultQuota`, `projects[].quota`).

A project is a team when it has an Active allocation on the source's
resource; its Active project users are the team's Slurm users.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from slurmkube.api.allocation_source import ColdFrontSource, Team, TeamMembers
from slurmkube.api.documents import validation_message
from slurmkube.api.grammar import InvalidValue, slurm_account, slurm_user
from slurmkube.api.meta import LenientModel
from slurmkube.plan.policy.model import PolicyError

ACTIVE = "Active"


class ColdFrontAllocation(LenientModel):
    id: int
    project: str
    resource: str
    status: str

    def on(self, resource: str) -> bool:
        return resource in self.resource.split(", ")


class ColdFrontProjectUser(LenientModel):
    user: str
    role: str = ""
    status: str


class ColdFrontProject(LenientModel):
    id: int
    title: str
    pi: str | None = None
    status: str
    project_users: list[ColdFrontProjectUser] | None = None


def _items(answer: Any, where: str) -> list[Any]:
    if isinstance(answer, dict) and isinstance(answer.get("results"), list):
        return list(answer["results"])
    if isinstance(answer, list):
        return answer
    raise PolicyError(f"{where}: expected a JSON list (or a page with 'results')")


def _parse(model: type[LenientModel], answer: Any, where: str) -> list[Any]:
    out = []
    for index, item in enumerate(_items(answer, where)):
        try:
            out.append(model.model_validate(item))
        except ValidationError as err:
            raise PolicyError(f"{where}[{index}]: {validation_message(err)}") from err
    return out


def account_from_title(title: str) -> str:
    """A project title without a mapping -> a Slurm account name (still validated)."""
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:32].strip("-")
    return slug if slug[:1].isalpha() else f"p-{slug}"[:32].strip("-")


def teams_from_coldfront(
    source: ColdFrontSource,
    allocations: Any,
    projects: Any,
    where: str = "coldfront",
) -> list[Team]:
    """The two answers -> one team per project with an Active allocation on the resource."""
    active = {
        a.project
        for a in _parse(ColdFrontAllocation, allocations, f"{where} /api/allocations")
        if a.status == ACTIVE and a.on(source.resource_name)
    }
    mapped = {p.title: p for p in source.projects}
    teams: list[Team] = []
    seen: dict[str, str] = {}
    for project in _parse(ColdFrontProject, projects, f"{where} /api/projects"):
        if project.title not in active:
            continue
        here = f"{where} /api/projects id={project.id} ({project.title!r})"
        if project.project_users is None:
            raise PolicyError(f"{here}.project_users: missing; ask with ?project_users=true")
        entry = mapped.get(project.title)
        try:
            account = slurm_account(
                entry.account if entry else account_from_title(project.title), f"{here}.title"
            )
            users = sorted(
                {
                    slurm_user(u.user, f"{here}.project_users[{i}].user")
                    for i, u in enumerate(project.project_users)
                    if u.status == ACTIVE
                }
            )
        except InvalidValue as err:
            raise PolicyError(str(err)) from err
        if account in seen:
            raise PolicyError(
                f"{here}: account {account!r} is also project {seen[account]!r}'s; "
                "map one of them in spec.coldfront.projects"
            )
        seen[account] = project.title
        quota = (entry.quota if entry and entry.quota else source.default_quota).model_dump()
        members = TeamMembers(slurm_users=users, namespaces=list(entry.namespaces) if entry else [])
        teams.append(Team(name=account, members=members, **quota))
    return teams
