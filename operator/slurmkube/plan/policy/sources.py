"""What a source says (already parsed from JSON/YAML) -> a `Policy`.

Three shapes reach here: an AllocationSource object (its inline teams), the
plain allocations document an `http` source serves (`{"teams": [...]}`,
docs/allocations.schema.json), and ColdFront's REST answers
(`policy.coldfront`). Fetching them is the sync's job, not this module's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
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
from slurmkube.plan.policy.model import Policy, PolicyError, build_policy


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
    try:
        return AllocationSource.model_validate(dict(obj))
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
                f"{name}: spec.{kind}: its teams come from a live sync; pass them "
                "(a document or ColdFront's answers) or use spec.inline"
            )
        teams = source.spec.inline.teams
    return build_policy(name, source.spec, teams)


def policy_from_object(obj: Any, where: str) -> Policy:
    """A file's content: an AllocationSource (inline) or a plain allocations document."""
    if not isinstance(obj, Mapping):
        raise PolicyError(f"{where}: expected an AllocationSource or an allocations document")
    if obj.get("kind") == "AllocationSource":
        return policy_from_source(load_allocation_source(obj, where))
    if "kind" in obj:
        raise PolicyError(f"{where}: kind {obj['kind']!r}: expected AllocationSource")
    return policy_from_document(obj, where)
