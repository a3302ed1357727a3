"""Pydantic models of slurmkube's CRDs and of the Kubernetes objects it reads.

These are the edge types: they parse what a user or the API server hands us
and reject bad input with the field's path. CRD schemas are generated from
them, so a field documented here is documented in `kubectl explain`.
Field names are the camelCase JSON names, as in every Kubernetes API.

The models live one module per kind (`cluster` with its `health` part,
`nodeset`, `reservation_check`, `allocation_source`, `kube_node`, `status`,
`meta`); this module is their
public import path.
"""

from __future__ import annotations

from slurmkube.api.allocation_source import (
    AllocationDocument,
    AllocationSource,
    AllocationSourceSpec,
    AllocationSourceStatus,
    Team,
    TeamQuota,
    Tier,
)
from slurmkube.api.cluster import (
    AccountingSpec,
    AuthSpec,
    BackfillSpec,
    ControllerSpec,
    DatabaseRef,
    PartitionSpec,
    PersistenceSpec,
    PriorityWeights,
    RestApiSpec,
    SchedulerSpec,
    SlurmCluster,
    SlurmClusterSpec,
    SlurmdSpec,
    TopologySpec,
)
from slurmkube.api.health import (
    CircuitBreakerSpec,
    ConditionMatch,
    HealthRule,
    HealthSpec,
    NodeCheckSpec,
    RackEscalationSpec,
    RecoverySpec,
    TaintMatch,
)
from slurmkube.api.kube_node import (
    KubeNode,
    NodeCondition,
    NodeSpecK8s,
    NodeStatus,
    Taint,
)
from slurmkube.api.login import LdapSpec, LoginSpec
from slurmkube.api.meta import (
    LabelSelector,
    LabelSelectorRequirement,
    LenientModel,
    ObjectMeta,
    StrictModel,
    Toleration,
    from_object,
)
from slurmkube.api.nodeset import (
    AutoscalingSpec,
    NodeSet,
    NodeSetSpec,
    UpdateStrategy,
    UpdateWindow,
)
from slurmkube.api.reservation_check import (
    BusyNodePolicy,
    ClusterRef,
    SlurmReservationCheck,
    SlurmReservationCheckSpec,
)
from slurmkube.api.status import (
    AutoscalingStatus,
    Condition,
    GpuCounts,
    NodeCounts,
    NodeSetStatus,
    SlurmClusterStatus,
)

__all__ = [
    "AccountingSpec",
    "AllocationDocument",
    "AllocationSource",
    "AllocationSourceSpec",
    "AllocationSourceStatus",
    "AuthSpec",
    "AutoscalingSpec",
    "AutoscalingStatus",
    "BackfillSpec",
    "BusyNodePolicy",
    "CircuitBreakerSpec",
    "ClusterRef",
    "Condition",
    "ConditionMatch",
    "ControllerSpec",
    "DatabaseRef",
    "GpuCounts",
    "HealthRule",
    "HealthSpec",
    "KubeNode",
    "LabelSelector",
    "LabelSelectorRequirement",
    "LdapSpec",
    "LenientModel",
    "LoginSpec",
    "NodeCheckSpec",
    "NodeCondition",
    "NodeCounts",
    "NodeSet",
    "NodeSetSpec",
    "NodeSetStatus",
    "NodeSpecK8s",
    "NodeStatus",
    "ObjectMeta",
    "PartitionSpec",
    "PersistenceSpec",
    "PriorityWeights",
    "RackEscalationSpec",
    "RecoverySpec",
    "RestApiSpec",
    "SchedulerSpec",
    "SlurmCluster",
    "SlurmClusterSpec",
    "SlurmClusterStatus",
    "SlurmReservationCheck",
    "SlurmReservationCheckSpec",
    "SlurmdSpec",
    "StrictModel",
    "Taint",
    "TaintMatch",
    "Team",
    "TeamQuota",
    "Tier",
    "Toleration",
    "TopologySpec",
    "UpdateStrategy",
    "UpdateWindow",
    "from_object",
]
