"""Well-known label keys, annotations and names, in one place.

Label keys for NVLink cliques and GPU products are the ones NVIDIA's GPU Feature
Discovery sets; the topology tier keys are slurmkube's defaults and can be
changed per SlurmCluster (`spec.topology.tierLabels`).
"""

from typing import Final

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

# Prefix of every drain reason slurmkube sets; reasons without it belong to
# someone else (an admin) and are never cleared by the operator.
DRAIN_REASON_PREFIX: Final = "slurmkube:"

DEFAULT_SLURM_IMAGE: Final = "slurmkube/slurm:24.11.5"
