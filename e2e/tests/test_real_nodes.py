"""Real kubelets on containerd 2.x run slurmkube's images (issue 16, item 2).

Needs `make real-nodes` (or `make cluster-up REAL_NODES=4`); skipped when no
real node was started. Checks what a user's cluster would show: the Nodes'
container runtime, their fake GPUs in allocatable and NVLink-domain labels, and
a pod from the Slurm image that runs as the image's USER with a GPU's device
node, completes, and whose log the API server reads from the kubelet.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from slurmkube_e2e import fleet
from slurmkube_e2e.kube import Kube, Manifest
from slurmkube_e2e.layout import Layout
from slurmkube_e2e.realnode_config import REAL_NODE_TAINT, RealNode
from slurmkube_e2e.realnodes import GPU_RESOURCE
from slurmkube_e2e.waiting import wait_for

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "localhost/slurmkube/slurm:26.05"
# Has python3 (for a listener); the Slurm image has bash (for /dev/tcp).
OPERATOR_IMAGE = "localhost/slurmkube/operator:0.1.0"


def image_user(image: str) -> str:
    """The USER of the image as built (its config, not our Dockerfile's text)."""
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "images" / "build.py"),
            "podman",
            "image",
            "inspect",
            "--format",
            "{{.Config.User}}",
            image,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return out.split(":")[0]


def test_real_nodes_run_containerd_2(kube: Kube, real_nodes: list[RealNode]) -> None:
    for node in real_nodes:
        got = kube.get("v1", "Node", node.name)
        assert got is not None, node.name
        assert got["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://2.")
        assert got["status"]["nodeInfo"]["kubeletVersion"].startswith("v1.36.")


def test_real_nodes_offer_fake_gpus_in_two_nvlink_domains(
    kube: Kube, real_nodes: list[RealNode]
) -> None:
    cliques = set()
    for node in real_nodes:
        got = kube.get("v1", "Node", node.name)
        assert got is not None, node.name
        assert got["status"]["allocatable"][GPU_RESOURCE] == str(node.gpus)
        labels = got["metadata"]["labels"]
        assert labels[fleet.COUNT_LABEL] == str(node.gpus)
        cliques.add(labels[fleet.CLIQUE_LABEL])
    assert len(cliques) == (1 if len(real_nodes) == 1 else 2)


def _pod(
    node: str, user_command: str, name: str = "whoami", image: str = IMAGE, gpus: int = 1
) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"key": REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": name,
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", user_command],
                    "resources": {"limits": {GPU_RESOURCE: str(gpus)}} if gpus else {},
                }
            ],
        },
    }


def _logs(kubeconfig: Path, namespace: str, pod: str) -> str:
    """Through the API server, which reads them from the node's kubelet."""
    return subprocess.run(
        [
            str(Layout.from_env().kubectl),
            f"--kubeconfig={kubeconfig}",
            "-n",
            namespace,
            "logs",
            pod,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _finished(pod: Manifest) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def test_a_pod_from_the_slurm_image_runs_as_its_user_with_a_gpu_and_completes(
    kube: Kube, namespace: str, real_nodes: list[RealNode], kubeconfig: Path
) -> None:
    node = real_nodes[-1].name
    command = (
        'echo "uid=$(id -u) gpus=$NVIDIA_VISIBLE_DEVICES"; test -c /dev/$NVIDIA_VISIBLE_DEVICES'
    )
    kube.create(_pod(node, command), namespace=namespace)
    pod = wait_for(
        kube,
        "v1",
        "Pod",
        "whoami",
        lambda p: p.get("status", {}).get("phase") in ("Succeeded", "Failed"),
        namespace=namespace,
        timeout=120,
    )
    logs = subprocess.run(
        [
            str(Layout.from_env().kubectl),
            f"--kubeconfig={kubeconfig}",
            "-n",
            namespace,
            "logs",
            "whoami",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert pod["status"]["phase"] == "Succeeded", (pod["status"], logs)
    assert pod["spec"]["nodeName"] == node
    uid = image_user(IMAGE)
    assert uid.isdigit() and uid != "0"
    assert logs.strip().startswith(f"uid={uid} gpus=nvidia"), logs


def test_pods_on_nodes_of_different_nvlink_domains_reach_each_other(
    kube: Kube, namespace: str, real_nodes: list[RealNode], kubeconfig: Path
) -> None:
    if len(real_nodes) < 2:
        pytest.skip("needs two real nodes")
    server = _pod(
        real_nodes[0].name, "exec python3 -m http.server 8080", "listener", OPERATOR_IMAGE, gpus=0
    )
    server["spec"]["containers"][0]["readinessProbe"] = {
        "tcpSocket": {"port": 8080},
        "periodSeconds": 1,
    }
    kube.create(server, namespace=namespace)
    ready = wait_for(
        kube,
        "v1",
        "Pod",
        "listener",
        lambda p: any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in p.get("status", {}).get("conditions", [])
        ),
        namespace=namespace,
        timeout=120,
    )
    ip = ready["status"]["podIP"]
    fetch = f"exec 3<>/dev/tcp/{ip}/8080 && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && head -1 <&3"
    kube.create(
        _pod(real_nodes[-1].name, f'bash -c "{fetch}"', "client", gpus=0), namespace=namespace
    )
    client = wait_for(kube, "v1", "Pod", "client", _finished, namespace=namespace, timeout=120)
    logs = _logs(kubeconfig, namespace, "client")
    assert client["status"]["phase"] == "Succeeded", (client["status"], logs)
    assert logs.startswith("HTTP/1.0 200"), logs
