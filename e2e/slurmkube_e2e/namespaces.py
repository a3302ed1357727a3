"""Delete a test's namespace and wait only for what the next test could meet.

The namespace controller first looks at a deleted namespace after 5 s, and when
pods are still terminating it looks again only after half their grace period
(16 s for the default 30 s; items with finalizers: 8 s). What the next module
meets is the nodes and their Slurm state: the slurmd pods, and the
SlurmClusters and NodeSets, whose finalizers give nodes back (drains, labels).
So those two are deleted with the namespace: left to the namespace controller
they were marked about 10 s later, and their finalizers (which also delete the
slurmd pods) ran only then. They are deleted orphaning what they own: the
control plane's pods go with the namespace, at its controller's first look;
through the owners' cascade slurmdbd sat out its 30 s grace after SIGTERM on
a cluster with accounting, with the namespace it stops at once. Once the
SlurmClusters, NodeSets and pods are gone (about 5 s), the rest (Secrets,
ConfigMaps, the namespace itself) goes in the background; test namespaces
have random suffixes, so none is reused.
"""

from __future__ import annotations

from slurmkube_e2e.kube import Kube
from slurmkube_e2e.operator_cluster import API
from slurmkube_e2e.waiting import wait_for_list

HOLDERS = ((API, "SlurmCluster"), (API, "NodeSet"), ("v1", "Pod"))


def delete_namespace(kube: Kube, namespace: str, timeout: float = 180) -> None:
    """Delete the namespace; return once its operator objects and pods are gone."""
    kube.delete("v1", "Namespace", namespace)
    for api_version, kind in HOLDERS[:2]:
        for obj in kube.list(api_version, kind, namespace=namespace):
            kube.delete(api_version, kind, obj["metadata"]["name"], namespace, "Orphan")
    for api_version, kind in HOLDERS:
        wait_for_list(
            kube,
            api_version,
            kind,
            lambda items: not items,
            namespace=namespace,
            timeout=timeout,
            what=f"no {kind} left in the deleted namespace {namespace}",
        )
