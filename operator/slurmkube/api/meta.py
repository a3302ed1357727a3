"""Shared parts of slurmkube's API models: strict and lenient bases, object
metadata, label selectors and tolerations as Kubernetes defines them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class StrictModel(BaseModel):
    # Attribute docstrings become descriptions in the generated CRDs (kubectl explain).
    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, use_attribute_docstrings=True
    )


class SecretKeyRef(StrictModel):
    """One key of a Secret in the referring object's namespace."""

    name: str = Field(max_length=253)
    key: str = Field(max_length=253)


_M = TypeVar("_M", bound=BaseModel)


def from_object(model: type[_M], obj: Mapping[str, Any]) -> _M:
    """A SlurmCluster or NodeSet as read from the API server: its apiVersion, kind,
    metadata and spec (status and server-set fields are not part of the model)."""
    return model.model_validate({k: obj[k] for k in ("apiVersion", "kind", "metadata", "spec")})


class LenientModel(BaseModel):
    """Kubernetes objects carry many fields we do not read; ignore them."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class ObjectMeta(LenientModel):
    name: str
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


# --- label selectors (metav1.LabelSelector) -------------------------------------------


class LabelSelectorRequirement(StrictModel):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelSelectorRequirement:
        needs_values = self.operator in ("In", "NotIn")
        if needs_values and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if not needs_values and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelector(StrictModel):
    """metav1.LabelSelector; an empty selector selects everything."""

    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, alias="matchExpressions"
    )

    def keys(self) -> tuple[str, ...]:
        """The label keys `matches` reads: it depends on their values alone."""
        return (*self.match_labels, *(req.key for req in self.match_expressions))

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for req in self.match_expressions:
            present = req.key in labels
            if req.operator == "Exists" and not present:
                return False
            if req.operator == "DoesNotExist" and present:
                return False
            if req.operator == "In" and labels.get(req.key) not in req.values:
                return False
            if req.operator == "NotIn" and present and labels[req.key] in req.values:
                return False
        return True


class Toleration(StrictModel):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(None, alias="tolerationSeconds")


# --- container resources (core/v1 ResourceRequirements) -------------------------------

_QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$"


def _quantities() -> Any:
    return Field(
        default_factory=dict,
        json_schema_extra={"additionalProperties": {"type": "string", "pattern": _QUANTITY}},
    )


class Resources(StrictModel):
    """A container's requests and limits, as in a pod spec (`cpu: 500m`, `memory: 1Gi`)."""

    requests: dict[str, str] = _quantities()
    limits: dict[str, str] = _quantities()

    @field_validator("requests", "limits")
    @classmethod
    def _quantity(cls, v: dict[str, str]) -> dict[str, str]:
        for name, quantity in v.items():
            if not re.fullmatch(_QUANTITY[1:-1], quantity):
                raise ValueError(f"{name}: {quantity!r} is not a quantity (e.g. 500m, 2, 1Gi)")
        return v

    def manifest(self) -> dict[str, dict[str, str]]:
        return {k: dict(v) for k, v in (("requests", self.requests), ("limits", self.limits)) if v}
