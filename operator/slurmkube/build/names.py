"""Names and labels of a Slurm cluster's Kubernetes objects, in one place (pure).

Names are deterministic (controller-runtime FAQ): the same cluster always
yields the same object names, so a crash between two applies is finished by
the next reconcile rather than duplicated.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from slurmkube.api import well_known as wk
from slurmkube.api.models import SlurmCluster
from slurmkube.render.context import RenderContext

Manifest = dict[str, Any]

# Users of the slurm image (images/slurm/Dockerfile).
SLURM_GID = 401
RESTD_UID = 402

# Kubernetes object names and hostnames are DNS labels.
_MAX_LABEL = 63


def pod_hostname(node: str) -> str:
    """A pod's `spec.hostname` for a node name: a DNS label, so no dots.

    Node names are RFC 1123 subdomains (`ip-10-4-0-10.ec2.internal` on EKS) and
    the API server refuses a dotted hostname. slurmd is told its Slurm node
    name with `-N`, so the hostname only has to be valid and recognisable.
    """
    return dns_label(node.replace(".", "-"))


def dns_label(name: str) -> str:
    """A DNS label from a longer name: a readable prefix plus a hash, deterministic."""
    if len(name) <= _MAX_LABEL:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: _MAX_LABEL - 9].rstrip('-')}-{digest}"


@dataclass(frozen=True, slots=True)
class ClusterNames:
    """Every name derived from a SlurmCluster, in one place."""

    cluster: str
    namespace: str
    domain: str = "cluster.local"

    @property
    def controller(self) -> str:
        return dns_label(f"{self.cluster}-slurmctld")

    @property
    def controller_metrics(self) -> str:
        """The Service Prometheus scrapes slurmctld's OpenMetrics through (26.05)."""
        return dns_label(f"{self.cluster}-slurmctld-metrics")

    @property
    def controller_pod(self) -> str:
        return f"{self.controller}-0"

    @property
    def controller_fqdn(self) -> str:
        # The StatefulSet pod's DNS name through its headless Service.
        return f"{self.controller_pod}.{self.controller}.{self.namespace}.svc.{self.domain}"

    @property
    def restapi(self) -> str:
        return dns_label(f"{self.cluster}-slurmrestd")

    @property
    def restapi_tls(self) -> str:
        """The Secret of slurmrestd's certificate when the operator issues it."""
        return dns_label(f"{self.cluster}-restapi-tls")

    @property
    def restapi_proxy(self) -> str:
        """The ConfigMap of stunnel's configuration in front of slurmrestd."""
        return dns_label(f"{self.cluster}-slurmrestd-tls")

    @property
    def restapi_dns_names(self) -> tuple[str, ...]:
        """The names slurmrestd's certificate is for: its Service's, short to full."""
        svc = self.restapi
        return (
            svc,
            f"{svc}.{self.namespace}",
            f"{svc}.{self.namespace}.svc",
            f"{svc}.{self.namespace}.svc.{self.domain}",
        )

    @property
    def login(self) -> str:
        return dns_label(f"{self.cluster}-login")

    @property
    def login_sssd(self) -> str:
        """The ConfigMap of the login pods' sssd.conf."""
        return dns_label(f"{self.cluster}-login-sssd")

    @property
    def slurmdbd(self) -> str:
        return dns_label(f"{self.cluster}-slurmdbd")

    @property
    def slurmdbd_fqdn(self) -> str:
        return f"{self.slurmdbd}.{self.namespace}.svc.{self.domain}"

    @property
    def slurmdbd_config(self) -> str:
        return dns_label(f"{self.cluster}-slurmdbd-config")

    @property
    def config(self) -> str:
        return dns_label(f"{self.cluster}-slurm-config")

    @property
    def auth(self) -> str:
        return dns_label(f"{self.cluster}-auth")

    @property
    def state(self) -> str:
        return "state"

    def slurmd_pod(self, node_set: str, node: str) -> str:
        return dns_label(f"{node_set}-{node}")

    def slurmd_busy_budget(self, node_set: str) -> str:
        """The PodDisruptionBudget of a NodeSet's busy slurmd pods."""
        return dns_label(f"{node_set}-busy-slurmd")


def names_of(cluster: SlurmCluster) -> ClusterNames:
    return ClusterNames(
        cluster.metadata.name,
        wk.namespace_or_default(cluster.metadata.namespace),
        cluster.spec.cluster_domain,
    )


def deployment_context(cluster: SlurmCluster) -> RenderContext:
    """Paths and hosts of the daemons in slurmkube's pods."""
    names = names_of(cluster)
    slurmd = cluster.spec.slurmd
    return RenderContext(
        cgroups=slurmd.cgroups,
        config_overrides=slurmd.config_overrides,
        controller_host=names.controller_pod,
        controller_addr=names.controller_fqdn,
        config_dir=wk.CONFIG_DIR,
        state_save_location=wk.STATE_DIR,
        slurmd_spool_dir="/var/spool/slurmd",
        log_dir="/var/log/slurm",
        run_dir="/run/slurm",
        slurm_user="slurm",
        gpu_device_dir="/dev",
        accounting_host=names.slurmdbd_fqdn if cluster.spec.accounting.enabled else None,
        client_ids=cluster.spec.login.ldap is not None,
    )


def labels(cluster: SlurmCluster, component: str, **extra: str) -> dict[str, str]:
    return {
        wk.LABEL_NAME: component,
        wk.LABEL_INSTANCE: cluster.metadata.name,
        wk.LABEL_MANAGED_BY: "slurmkube",
        wk.LABEL_CLUSTER: cluster.metadata.name,
        **extra,
    }


def meta(cluster: SlurmCluster, name: str, component: str, **extra: str) -> Manifest:
    return {
        "name": name,
        "namespace": cluster.metadata.namespace,
        "labels": labels(cluster, component, **extra),
    }
