"""A real Slurm cluster (slurmctld, slurmd per node, slurmrestd) for integration tests.

Never skipped: without a Slurm build these tests fail and say how to build it
(`make slurm`), so CI can not go green by accident.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from slurmkube.api.documents import ClusterBundle
from slurmkube.api.models import KubeNode
from slurmkube_local.builders import NodeBuilder, bundle, nvl_fleet
from slurmkube_local.local_slurm import LocalSlurm, slurm_prefix, start_local_slurm

DOMAINS = 3
PER_DOMAIN = 5


def integration_fleet() -> list[KubeNode]:
    """Three NVLink domains of five 4-GPU nodes (one spare each over the base block of 4),
    plus two 8-GPU nodes outside any block."""
    return [
        *nvl_fleet(domains=DOMAINS, per_domain=PER_DOMAIN),
        *(
            NodeBuilder(f"hgx-{i}").gpus(8, "NVIDIA-H100").tiers("leaf-09", "spine-02").obj()
            for i in (1, 2)
        ),
    ]


def integration_bundle() -> ClusterBundle:
    return bundle(block_size=4)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[LocalSlurm]:
    if not (slurm_prefix() / "sbin" / "slurmctld").exists():
        pytest.fail(f"no Slurm build at {slurm_prefix()}: run `make slurm`", pytrace=False)
    with start_local_slurm(integration_bundle(), integration_fleet()) as cluster:
        cluster.wait_nodes_idle(timeout=90)
        yield cluster
