"""ColdFront's REST API answers -> teams.

ColdFront's `api` plugin (coldfront/plugins/api, 1.1.10; answers recorded from a
live ColdFront in tests/fixtures/coldfront) serialises:
- `GET /api/allocations/?allocation_attributes=true`: `[{"id", "project": <title>,
  "resource": "<name>, <name>", "status": <name>, "allocation_users": null,
  "allocation_attributes": [{"allocation_attribute_type": <name>, "value": <str>,
  "usage": <float> | null}]}]` (`resource` is `Allocation.get_resources_as_string`);
- `GET /api/projects/?project_users=true`: `[{"id", "title", "pi": <username>,
  "status", "project_users": [{"user": <username>, "role", "status"}], ...}]`.
Answers are plain lists (the plugin sets no pagination); a DRF page
(`{"results": [...]}`) is accepted too.

A project is a team when it has an Active allocation on the source's
resource (the lowest id if several); its Active project users are the team's
Slurm users. The allocation's attributes (`ATTRIBUTES`) override the
AllocationSource's `projects[].quota`, which overrides `defaultQuota`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from slurmkube.api.allocation_source import ColdFrontProject as MappedProject
from slurmkube.api.allocation_source import ColdFrontSource, Team
from slurmkube.api.documents import validation_message
from slurmkube.api.grammar import InvalidValue, slurm_account, slurm_user
from slurmkube.api.meta import LenientModel
from slurmkube.plan.policy.model import PolicyError

ACTIVE = "Active"


# Allocation attribute type -> Team field. slurm_account_name and "Accelerator Usage
# (Hours)" are ColdFront's own default types; the others are slurmkube's.
ACCOUNT_ATTRIBUTE = "slurm_account_name"
NAMESPACES_ATTRIBUTE = "slurmkube_namespaces"
ATTRIBUTES = {
    "slurmkube_gpus": "gpus",
    "Accelerator Usage (Hours)": "gpuHours",
    "slurmkube_fairshare_weight": "fairShareWeight",
    "slurmkube_tier": "tier",
    "slurmkube_borrowing": "borrowing",
}
PERIOD_ATTRIBUTES = {"slurmkube_period_start": "start", "slurmkube_period_days": "lengthDays"}


class ColdFrontAttribute(LenientModel):
    allocation_attribute_type: str
    value: str


class ColdFrontAllocation(LenientModel):
    id: int
    project: str
    resource: str
    status: str
    allocation_attributes: list[ColdFrontAttribute] | None = None

    def attribute(self, name: str) -> str | None:
        for a in self.allocation_attributes or []:
            if a.allocation_attribute_type == name:
                return a.value.strip()
        return None

    def quota(self) -> dict[str, Any]:
        """The Team fields its attributes set (values still as ColdFront's strings)."""
        fields: dict[str, Any] = {
            key: value for name, key in ATTRIBUTES.items() if (value := self.attribute(name))
        }
        if "borrowing" in fields:  # ColdFront's Yes/No type
            fields["borrowing"] = fields["borrowing"].lower() in ("yes", "true", "1")
        period = {k: v for name, k in PERIOD_ATTRIBUTES.items() if (v := self.attribute(name))}
        if period:
            fields["period"] = period
        return fields

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
    active: dict[str, ColdFrontAllocation] = {}
    for a in sorted(
        _parse(ColdFrontAllocation, allocations, f"{where} /api/allocations"), key=lambda a: a.id
    ):
        if a.status == ACTIVE and a.on(source.resource_name):
            active.setdefault(a.project, a)
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
        allocation = active[project.title]
        attributed = allocation.attribute(ACCOUNT_ATTRIBUTE)
        try:
            account = slurm_account(
                entry.account if entry else attributed or account_from_title(project.title),
                f"{here}.title" if entry or not attributed else _at(allocation, ACCOUNT_ATTRIBUTE),
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
        teams.append(_team(source, entry, allocation, account=account, users=users, where=where))
    return teams


def _at(allocation: ColdFrontAllocation, attribute: str) -> str:
    return f"/api/allocations id={allocation.id} attribute {attribute!r}"


def _team(
    source: ColdFrontSource,
    entry: MappedProject | None,
    allocation: ColdFrontAllocation,
    *,
    account: str,
    users: Sequence[str],
    where: str,
) -> Team:
    base = entry.quota if entry and entry.quota else source.default_quota
    namespaces = allocation.attribute(NAMESPACES_ATTRIBUTE)
    document = {
        **base.model_dump(by_alias=True, exclude_none=True, mode="json"),
        **allocation.quota(),
        "name": account,
        "members": {
            "slurmUsers": list(users),
            "namespaces": [n.strip() for n in namespaces.split(",") if n.strip()]
            if namespaces is not None
            else list(entry.namespaces if entry else []),
        },
    }
    try:
        return Team.model_validate(document)
    except ValidationError as err:
        raise PolicyError(
            f"{where} /api/allocations id={allocation.id} (project {allocation.project!r}) "
            f"attributes: {validation_message(err)}"
        ) from err
