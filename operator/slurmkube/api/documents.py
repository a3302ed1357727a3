"""Multi-document YAML (already parsed) -> typed slurmkube inputs.

`kubectl get nodes -o yaml` prints a `List`; GitOps repos hold one object per
document; both are accepted. Errors name the document and the object.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from slurmkube.api.grammar import InvalidValue, SlurmToken
from slurmkube.api.models import KubeNode, NodeSet, SlurmCluster


@dataclass(frozen=True, slots=True)
class ClusterBundle:
    cluster: SlurmCluster
    node_sets: tuple[NodeSet, ...]
    # slurm.conf keys of the AllocationSource whose clusterRef names this cluster
    # (`plan.policy.slurm.slurm_config_keys`), and which one, for errors.
    policy_keys: tuple[tuple[SlurmToken, SlurmToken], ...] = ()
    policy_source: str = ""


def _items(documents: Iterable[Any]) -> list[tuple[int, Mapping[str, Any]]]:
    out: list[tuple[int, Mapping[str, Any]]] = []
    for index, doc in enumerate(documents):
        if doc is None:
            continue
        if not isinstance(doc, Mapping):
            raise InvalidValue(f"document {index}", str(doc)[:60], "a Kubernetes object")
        if doc.get("kind") == "List" or (doc.get("kind", "").endswith("List") and "items" in doc):
            out.extend((index, item) for item in doc.get("items") or [])
        else:
            out.append((index, doc))
    return out


def _describe(index: int, obj: Mapping[str, Any]) -> str:
    name = (obj.get("metadata") or {}).get("name", "?")
    return f"document {index}: {obj.get('kind', '?')} {name}"


def validation_message(err: ValidationError) -> str:
    """A pydantic error as `field.path: what was wrong; ...`, one line."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(lines)


class DocumentError(ValueError):
    """Bad input in a YAML document, with the document, object and field."""


def parse_cluster(documents: Iterable[Any]) -> ClusterBundle:
    clusters: list[SlurmCluster] = []
    node_sets: list[NodeSet] = []
    for index, obj in _items(documents):
        kind = obj.get("kind")
        try:
            if kind == "SlurmCluster":
                clusters.append(SlurmCluster.model_validate(obj))
            elif kind == "NodeSet":
                node_sets.append(NodeSet.model_validate(obj))
            else:
                raise DocumentError(
                    f"{_describe(index, obj)}: expected kind SlurmCluster or NodeSet"
                )
        except ValidationError as err:
            raise DocumentError(f"{_describe(index, obj)}: {validation_message(err)}") from err
    if len(clusters) != 1:
        raise DocumentError(f"expected exactly one SlurmCluster, found {len(clusters)}")
    return ClusterBundle(
        cluster=clusters[0], node_sets=tuple(sorted(node_sets, key=lambda n: n.metadata.name))
    )


def parse_nodes(documents: Iterable[Any]) -> tuple[KubeNode, ...]:
    nodes: list[KubeNode] = []
    for index, obj in _items(documents):
        if obj.get("kind", "Node") != "Node":
            raise DocumentError(f"{_describe(index, obj)}: expected kind Node")
        try:
            nodes.append(KubeNode.model_validate(obj))
        except ValidationError as err:
            raise DocumentError(f"{_describe(index, obj)}: {validation_message(err)}") from err
    return tuple(nodes)
