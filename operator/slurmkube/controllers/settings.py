"""The operator's settings and test seams, read from the environment once.

The entry point (`slurmkube operator`) builds `Settings` and hands them to the
controllers; no production function reads the environment itself. Two seams
exist for the local test bed, where the operator runs outside the pod network:
`endpoints` (how slurmctld and slurmrestd are reached: Service DNS names in a
cluster, pod IPs or a fixed URL on the test bed) and `failpoint`
(`controllers/failpoints.py`).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from slurmkube.api import well_known as wk
from slurmkube.api.models import SlurmCluster
from slurmkube.build.names import names_of
from slurmkube.build.slurmrestd import restapi_scheme
from slurmkube.kube.client import Kube
from slurmkube.kube.leader_election import Timing

# The chart's leaderElection values, by the Timing field each one sets.
LEASE_ENVIRONMENT = {
    "lease_duration": "SLURMKUBE_LEASE_DURATION_SECONDS",
    "renew_deadline": "SLURMKUBE_LEASE_RENEW_DEADLINE_SECONDS",
    "retry_period": "SLURMKUBE_LEASE_RETRY_PERIOD_SECONDS",
}


class Endpoints(Protocol):
    """Where the operator reaches one cluster's daemons; None: not reachable yet."""

    def restapi_url(self, kube: Kube, cluster: SlurmCluster) -> str | None: ...

    def controller_address(self, kube: Kube, cluster: SlurmCluster) -> str | None: ...

    def slurmdbd_address(self, kube: Kube, cluster: SlurmCluster) -> str | None: ...


@dataclass(frozen=True)
class ServiceEndpoints:
    """In a cluster: the slurmrestd Service and the slurmctld pod's DNS name."""

    def restapi_url(self, kube: Kube, cluster: SlurmCluster) -> str | None:
        names = names_of(cluster)
        scheme = restapi_scheme(cluster)
        return f"{scheme}://{names.restapi}.{names.namespace}.svc:{wk.SLURMRESTD_PORT}"

    def controller_address(self, kube: Kube, cluster: SlurmCluster) -> str | None:
        return names_of(cluster).controller_fqdn

    def slurmdbd_address(self, kube: Kube, cluster: SlurmCluster) -> str | None:
        return names_of(cluster).slurmdbd_fqdn


@dataclass(frozen=True)
class PodIpEndpoints:
    """An operator outside the pod network's DNS (the local test bed): pod IPs."""

    def restapi_url(self, kube: Kube, cluster: SlurmCluster) -> str | None:
        names = names_of(cluster)
        selector = f"{wk.LABEL_CLUSTER}={cluster.metadata.name},{wk.LABEL_NAME}=slurmrestd"
        for pod in kube.list("v1", "Pod", names.namespace, selector):
            ip = (pod.get("status") or {}).get("podIP")
            if ip:
                return f"{restapi_scheme(cluster)}://{ip}:{wk.SLURMRESTD_PORT}"
        return ServiceEndpoints().restapi_url(kube, cluster)

    def controller_address(self, kube: Kube, cluster: SlurmCluster) -> str | None:
        names = names_of(cluster)
        pod = kube.get("v1", "Pod", names.controller_pod, names.namespace)
        return ((pod or {}).get("status") or {}).get("podIP") or None

    def slurmdbd_address(self, kube: Kube, cluster: SlurmCluster) -> str | None:
        names = names_of(cluster)
        selector = f"{wk.LABEL_CLUSTER}={cluster.metadata.name},{wk.LABEL_NAME}=slurmdbd"
        for pod in kube.list("v1", "Pod", names.namespace, selector):
            ip = (pod.get("status") or {}).get("podIP")
            if ip and not pod["metadata"].get("deletionTimestamp"):
                return str(ip)
        return None


@dataclass(frozen=True)
class FixedRestApi:
    """One slurmrestd URL for every cluster (a bench's tunnel), the rest as `base`."""

    url: str
    base: Endpoints

    def restapi_url(self, kube: Kube, cluster: SlurmCluster) -> str | None:
        return self.url

    def controller_address(self, kube: Kube, cluster: SlurmCluster) -> str | None:
        return self.base.controller_address(kube, cluster)

    def slurmdbd_address(self, kube: Kube, cluster: SlurmCluster) -> str | None:
        return self.base.slurmdbd_address(kube, cluster)


@dataclass(frozen=True)
class Settings:
    # The Lease lives in the operator's namespace; its holder is this replica.
    namespace: str = "default"
    identity: str = field(default_factory=socket.gethostname)
    # How long the config reloader may take before the operator reconfigures itself.
    propagation_seconds: float = 90.0
    # How often the Slurm node states of a cluster with slurmd pods are polled
    # (busy labels; autoscaling reconciles).
    autoscale_poll_seconds: float = 2.0
    # How often the live goodput exporter reads each cluster (controllers/goodput.py).
    goodput_seconds: float = 15.0
    # Where the operator's scontrol lives (PATH when None).
    slurm_prefix: str | None = None
    endpoints: Endpoints = field(default_factory=ServiceEndpoints)
    # `<step>[:<n>]`: exit after the n-th time that step completed (test only).
    failpoint: str = ""
    # Leader election (kube/leader_election.py): lease duration, renew deadline, retry.
    lease_timing: Timing = field(default_factory=Timing)

    @classmethod
    def from_environment(cls, env: Mapping[str, str], pid: int = 0) -> Settings:
        endpoints: Endpoints = (
            PodIpEndpoints() if env.get("SLURMKUBE_POD_IP_ENDPOINTS") else ServiceEndpoints()
        )
        if env.get("SLURMKUBE_SLURMRESTD_URL"):
            endpoints = FixedRestApi(env["SLURMKUBE_SLURMRESTD_URL"], endpoints)
        # In a pod the hostname is the pod name, so a restarted container takes its
        # own lease back at once; elsewhere SLURMKUBE_OPERATOR_IDENTITY can say the same.
        identity = env.get("SLURMKUBE_OPERATOR_IDENTITY") or f"{socket.gethostname()}-{pid}"
        return cls(
            namespace=env.get("SLURMKUBE_OPERATOR_NAMESPACE", "default"),
            identity=identity,
            propagation_seconds=float(env.get("SLURMKUBE_CONFIG_PROPAGATION_SECONDS", "90")),
            autoscale_poll_seconds=float(env.get("SLURMKUBE_AUTOSCALE_POLL_SECONDS", "2")),
            goodput_seconds=float(env.get("SLURMKUBE_GOODPUT_SECONDS", "15")),
            slurm_prefix=env.get("SLURMKUBE_SLURM_PREFIX") or None,
            endpoints=endpoints,
            failpoint=env.get("SLURMKUBE_FAILPOINT", ""),
            lease_timing=lease_timing(env),
        )


def lease_timing(env: Mapping[str, str]) -> Timing:
    """The leader-election durations; a bad value names its variable."""
    values: dict[str, float] = {}
    for name, variable in LEASE_ENVIRONMENT.items():
        if variable in env:
            try:
                values[name] = float(env[variable])
            except ValueError:
                raise ValueError(f"{variable}: not a number: {env[variable]!r}") from None
    try:
        return Timing(**values)
    except ValueError as err:
        given = ", ".join(f"{LEASE_ENVIRONMENT[n]}={v:g}" for n, v in values.items())
        raise ValueError(f"{err} ({given or 'defaults'})") from None
