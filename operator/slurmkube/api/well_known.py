"""Well-known label keys, annotations and names, in one place.

Label keys for NVLink cliques and GPU products are the ones NVIDIA's GPU Feature
Discovery sets; the topology tier keys are slurmkube's defaults and can be
changed per SlurmCluster (`spec.topology.tierLabels`).
"""

from collections.abc import Mapping
from typing import Any, Final

GROUP: Final = "slurmkube.io"
API_VERSION: Final = f"{GROUP}/v1alpha1"

# GPU Feature Discovery: `<clusterUUID>.<cliqueId>` on NVLink-switched systems.
LABEL_GPU_CLIQUE: Final = "nvidia.com/gpu.clique"
LABEL_GPU_PRODUCT: Final = "nvidia.com/gpu.product"
LABEL_GPU_COUNT: Final = "nvidia.com/gpu.count"
RESOURCE_GPU: Final = "nvidia.com/gpu"

LABEL_RACK: Final = "topology.slurmkube.io/rack"
LABEL_LEAF: Final = "topology.slurmkube.io/leaf"
LABEL_SPINE: Final = "topology.slurmkube.io/spine"

# Set by the Kueue bridge on nodes lent to a workload.
LABEL_LEASE: Final = f"{GROUP}/lease"
# On the Events that record a node's handover (controllers/handovers.py): the node
# and its lease.
ANNOTATION_NODE: Final = f"{GROUP}/node"
ANNOTATION_LEASE: Final = f"{GROUP}/lease"
# Kueue AdmissionCheck controllerName of the bridge, and its parameters kind.
CHECK_CONTROLLER: Final = f"{GROUP}/slurm-reservation"
CHECK_PARAMETERS_KIND: Final = "SlurmReservationCheck"
# Slurm reservations the bridge makes are named this prefix + the Workload UID.
RESERVATION_PREFIX: Final = "slurmkube-"
# Pod template annotation: "single-block" keeps every pod in one NVLink block.
ANNOTATION_BLOCK_POLICY: Final = f"{GROUP}/block-policy"

# Prefix of every drain reason slurmkube sets; reasons without it belong to
# someone else (an admin) and are never cleared by the operator.
DRAIN_REASON_PREFIX: Final = "slurmkube:"


def namespace_or_default(namespace: str | None) -> str:
    """An object's namespace; the API server's default where a manifest leaves it out."""
    return namespace or "default"


def is_ours(reason: str) -> bool:
    """A Slurm node reason slurmkube wrote (the one test of "drained by us")."""
    return reason.startswith(DRAIN_REASON_PREFIX)


# Drains for node health carry this prefix (a kind of `DRAIN_REASON_PREFIX`):
# only the health planner resumes them, once the node has proven healthy.
HEALTH_REASON_PREFIX: Final = f"{DRAIN_REASON_PREFIX}health:"
# The taint that keeps Kueue (TAS) and kube-scheduler off a sick node.
TAINT_UNHEALTHY: Final = f"{GROUP}/unhealthy"
# Reservations for a node's active check are named this prefix + the node.
CHECK_RESERVATION_PREFIX: Final = "slurmkube-check-"
# On a SlurmCluster: the health controller's record (first-sick times, failures,
# running checks), so an operator restart forgets no hold or check.
ANNOTATION_HEALTH: Final = f"{GROUP}/health"


def is_health_drain(reason: str) -> bool:
    """A node reason the health planner wrote (resumed only after proof)."""
    return reason.startswith(HEALTH_REASON_PREFIX)


def is_fatal_health_drain(reason: str) -> bool:
    """Health's drain for a `fatal` rule (`plan.health_rules.sick_reason`): the node's
    jobs cannot go on, so a Kueue workload holding it is evicted too."""
    return reason.startswith(f"{HEALTH_REASON_PREFIX} fatal ")


# `make images` tags it so; `localhost/` is the node's own image store, a name no
# registry can claim. Clusters elsewhere set spec.image to their registry's copy.
DEFAULT_SLURM_IMAGE: Final = "localhost/slurmkube/slurm:24.11.5"

# Labels on every object slurmkube creates (Kubernetes recommended labels).
LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_CLUSTER: Final = f"{GROUP}/cluster"
LABEL_NODESET: Final = f"{GROUP}/nodeset"
LABEL_NODE: Final = f"{GROUP}/node"
ANNOTATION_CONFIG_HASH: Final = f"{GROUP}/config-hash"
# On the config ConfigMap: the Slurm release its files are for (read back after a restart).
ANNOTATION_SLURM_RELEASE: Final = f"{GROUP}/slurm-release"
# Every byte of the files (a node moved live changes them, not the config hash).
ANNOTATION_CONFIG_CONTENT: Final = f"{GROUP}/config-content"
# On the config's ConfigMap: the nodes a live move may have left a `Topology=`
# override for in slurmctld's state (a hostlist, or "*": every placed node).
ANNOTATION_TOPOLOGY_OVERRIDES: Final = f"{GROUP}/topology-overrides"
# On every pod of a cluster while its keys rotate: the key set's hash, so each
# kubelet syncs the pod's Secret volume now, not at its next periodic sync.
ANNOTATION_KEY_SET: Final = f"{GROUP}/key-set"
# On slurmrestd's pod template: a digest of the certificate stunnel serves, so a
# new one (re-issued, or cert-manager's renewal) rolls the pods.
ANNOTATION_RESTAPI_TLS: Final = f"{GROUP}/restapi-tls"
# On slurmd pods: "true" while Slurm shows a job on the node (the busy pods'
# PodDisruptionBudget selects it).
LABEL_BUSY: Final = f"{GROUP}/busy"
# The PriorityClass of slurmd pods, shipped by the Helm chart (cluster-scoped).
SLURMD_PRIORITY_CLASS: Final = "slurmkube-slurmd"
# Hash of a slurmd pod's spec when it was made: a pod whose hash differs from
# today's is replaced under the NodeSet's updateStrategy (drain first).
ANNOTATION_POD_TEMPLATE_HASH: Final = f"{GROUP}/pod-template-hash"
FIELD_MANAGER: Final = "slurmkube-operator"
FINALIZER: Final = f"{GROUP}/cleanup"
# On a SlurmCluster being deleted: "true" deletes it now, whatever jobs still run.
ANNOTATION_FORCE_DELETE: Final = f"{GROUP}/force-delete"

# Ports (slurm.conf(5) defaults; slurmrestd has none, 6820 is the documented usual).
SLURMCTLD_PORT: Final = 6817
SLURMD_PORT: Final = 6818
SLURMRESTD_PORT: Final = 6820
SLURMDBD_PORT: Final = 6819

# Paths inside the slurm image.
CONFIG_DIR: Final = "/etc/slurm"
STATE_DIR: Final = "/var/spool/slurmctld"


def container_gpus(resources: Mapping[str, Any]) -> int:
    """nvidia.com/gpu of a container's `resources` (limits, else requests; 0 if unreadable).

    Extended resources: requests equal limits, and either may be given alone."""
    for kind in ("limits", "requests"):
        value = (resources.get(kind) or {}).get(RESOURCE_GPU)
        if value is not None:
            try:
                return int(str(value))
            except ValueError:
                return 0
    return 0


# A new value asks for a rotation of auth/slurm's key (plan/key_rotation.py); the
# rotation's progress is kept in the second.
ANNOTATION_ROTATE_KEYS: Final = f"{GROUP}/rotate-keys"
ANNOTATION_KEY_ROTATION: Final = f"{GROUP}/key-rotation"
