"""CustomResourceDefinitions generated from the pydantic models.

One source of truth: the models validate input in Python (CLI, operator) and
their JSON schema, made structural here, is what the API server validates
with, including the CEL rules the models carry (`x-kubernetes-validations`).
`slurmkube crds --out crds/` writes them; CI fails when crds/ is stale.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from slurmkube.api import well_known as wk
from slurmkube.api.models import (
    AllocationSourceSpec,
    AllocationSourceStatus,
    NodeSetSpec,
    NodeSetStatus,
    SlurmClusterSpec,
    SlurmClusterStatus,
    SlurmReservationCheckSpec,
)

_DROP = {"title", "additionalProperties"}


def structural(schema: dict[str, Any]) -> dict[str, Any]:
    """Pydantic JSON schema -> a Kubernetes structural schema (no $ref, no null types)."""
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(n) for n in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            target = defs[node["$ref"].rsplit("/", 1)[-1]]
            merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
            return walk(merged)
        if "anyOf" in node:
            options = [o for o in node["anyOf"] if o.get("type") != "null"]
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            if len(options) == 1:
                return walk({**options[0], **rest})
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _DROP or key == "$defs":
                continue
            if key == "default" and value is None:
                continue
            if key == "const":
                out["enum"] = [value]
                continue
            if key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
                # JSON Schema 2020 gives the bound; OpenAPI v3 (the API server) a flag.
                out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
                out[key] = True
                continue
            if key == "properties":
                out[key] = {name: walk(v) for name, v in value.items()}
            else:
                out[key] = walk(value)
        if node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
            out["additionalProperties"] = walk(node["additionalProperties"])
        if "enum" in out and "type" not in out:
            out["type"] = "string"
        return out

    return walk(schema)  # type: ignore[no-any-return]


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    return structural(model.model_json_schema(by_alias=True, mode="validation"))


def _crd(
    kind: str,
    *,
    plural: str,
    short_names: list[str],
    spec: type[BaseModel],
    status: type[BaseModel] | None,
    columns: list[dict[str, Any]],
    scale: dict[str, str] | None = None,
    scope: str = "Namespaced",
) -> dict[str, Any]:
    spec_schema = _schema(spec)
    spec_schema.pop("description", None)
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": spec_schema,
    }
    subresources: dict[str, Any] = {}
    if status is not None:
        status_schema = _schema(status)
        status_schema.pop("description", None)
        properties["status"] = status_schema
        subresources["status"] = {}
    if scale:
        subresources["scale"] = scale
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{wk.GROUP}"},
        "spec": {
            "group": wk.GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["slurmkube"],
            },
            "scope": scope,
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "subresources": subresources,
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": (spec.__doc__ or kind).strip().split("\n\n")[0],
                            "required": ["spec"],
                            "properties": properties,
                        }
                    },
                }
            ],
        },
    }


def _condition_column(name: str, condition: str) -> dict[str, Any]:
    return {
        "name": name,
        "type": "string",
        "jsonPath": f'.status.conditions[?(@.type=="{condition}")].status',
    }


_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def crds() -> dict[str, dict[str, Any]]:
    """File name -> CRD object, deterministic."""
    return {
        "slurmkube.io_slurmclusters.yaml": _crd(
            "SlurmCluster",
            plural="slurmclusters",
            short_names=["slurm", "sc"],
            spec=SlurmClusterSpec,
            status=SlurmClusterStatus,
            columns=[
                _condition_column("Ready", "Ready"),
                {"name": "Slurm", "type": "string", "jsonPath": ".status.slurmVersion"},
                {"name": "Nodes", "type": "integer", "jsonPath": ".status.nodes.total"},
                {"name": "Idle", "type": "integer", "jsonPath": ".status.nodes.idle"},
                {"name": "GPUs", "type": "integer", "jsonPath": ".status.gpus.total"},
                {"name": "GPUs-Used", "type": "integer", "jsonPath": ".status.gpus.allocated"},
                _AGE,
            ],
        ),
        "slurmkube.io_nodesets.yaml": _crd(
            "NodeSet",
            plural="nodesets",
            short_names=["nset"],
            spec=NodeSetSpec,
            status=NodeSetStatus,
            columns=[
                {"name": "Cluster", "type": "string", "jsonPath": ".spec.clusterRef"},
                {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"},
                {"name": "Pods", "type": "integer", "jsonPath": ".status.replicas"},
                {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
                _AGE,
            ],
            scale={
                "specReplicasPath": ".spec.replicas",
                "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.selector",
            },
        ),
        "slurmkube.io_slurmreservationchecks.yaml": _crd(
            "SlurmReservationCheck",
            plural="slurmreservationchecks",
            short_names=["src"],
            spec=SlurmReservationCheckSpec,
            status=None,
            columns=[
                {"name": "Cluster", "type": "string", "jsonPath": ".spec.clusterRef.name"},
                {"name": "Policy", "type": "string", "jsonPath": ".spec.busyNodes.policy"},
                {"name": "MaxNodes", "type": "integer", "jsonPath": ".spec.maxNodes"},
                _AGE,
            ],
            scope="Cluster",
        ),
        "slurmkube.io_allocationsources.yaml": _crd(
            "AllocationSource",
            plural="allocationsources",
            short_names=["alloc"],
            spec=AllocationSourceSpec,
            status=AllocationSourceStatus,
            columns=[
                _condition_column("Synced", "Synced"),
                {"name": "Teams", "type": "integer", "jsonPath": ".status.teams"},
                {"name": "Cohort", "type": "string", "jsonPath": ".spec.cohort"},
                _AGE,
            ],
        ),
    }
