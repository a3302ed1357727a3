"""Objects a cluster plan carries besides its pods (pure): slurmdbd's when
accounting is on, and the Kueue Topology and ResourceFlavors."""

from __future__ import annotations

import hashlib

from slurmkube.api import well_known as wk
from slurmkube.api.documents import ClusterBundle
from slurmkube.api.grammar import InvalidValue
from slurmkube.api.models import SlurmCluster
from slurmkube.build.names import Manifest, deployment_context
from slurmkube.build.slurmdbd import slurmdbd_deployment, slurmdbd_secret, slurmdbd_service
from slurmkube.render.slurmdbd import DatabaseCredentials, plan_slurmdbd, render_slurmdbd_conf
from slurmkube.topology.kueue import kueue_topology, resource_flavors


def accounting_objects(
    cluster: SlurmCluster, credentials: DatabaseCredentials | None, image: str | None = None
) -> list[Manifest]:
    """slurmdbd's Secret, Deployment and Service; none while accounting is off.
    `image`: slurmdbd's (plan/upgrade.py), spec.image by default."""
    accounting = cluster.spec.accounting
    if not accounting.enabled:
        return []
    database = accounting.database
    if credentials is None:
        secret = database.secret_name if database else "?"
        raise InvalidValue(
            f"SlurmCluster {cluster.metadata.name} spec.accounting.database.secretName",
            secret,
            "a Secret in the cluster's namespace with keys username and password",
        )
    ctx = deployment_context(cluster)
    conf = render_slurmdbd_conf(
        plan_slurmdbd(
            cluster,
            credentials,
            config_dir=ctx.config_dir,
            run_dir="/run/slurmdbd",
            slurm_user=ctx.slurm_user,
        )
    )
    conf_hash = hashlib.sha256(conf.encode()).hexdigest()[:16]
    return [
        slurmdbd_secret(cluster, conf),
        slurmdbd_deployment(cluster, conf_hash, image),
        slurmdbd_service(cluster),
    ]


def kueue_name(bundle: ClusterBundle) -> str:
    """Cluster-scoped names carry the namespace: two namespaces may hold a `gpu` cluster."""
    cluster = bundle.cluster
    return f"{wk.namespace_or_default(cluster.metadata.namespace)}-{cluster.metadata.name}"


def kueue_objects(bundle: ClusterBundle) -> tuple[Manifest, ...]:
    name = kueue_name(bundle)
    topology = kueue_topology(name, bundle.cluster.spec.topology)
    topology["metadata"]["labels"] |= {
        wk.LABEL_CLUSTER: bundle.cluster.metadata.name,
        "slurmkube.io/namespace": wk.namespace_or_default(bundle.cluster.metadata.namespace),
    }
    return (topology, *resource_flavors(bundle, name, prefix=name))
