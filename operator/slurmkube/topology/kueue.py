"""The fleet topology as Kueue sees it: a `Topology` and a `ResourceFlavor` per GPU pool.

Same labels, same order as the Slurm side, so Kueue's Topology Aware
Scheduling and Slurm's topology/block|tree agree on what "one NVLink domain"
or "one leaf" means. Kueue v1beta2 (`kueue.x-k8s.io/v1beta2`) wants levels
from the top of the hierarchy down, with `kubernetes.io/hostname` last
(TopologySpec.levels validation in Kueue's apis/kueue/v1beta2/topology_types.go).
"""

from __future__ import annotations

from typing import Any

from slurmkube.api import well_known as wk
from slurmkube.api.documents import ClusterBundle
from slurmkube.api.models import TopologySpec

KUEUE_API = "kueue.x-k8s.io/v1beta2"
HOSTNAME_LABEL = "kubernetes.io/hostname"


def topology_levels(spec: TopologySpec) -> list[str]:
    """Top tier first (core, spine, leaf), then the NVLink domain, then the host."""
    levels = [*reversed(spec.tier_labels), spec.nvlink_domain_label, HOSTNAME_LABEL]
    return list(dict.fromkeys(levels))  # Kueue rejects a label used twice


def kueue_topology(name: str, spec: TopologySpec) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "Topology",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "slurmkube"}},
        "spec": {"levels": [{"nodeLabel": level} for level in topology_levels(spec)]},
    }


def resource_flavors(
    bundle: ClusterBundle, topology_name: str, prefix: str | None = None
) -> list[dict[str, Any]]:
    """One flavor per NodeSet: its `matchLabels` become the flavor's nodeLabels.

    Kueue flavors select nodes by labels only, so `matchExpressions` of a
    NodeSet cannot be carried over; such a NodeSet still gets a flavor, and the
    expressions are listed in an annotation for whoever reads it.
    """
    flavors = []
    for ns in bundle.node_sets:
        selector = ns.spec.node_selector
        metadata: dict[str, Any] = {
            # Flavors are cluster-scoped: the operator passes "<namespace>-<cluster>".
            "name": f"{prefix or bundle.cluster.metadata.name}-{ns.metadata.name}",
            "labels": {
                "app.kubernetes.io/managed-by": "slurmkube",
                "slurmkube.io/cluster": bundle.cluster.metadata.name,
                "slurmkube.io/nodeset": ns.metadata.name,
                "slurmkube.io/namespace": wk.namespace_or_default(
                    bundle.cluster.metadata.namespace
                ),
            },
        }
        if selector.match_expressions:
            metadata["annotations"] = {
                "slurmkube.io/unmapped-match-expressions": ",".join(
                    f"{r.key} {r.operator} {'|'.join(r.values)}".strip()
                    for r in selector.match_expressions
                )
            }
        flavors.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "ResourceFlavor",
                "metadata": metadata,
                "spec": {
                    "nodeLabels": dict(sorted(selector.match_labels.items())),
                    "topologyName": topology_name,
                },
            }
        )
    return flavors
