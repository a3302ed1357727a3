"""A SlurmCluster on the local runtime's nodes, and how tests talk to its slurmctld.

The sample the e2e tests share: slurmctld, slurmrestd and one slurmd pod per
local node (real daemons), with `in_ctld` running Slurm commands inside the
slurmctld pod the way an admin would with `kubectl exec`.

With `SLURMKUBE_E2E_NODES=real` (`make e2e-real`) the same tests place their
clusters on the real kubelets instead (`make real-nodes`), with the production
defaults (the Slurm 26.05 image `make images` built, cgroups, the nodes' own
CPUs and memory), and talk to pods through `kubectl exec` and `kubectl logs`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

from slurmkube_e2e.kube import Kube
from slurmkube_e2e.kubectl import KubectlError, kubectl
from slurmkube_e2e.layout import Layout
from slurmkube_e2e.pod_exec import kubectl_exec
from slurmkube_e2e.realnode_config import REAL_FLEET, REAL_NODE_TAINT, RealNode
from slurmkube_e2e.realnodes import RealNodes
from slurmkube_e2e.waiting import has_condition, wait_for, wait_for_list

API = "slurmkube.io/v1alpha1"
NODES_ENV = "SLURMKUBE_E2E_NODES"
ON_REAL_NODES = os.environ.get(NODES_ENV, "local") == "real"
REAL_IMAGE = "localhost/slurmkube/slurm:26.05"
# A plain pod's container on the sample's nodes: the runtime runs any image name;
# a real node only those imported at `make real-nodes`.
POD_IMAGE = REAL_IMAGE if ON_REAL_NODES else "slurmkube/slurm:24.11.5"
# The sample NodeSet's slurmd pods: the first NVLink domain of eight nodes.
SAMPLE_REPLICAS = 4
# The local runtime's nodes (docs/local-runtime.md): two NVLink domains of four.
RUNTIME_NODES = 8
if ON_REAL_NODES:
    LOCAL = {"e2e.slurmkube.io/fleet": REAL_FLEET}
    TOLERATE = [{"key": REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
else:
    LOCAL = {"e2e.slurmkube.io/runtime": "local"}
    TOLERATE = [
        {"key": "e2e.slurmkube.io/local-runtime", "operator": "Exists", "effect": "NoSchedule"}
    ]
# The Slurm of the suite's clusters (docs/local-runtime.md): unset, the
# SlurmCluster default (24.11.5, the host build on the local runtime); a tag
# such as 26.05 runs `slurmkube/slurm:<tag>`, the image `make images` built.
SLURM_ENV = "SLURMKUBE_E2E_SLURM"
_SLURM_TAG = re.compile(r"\d+\.\d+(\.\d+)?")


def slurm_image(env: Mapping[str, str] = os.environ) -> str | None:
    """`slurmkube/slurm:<SLURMKUBE_E2E_SLURM>`, or None to keep the cluster default
    (on real nodes: the 26.05 image `make images` built)."""
    tag = env.get(SLURM_ENV, "")
    if not tag:
        return REAL_IMAGE if env.get(NODES_ENV, "local") == "real" else None
    if not _SLURM_TAG.fullmatch(tag):
        raise ValueError(f"{SLURM_ENV}={tag!r}: want a Slurm version such as 26.05 or 24.11.5")
    return f"slurmkube/slurm:{tag}"


def docs(
    namespace: str,
    *,
    replicas: int = SAMPLE_REPLICAS,
    max_time: str = "1-00:00:00",
    login: int = 0,
    node_set_tolerations: tuple[dict[str, str], ...] = (),
    accounting: dict[str, Any] | None = None,
    persistence: bool = False,
) -> list[dict[str, Any]]:
    """`persistence`: slurmctld's state on a PersistentVolumeClaim (the test bed's
    hostPath provisioner); off for most tests, which make and drop many clusters."""
    image = slurm_image()
    return [
        {
            "apiVersion": API,
            "kind": "SlurmCluster",
            "metadata": {"name": "local", "namespace": namespace},
            "spec": {
                **({"image": image} if image else {}),
                "controller": {
                    "persistence": {"enabled": persistence},
                    "nodeSelector": LOCAL,
                    "tolerations": TOLERATE,
                },
                "login": {"replicas": login},
                "accounting": accounting or {"enabled": False},
                # One 2-core host plays eight 16-core nodes; real nodes keep the
                # production defaults.
                **(
                    {} if ON_REAL_NODES else {"slurmd": {"cgroups": False, "configOverrides": True}}
                ),
                # A block per NVLink domain: four nodes on the runtime, half the
                # real nodes on real kubelets (two of four, four of eight).
                "topology": {"blockSize": nvlink_domain_size()},
                "partitions": [
                    {"name": "gpu", "nodeSets": ["local"], "default": True, "maxTime": max_time}
                ],
            },
        },
        {
            "apiVersion": API,
            "kind": "NodeSet",
            "metadata": {"name": "local", "namespace": namespace},
            "spec": {
                "clusterRef": "local",
                "nodeSelector": {"matchLabels": LOCAL},
                "tolerations": [*TOLERATE, *node_set_tolerations],
                "memoryReservedMiB": 1024,
                "replicas": replicas,
            },
        },
    ]


def autoscaled_docs(namespace: str, **autoscaling: Any) -> list[dict[str, Any]]:
    """The sample with its NodeSet driven by Slurm's power saving, at short test times."""
    cluster, node_set = docs(namespace)
    del node_set["spec"]["replicas"]
    node_set["spec"]["autoscaling"] = {
        "enabled": True,
        "suspendTimeSeconds": 15,
        "suspendTimeoutSeconds": 5,
        "resumeTimeoutSeconds": 30,
        **autoscaling,
    }
    return [cluster, node_set]


