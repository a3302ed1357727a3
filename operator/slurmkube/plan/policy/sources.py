"""What a source says (already parsed from JSON/YAML) -> a `Policy`.

Three shapes reach here: an AllocationSource object (its inline teams), the
plain allocations document an `http` source serves (`{"teams": [...]}`,
docs/allocations.schema.json), and ColdFront's REST answers
(`policy.coldfront`). Fetching them is the sync's job, not this module's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from slurmkube.api.allocation_source import (
    AllocationDocument,
    AllocationSource,
    AllocationSourceSpec,
    InlineSource,
    Team,
)
from slurmkube.api.documents import validation_message
from slurmkube.plan.policy.coldfront import teams_from_coldfront
from slurmkube.plan.policy.model import Policy, PolicyError, build_policy


@dataclass(frozen=True, slots=True)
class SourceAnswers:
    """What a live source answered (parsed JSON), for a source without inline teams."""

    document: Any = None  # an http source's document
    coldfront_allocations: Any = None  # GET /api/allocations/?allocation_attributes=true
    coldfront_projects: Any = None  # GET /api/projects/?project_users=true


def document_schema() -> dict[str, Any]:
    """The JSON schema of the plain allocations document (published in docs/)."""
    return AllocationDocument.model_json_schema(by_alias=True, mode="validation")


def document_schema_text() -> str:
    return json.dumps(document_schema(), indent=2, sort_keys=True) + "\n"


def teams_from_document(data: Any, where: str) -> list[Team]:
    """The plain JSON document -> its teams, or a `PolicyError` naming the field."""
    try:
        return list(AllocationDocument.model_validate(data).teams)
    except ValidationError as err:
        raise PolicyError(f"{where}: {validation_message(err)}") from err


def _default_spec() -> AllocationSourceSpec:
    return AllocationSourceSpec(inline=InlineSource())


def policy_from_document(data: Any, where: str) -> Policy:
    """A plain document on its own: the default tiers, half-life, cohort and flavor."""
    return build_policy(where, _default_spec(), teams_from_document(data, where))


def load_allocation_source(obj: Mapping[str, Any], where: str) -> AllocationSource:
    """The object as a file or the API server gives it (its status is the operator's)."""
    try:
        return AllocationSource.model_validate({k: v for k, v in obj.items() if k != "status"})
    except ValidationError as err:
        name = (obj.get("metadata") or {}).get("name", "?")
        raise PolicyError(f"{where}: AllocationSource {name}: {validation_message(err)}") from err


def policy_from_source(source: AllocationSource, teams: Sequence[Team] | None = None) -> Policy:
    """An AllocationSource and the teams its source gave (inline: its own)."""
    name = f"AllocationSource {source.metadata.name}"
    if teams is None:
        if source.spec.inline is None:
            kind = "coldfront" if source.spec.coldfront is not None else "http"
            raise PolicyError(
                f"{name}: spec.{kind}: its teams come from a live sync; pass its answers "
                "(`policy plan --teams`, or --coldfront-allocations and --coldfront-projects)"
            )
        teams = source.spec.inline.teams
    return build_policy(name, source.spec, teams)


def teams_from_answers(source: AllocationSource, answers: SourceAnswers) -> list[Team] | None:
    """The teams a live source's answers give; None when they are not all there."""
    name = f"AllocationSource {source.metadata.name}"
    if source.spec.http is not None and answers.document is not None:
        return teams_from_document(answers.document, f"{name}: {source.spec.http.url}")
    cf = source.spec.coldfront
    if cf is not None and None not in (answers.coldfront_allocations, answers.coldfront_projects):
        return teams_from_coldfront(
            cf, answers.coldfront_allocations, answers.coldfront_projects, f"{name}: {cf.url}"
        )
    return None


def policy_from_object(obj: Any, where: str, answers: SourceAnswers | None = None) -> Policy:
    """A file's content: an AllocationSource (inline, or with its live source's
    `answers`) or a plain allocations document."""
    if not isinstance(obj, Mapping):
        raise PolicyError(f"{where}: expected an AllocationSource or an allocations document")
    if obj.get("kind") == "AllocationSource":
        source = load_allocation_source(obj, where)
        teams = None if answers is None else teams_from_answers(source, answers)
        return policy_from_source(source, teams)
    if "kind" in obj:
        raise PolicyError(f"{where}: kind {obj['kind']!r}: expected AllocationSource")
    return policy_from_document(obj, where)
