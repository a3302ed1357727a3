"""A SlurmCluster on real kubelets, with the production defaults (issue 16).

Needs `make real-nodes` (skipped when none run). The cluster is what a user's
`kubectl apply` makes: the Slurm 26.05 image `make images` built, its USER and
ENTRYPOINT, slurmctld's state on a PersistentVolumeClaim, cgroups on, the
node's real CPUs and memory (no config overrides). Commands run in the
slurmctld pod through `kubectl exec` (API server -> kubelet -> containerd).
The operator is the suite's, on the host.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import re
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from slurmkube.api import well_known as wk
from slurmkube.build.names import ClusterNames
from slurmkube.controllers.certificates import (
    VALIDITY,
    first_certificate,
    issue_server_certificate,
)
from slurmkube.slurm.errors import SlurmUnreachable
from slurmkube.slurm.rest import RestClient
from slurmkube.slurm.topology_text import parse_topology
from slurmkube_e2e.accounting import sacct_state
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.kubectl import KubectlError
from slurmkube_e2e.kubectl import kubectl as run_kubectl
from slurmkube_e2e.layout import Layout
from slurmkube_e2e.mariadb import MariaDB
from slurmkube_e2e.pod_exec import kubectl_exec
from slurmkube_e2e.real_cluster import API, ready_real_cluster
from slurmkube_e2e.realnode_config import RealNode
from slurmkube_e2e.waiting import eventually, has_condition, wait_for

pytestmark = pytest.mark.e2e

CLUSTER = "real"
CTLD = f"{CLUSTER}-slurmctld-0"
IMAGE = "localhost/slurmkube/slurm:26.05"
SLURM_UID = "401"
NODE_LABEL = "slurmkube.io/node"  # the Slurm node a slurmd pod runs
RESTD = "app.kubernetes.io/name=slurmrestd"


def kubectl(*argv: str) -> str:
    layout = Layout.from_env()
    return run_kubectl(layout.kubectl, layout.kubeconfig, argv)


def in_ctld(namespace: str, *argv: str) -> str:
    return kubectl_exec(namespace, CTLD, *argv, container="slurmctld")


@pytest.fixture(scope="module")
def cluster(
    kube: Kube, operator: None, real_nodes: list[RealNode], database: MariaDB
) -> Iterator[str]:
    with ready_real_cluster(
        kube, "real-cluster", CLUSTER, image=IMAGE, replicas=len(real_nodes), database=database
    ) as namespace:
        yield namespace


def test_every_pod_runs_on_a_real_node_from_the_built_image(
    kube: Kube, cluster: str, real_nodes: list[RealNode]
) -> None:
    pods = kube.list("v1", "Pod", namespace=cluster)
    # slurmd per node, slurmctld, slurmrestd, slurmdbd
    assert len(pods) == len(real_nodes) + 3, [p["metadata"]["name"] for p in pods]
    for pod in pods:
        node = kube.get("v1", "Node", pod["spec"]["nodeName"])
        assert node is not None
        runtime = node["status"]["nodeInfo"]["containerRuntimeVersion"]
        assert runtime.startswith("containerd://2."), (pod["metadata"]["name"], runtime)
        images = {c["image"] for c in pod["spec"]["containers"]}
        assert images == {IMAGE}, (pod["metadata"]["name"], images)
        assert pod["status"]["phase"] == "Running", pod["metadata"]["name"]


def test_slurmctld_runs_as_the_images_user_with_its_state_on_a_bound_claim(
    kube: Kube, cluster: str
) -> None:
    processes = [
        line.split(None, 1) for line in in_ctld(cluster, "ps", "-eo", "uid=,args=").splitlines()
    ]
    daemons = [uid for uid, args in processes if args.split()[0].rsplit("/", 1)[-1] == "slurmctld"]
    assert daemons == [SLURM_UID], processes
    claim = kube.get("v1", "PersistentVolumeClaim", f"state-{CTLD}", namespace=cluster)
    assert claim is not None and claim["status"]["phase"] == "Bound", claim
    state = in_ctld(cluster, "stat", "-c", "%u", "/var/spool/slurmctld").strip()
    assert state == SLURM_UID
    assert "/var/spool/slurmctld" in in_ctld(cluster, "df", "/var/spool/slurmctld")


def test_a_node_named_with_dots_registers_under_its_name(
    kube: Kube, cluster: str, real_nodes: list[RealNode]
) -> None:
    dotted = [n.name for n in real_nodes if "." in n.name]
    assert dotted, "the real fleet has no dotted node name"
    listed = in_ctld(cluster, "sinfo", "-h", "-N", "-o", "%N %T").split("\n")
    states = dict(line.split() for line in listed if line.strip())
    for name in dotted:
        assert states.get(name) == "idle", states
        pods = kube.list("v1", "Pod", namespace=cluster, label_selector=f"{NODE_LABEL}={name}")
        assert [p["spec"]["nodeName"] for p in pods] == [name], pods
        assert "." not in pods[0]["spec"]["hostname"], pods[0]["spec"]["hostname"]


def restapi_pods(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    """slurmrestd's pods that are not on their way out (a roll's old pod lingers)."""
    pods = kube.list("v1", "Pod", namespace=namespace, label_selector=RESTD)
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def test_slurmrestd_answers_only_over_tls_for_its_services_name(kube: Kube, cluster: str) -> None:
    """docs/security.md, "slurmrestd over TLS": the operator's certificate, its CA in
    the Secret, verified for the Service's name while dialling the pod's IP."""
    (pod,) = restapi_pods(kube, cluster)
    names = ClusterNames(CLUSTER, cluster)
    tls = kube.get("v1", "Secret", names.restapi_tls, namespace=cluster)
    auth = kube.get("v1", "Secret", names.auth, namespace=cluster)
    assert tls is not None and auth is not None
    assert tls["type"] == "kubernetes.io/tls"
    ca, key = (base64.b64decode(s["data"][k]) for s, k in ((tls, "ca.crt"), (auth, "jwt.key")))
    address = f"{pod['status']['podIP']}:6820"
    server = names.restapi_dns_names[-1]
    with RestClient(f"https://{address}", jwt_key=key, ca_pem=ca, server_name=server) as client:
        assert any(ping.responding for ping in client.ping())
    wrong_name = RestClient(
        f"https://{address}", jwt_key=key, ca_pem=ca, server_name="elsewhere", attempts=1
    )
    plain = RestClient(f"http://{address}", jwt_key=key, attempts=1)
    for client in (wrong_name, plain):
        with client, pytest.raises(SlurmUnreachable):
            client.ping()


def test_a_certificate_that_ends_soon_is_renewed_and_slurmrestd_rolls_onto_it(
    kube: Kube, cluster: str
) -> None:
    """The operator's own certificate, 30 days before its end (plan/cluster.py): a new
    one, `ca.crt` holding the new CA and the one before it, the pods rolled."""
    names = ClusterNames(CLUSTER, cluster)
    start = dt.datetime.now(dt.UTC) - VALIDITY + dt.timedelta(days=10)
    ending = issue_server_certificate(names.restapi_dns_names, now=start)
    data = {"ca.crt": ending.ca_pem, "tls.crt": ending.cert_pem, "tls.key": ending.key_pem}
    encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
    kube.patch("v1", "Secret", names.restapi_tls, {"data": encoded}, namespace=cluster)

    def renewed(secret: dict[str, Any]) -> bool:
        cert = base64.b64decode(secret["data"]["tls.crt"])
        ca = base64.b64decode(secret["data"]["ca.crt"])
        return cert != ending.cert_pem and ca.endswith(ending.ca_pem)

    # The next reconcile (the 30 s resync at the latest) renews it.
    secret = wait_for(
        kube, "v1", "Secret", names.restapi_tls, renewed, namespace=cluster, timeout=120,
        what="renewed",
    )  # fmt: skip
    cert = base64.b64decode(secret["data"]["tls.crt"])
    ca = base64.b64decode(secret["data"]["ca.crt"])
    digest = hashlib.sha256(cert).hexdigest()[:16]

    def rolled(deployment: dict[str, Any]) -> bool:
        template = deployment["spec"]["template"]["metadata"].get("annotations") or {}
        status = deployment.get("status") or {}
        # Until the controller observed the new template, status still counts the old pods.
        return (
            template.get("slurmkube.io/restapi-tls") == digest
            and status.get("observedGeneration") == deployment["metadata"].get("generation")
            and status.get("updatedReplicas") == status.get("readyReplicas") == 1
            and status.get("replicas") == 1
        )

    wait_for(
        kube, "apps/v1", "Deployment", names.restapi, rolled, namespace=cluster, timeout=180,
        what="rolled onto the new certificate",
    )  # fmt: skip

    def on_new_certificate(pod: dict[str, Any]) -> bool:
        annotations = pod["metadata"].get("annotations") or {}
        conditions = (pod.get("status") or {}).get("conditions") or []
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return ready and annotations.get("slurmkube.io/restapi-tls") == digest

    (pod,) = eventually(
        "slurmrestd's pod ready on the new certificate",
        lambda: [p for p in restapi_pods(kube, cluster) if on_new_certificate(p)],
        lambda pods: len(pods) == 1, timeout=60,
    )  # fmt: skip
    auth = kube.get("v1", "Secret", names.auth, namespace=cluster)
    assert auth is not None
    key = base64.b64decode(auth["data"]["jwt.key"])
    url = f"https://{pod['status']['podIP']}:6820"
    server = names.restapi_dns_names[-1]
    with RestClient(url, jwt_key=key, ca_pem=first_certificate(ca), server_name=server) as c:
        assert any(ping.responding for ping in c.ping())


def test_a_segment_gang_job_runs_across_both_nvlink_domains_with_the_gpus(
    cluster: str, real_nodes: list[RealNode]
) -> None:
    count = len(real_nodes)
    out = in_ctld(
        cluster, "srun", f"-N{count}", "--segment=2", "--gres=gpu:4", "-t", "2",
        "bash", "-c", 'echo "$SLURMD_NODENAME $(ls /dev/nvidia[0-9]* | wc -l)"',
    )  # fmt: skip
    lines = sorted(line.split() for line in out.strip().split("\n"))
    assert lines == sorted([n.name, "4"] for n in real_nodes), out


def test_a_partition_change_reaches_slurmctld_through_the_reloader(
    kube: Kube, cluster: str
) -> None:
    def backstops() -> int:
        events = kube.list("v1", "Event", namespace=cluster)
        return sum(e.get("count", 1) for e in events if e.get("reason") == "Reconfigured")

    before = backstops()
    changed = time.monotonic()
    kube.patch(
        API, "SlurmCluster", CLUSTER,
        {"spec": {"partitions": [
            {"name": "gpu", "nodeSets": ["gpu"], "default": True, "maxTime": "3:00:00"}
        ]}},
        namespace=cluster,
    )  # fmt: skip
    deadline = changed + 90
    while "MaxTime=03:00:00" not in in_ctld(cluster, "scontrol", "show", "partition", "gpu"):
        if time.monotonic() > deadline:
            seen = kube.get(API, "SlurmCluster", CLUSTER, namespace=cluster)
            log = kubectl("logs", "-n", cluster, CTLD, "-c", "config-reloader")
            raise AssertionError(
                f"the partition change never reached slurmctld: {seen and seen.get('status')}\n"
                f"reloader: {log}"
            )
        time.sleep(0.5)
    print(f"\npartition change -> slurmctld: {time.monotonic() - changed:.1f}s")
    wait_for(
        kube, API, "SlurmCluster", CLUSTER,
        lambda o: has_condition(o, "ConfigApplied") and has_condition(o, "Ready"),
        namespace=cluster, timeout=90,
    )  # fmt: skip
    reloader = kubectl("logs", "-n", cluster, CTLD, "-c", "config-reloader")
    assert re.search(r"reconfigured config-hash=", reloader), reloader
    assert backstops() == before, "the operator's backstop reconfigure ran"


def test_a_node_moved_to_another_leaf_switch_moves_in_slurm_without_a_reconfigure(
    kube: Kube, cluster: str, real_nodes: list[RealNode]
) -> None:
    """Slurm 26.05 takes a relabel within the topology's frame live (render/
    live_topology.py): the leaf switches exist, so the operator moves the node
    (`POST /nodes/` `topology_str`) and the config reloader does not reconfigure."""
    domains: dict[str, list[str]] = {}
    for node in real_nodes:
        labels = (kube.get("v1", "Node", node.name) or {})["metadata"]["labels"]
        domains.setdefault(labels[wk.LABEL_GPU_CLIQUE], []).append(node.name)
    (first, *_), (second, *_) = sorted(sorted(n) for n in domains.values())
    leaf_of = {n: "e2e-la" for n in domains[_clique_of(domains, first)]}
    leaf_of |= {n: "e2e-lb" for n in domains[_clique_of(domains, second)]}

    def label(nodes: dict[str, str | None]) -> None:
        for name, leaf in nodes.items():
            tiers = {wk.LABEL_LEAF: leaf, wk.LABEL_SPINE: leaf and "e2e-s"}
            kube.patch("v1", "Node", name, {"metadata": {"labels": tiers}})

    def leaves() -> dict[str, frozenset[str]]:
        try:
            shown = in_ctld(cluster, "scontrol", "show", "topology", "network")
        except KubectlError:  # no `network` topology before the reconfigure
            return {}
        return {n: r.nodes for n, r in parse_topology(shown).items() if n.startswith("e2e-l")}

    def reloads() -> int:
        return kubectl("logs", "-n", cluster, CTLD, "-c", "config-reloader").count(
            "reconfigured config-hash="
        )

    def until(want: dict[str, set[str]], what: str) -> float:
        began, deadline = time.monotonic(), time.monotonic() + 90
        while (seen := leaves()) != want:
            assert time.monotonic() < deadline, f"{what}: {seen}, want {want}"
            time.sleep(0.2)
        return time.monotonic() - began

    try:
        label(dict(leaf_of))
        # New switches: a new frame, which the reloader's reconfigure brings in.
        until({"e2e-la": set(domains[_clique_of(domains, first)]),
               "e2e-lb": set(domains[_clique_of(domains, second)])}, "tiers labelled")  # fmt: skip
        before = reloads()
        label({first: "e2e-lb"})
        moved = dict(leaf_of, **{first: "e2e-lb"})
        took = until(
            {leaf: {n for n, lf in moved.items() if lf == leaf} for leaf in ("e2e-la", "e2e-lb")},
            "the node moved",
        )
        print(f"\nleaf label -> scontrol show topology: {took:.1f}s")
        time.sleep(2)  # a reconfigure would follow the files within a second
        assert reloads() == before, "a reconfigure ran for a move within the frame"
        # The tiers go, and with them the switch slurmctld 26.05 keeps the moved
        # node in (its saved Topology=): the operator settles it before the files
        # change, so the reconfigure's new slurmctld starts.
        restarts = _ctld_restarts(kube, cluster)
        label(dict.fromkeys(leaf_of))
        deadline = time.monotonic() + 90
        while reloads() == before or "network" in _topoconf(cluster):
            assert time.monotonic() < deadline, "the tiers' removal never reached slurmctld"
            time.sleep(0.5)
        time.sleep(3)  # a slurmctld that cannot start exits within a second or two
        assert "UP" in in_ctld(cluster, "scontrol", "ping")
        assert _ctld_restarts(kube, cluster) == restarts
    finally:
        label(dict.fromkeys(leaf_of))


def _topoconf(namespace: str) -> str:
    try:
        return in_ctld(namespace, "scontrol", "show", "topoconf")
    except KubectlError:  # slurmctld between two processes
        return "network"


def _ctld_restarts(kube: Kube, namespace: str) -> int:
    pod = kube.get("v1", "Pod", CTLD, namespace=namespace) or {}
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(c.get("restartCount", 0)) for c in statuses if c.get("name") == "slurmctld")


def _clique_of(domains: dict[str, list[str]], node: str) -> str:
    return next(clique for clique, nodes in domains.items() if node in nodes)


def test_a_job_outlives_its_slurmctld_pod(kube: Kube, cluster: str) -> None:
    # The new slurmctld pod is Ready seconds after the old one is deleted (printed
    # below; 2-3 s on an idle host): 25 s keeps the job running well past it.
    job = in_ctld(cluster, "sbatch", "--parsable", "-N2", "--wrap", "sleep 25").strip()
    deadline = time.monotonic() + 60
    while "JobState=RUNNING" not in in_ctld(cluster, "scontrol", "show", "job", job):
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(1)
    old = kube.get("v1", "Pod", CTLD, namespace=cluster)
    assert old is not None
    deleted = time.monotonic()
    kube.delete("v1", "Pod", CTLD, cluster)
    wait_for(
        kube, "v1", "Pod", CTLD,
        lambda p: p["metadata"]["uid"] != old["metadata"]["uid"]
        and bool(statuses := p.get("status", {}).get("containerStatuses"))
        and all(c.get("ready") for c in statuses),
        namespace=cluster, timeout=180,
    )  # fmt: skip
    print(f"\nslurmctld pod deleted -> the new pod Ready: {time.monotonic() - deleted:.1f}s")
    deadline = time.monotonic() + 180
    while True:
        shown = in_ctld(cluster, "scontrol", "show", "job", job)
        if "JobState=COMPLETED" in shown:
            break
        assert "JobState=RUNNING" in shown or "JobState=COMPLETING" in shown, shown
        assert time.monotonic() < deadline, shown
        time.sleep(2)
    assert sacct_state(partial(in_ctld, cluster), job) == "COMPLETED"