def _real_nodes() -> list[RealNode]:
    return sorted(RealNodes(Layout.from_env()).saved(), key=lambda n: n.index)


def slurm_node(index: int) -> str:
    """The Slurm node (its Kubernetes node's name) at `index` of the sample's NodeSet:
    `local-<index>` on the runtime, the index-th real node on real kubelets (0..3 of
    eight: the first NVLink domain, the nodes the sample's four replicas run on)."""
    if not ON_REAL_NODES:
        return f"local-{index}"
    return _real_nodes()[index].name


def sample_nodes() -> list[str]:
    """Every node the sample's NodeSet selects, in `slurm_node` order: the runtime's
    local-0..7, or every real node."""
    count = len(_real_nodes()) if ON_REAL_NODES else RUNTIME_NODES
    return [slurm_node(i) for i in range(count)]


def nvlink_domain_size() -> int:
    """Nodes per NVLink domain of the sample's nodes: four on the runtime; on real
    kubelets, those of the first real node's domain."""
    if not ON_REAL_NODES:
        return 4
    nodes = _real_nodes()
    return sum(1 for n in nodes if n.place.domain == nodes[0].place.domain) if nodes else 1


def deployed_only() -> tuple[str, ...]:
    """sbatch arguments that keep a job off the sample's nodes without a slurmd pod
    (past the sample's four replicas: the runtime's local-4..7, the second domain of
    eight real nodes; CLOUD, powered down: Slurm would try to resume them); four
    real nodes all run one."""
    if not ON_REAL_NODES:
        return ("--exclude=local-[4-7]",)
    beyond = [n.name for n in _real_nodes()[SAMPLE_REPLICAS:]]
    return (f"--exclude={','.join(beyond)}",) if beyond else ()


def in_ctld(namespace: str, *argv: str) -> str:
    return in_pod(namespace, "local-slurmctld-0", *argv)


def _runtime(*argv: str) -> str:
    """The local runtime's CLI (`python -m slurmkube_e2e logs|exec ...`); its stdout."""
    proc = subprocess.run(
        [sys.executable, "-m", "slurmkube_e2e", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"{argv}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def in_pod(namespace: str, pod: str, *argv: str) -> str:
    """A command in a pod of the local runtime (what `kubectl exec` does elsewhere).

    In /tmp: a job submitted here runs in the same directory on its nodes and
    writes its output there, which the image's user 401 may (not so in `/`)."""
    if ON_REAL_NODES:
        try:
            return kubectl_exec(namespace, pod, *argv)
        except KubectlError as err:  # fails as the runtime's exec does, for the retry loops
            raise AssertionError(str(err)) from err
    return _runtime("exec", "-n", namespace, "--workdir", "/tmp", pod, "--", *argv)


def pod_log(namespace: str, pod: str, container: str) -> str:
    """A container's log on the local runtime (what `kubectl logs` does elsewhere)."""
    if ON_REAL_NODES:
        layout = Layout.from_env()
        return kubectl(
            layout.kubectl, layout.kubeconfig, ["logs", "-n", namespace, pod, "-c", container]
        )
    return _runtime("logs", "-n", namespace, pod, "-c", container)


def job_state(namespace: str, job: str, ctld: str = "local-slurmctld-0") -> tuple[str, str]:
    """(JobState, NodeList) as slurmctld reports them."""
    out = in_pod(namespace, ctld, "scontrol", "-o", "show", "job", job)
    state = re.search(r"JobState=(\S+)", out)
    nodes = re.search(r" NodeList=(\S+)", out)
    return (state.group(1) if state else "?"), (nodes.group(1) if nodes else "")


def wait_job(namespace: str, job: str, states: set[str], timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state, nodes = job_state(namespace, job)
        if state in states:
            return nodes
        time.sleep(1)
    raise AssertionError(f"job {job} is {state}, wanted {states}")


def ready_cluster(kube: Kube, namespace: str, timeout: float = 180) -> dict[str, Any]:
    return wait_for(
        kube,
        API,
        "SlurmCluster",
        "local",
        lambda o: has_condition(o, "Ready"),
        namespace=namespace,
        timeout=timeout,
    )


def free_the_nodes(kube: Kube, namespace: str) -> None:
    """Delete the sample's SlurmCluster and NodeSet and wait until its slurmd pods
    are gone, so the next module has the nodes (a namespace deletion drains)."""
    kube.delete(API, "SlurmCluster", "local", namespace=namespace)
    kube.delete(API, "NodeSet", "local", namespace=namespace)
    wait_for_list(
        kube,
        "v1",
        "Pod",
        lambda pods: not pods,
        namespace=namespace,
        label_selector="app.kubernetes.io/name=slurmd",
        timeout=120,
    )
