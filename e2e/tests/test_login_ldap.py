"""Users are themselves (docs/security.md, "Login pods"): an LDAP user logs in to a
login pod over ssh (sshd + sssd against a real slapd), her job runs as her uid and
groups, nobody in a login container can read the keys, and `kubectl exec` lands as
an unprivileged uid.

Needs real nodes (`make cluster-up REAL_NODES=2`): the containers of a pod must
have filesystems of their own (the key is mounted into sackd's only), and
`kubectl exec` needs a kubelet. slapd runs on the host, on the pod network's
bridge address, over ldaps with a CA of the run, and shows its entries only to
sssd's bind DN (whose password reaches only the sssd container, from a Secret);
ssh goes from the host to the login pod's address on that network.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurmkube_e2e.kube import Kube
from slurmkube_e2e.kubectl import KubectlError
from slurmkube_e2e.ldap import Directory, LdapUser, running_slapd
from slurmkube_e2e.pod_exec import kubectl_exec
from slurmkube_e2e.real_cluster import API, ON_REAL, TOLERATE, real_node_set
from slurmkube_e2e.realnode_config import RealNode
from slurmkube_e2e.waiting import has_condition, wait_for, wait_for_list, wait_gone

pytestmark = pytest.mark.e2e

CLUSTER = "users"
# Both supported releases: AuthInfo=use_client_ids and the sack socket as 24.11
# and 26.05 have them, and each image's own sssd (trixie's, sid's).
IMAGES = {"26.05": "localhost/slurmkube/slurm:26.05", "24.11": "localhost/slurmkube/slurm:24.11"}
ALICE = LdapUser("alice", 10001, 10001, "alice-in-ldap")
# LDAP naming SlurmUser's uid: min_id keeps her out of every login pod.
MALLORY = LdapUser("mallory", 401, 401, "mallory-in-ldap")
GPU_USERS = ("gpu-users", 10100)
KEYS = ("/etc/slurm/slurm.key", "/etc/slurm/jwt.key")


def cluster_docs(namespace: str, directory: Directory, image: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "ldap-ca", "namespace": namespace},
            "data": {"ca.crt": directory.ca_pem},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "ldap-bind", "namespace": namespace},
            "stringData": {"password": directory.bind_password},
        },
        {
            "apiVersion": API,
            "kind": "SlurmCluster",
            "metadata": {"name": CLUSTER, "namespace": namespace},
            "spec": {
                "image": image,
                "controller": {"nodeSelector": ON_REAL, "tolerations": TOLERATE},
                "login": {
                    "replicas": 1,
                    "ldap": {
                        "uri": directory.uri,
                        "baseDN": directory.base_dn,
                        "caConfigMap": "ldap-ca",
                        "bindDN": directory.bind_dn,
                        "bindPasswordSecret": "ldap-bind",
                    },
                },
                "deletionPolicy": "Delete",
                "partitions": [{"name": "gpu", "nodeSets": ["gpu"], "default": True}],
            },
        },
        real_node_set(namespace, CLUSTER, 1),
    ]


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Directory]:
    users = (ALICE, MALLORY)
    groups: dict[str, tuple[int, tuple[str, ...]]] = {GPU_USERS[0]: (GPU_USERS[1], (ALICE.name,))}
    with running_slapd(Path(tmp_path_factory.mktemp("slapd")), users, groups) as d:
        yield d


@pytest.fixture(scope="module", params=list(IMAGES))
def login_pod(
    request: pytest.FixtureRequest,
    kube: Kube,
    operator: None,
    real_nodes: list[RealNode],
    directory: Directory,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(namespace, the Ready login pod) of a Ready cluster on the real nodes, one per
    Slurm release."""
    series = str(request.param)
    namespace = f"e2e-login-ldap-{series.replace('.', '')}-{int(time.time()) % 100000}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_for(kube, "v1", "ServiceAccount", "default", lambda _: True, namespace=namespace)
    started = time.monotonic()
    try:
        for doc in cluster_docs(namespace, directory, IMAGES[series]):
            kube.apply(doc)
        wait_for(
            kube, API, "SlurmCluster", CLUSTER, lambda o: has_condition(o, "Ready"),
            namespace=namespace, timeout=300,
        )  # fmt: skip
        (pod,) = wait_for_list(
            kube,
            "v1",
            "Pod",
            lambda pods: len(pods) == 1 and has_condition(pods[0], "Ready"),
            namespace=namespace,
            label_selector="app.kubernetes.io/name=sackd",
            timeout=180,
        )
        print(f"\n{series}: cluster and login pod Ready in {time.monotonic() - started:.1f}s")
        yield namespace, pod
    finally:
        kube.delete(API, "SlurmCluster", CLUSTER, namespace)
        wait_gone(kube, API, "SlurmCluster", CLUSTER, namespace=namespace, timeout=180)
        kube.delete("v1", "Namespace", namespace)


def ssh(
    pod: dict[str, Any], user: LdapUser, command: str, tmp: Path
) -> subprocess.CompletedProcess[str]:
    """`command` in a login shell of `user` on the pod, through sshd's password
    prompt (answered by SSH_ASKPASS): authenticated by pam_sss against slapd."""
    askpass = tmp / f"askpass-{user.name}"
    askpass.write_text(f"#!/bin/sh\necho '{user.password}'\n")
    askpass.chmod(0o700)
    env = dict(os.environ, SSH_ASKPASS=str(askpass), SSH_ASKPASS_REQUIRE="force", DISPLAY=":0")
    argv = [
        "ssh", "-F", "/dev/null", "-o", "StrictHostKeyChecking=no",
        "-o", f"UserKnownHostsFile={tmp / 'known_hosts'}", "-o", "PubkeyAuthentication=no",
        "-o", "PreferredAuthentications=keyboard-interactive,password",
        "-o", "NumberOfPasswordPrompts=1", "-o", "ConnectTimeout=10",
        f"{user.name}@{pod['status']['podIP']}", command,
    ]  # fmt: skip
    return subprocess.run(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def ids(text: str) -> tuple[int, set[int]]:
    """uid and groups from `id`'s output."""
    uid = re.search(r"uid=(\d+)", text)
    groups = re.search(r"groups=(\S+)", text)
    assert uid and groups, text
    return int(uid.group(1)), {int(g.split("(")[0]) for g in groups.group(1).split(",")}


def test_alice_logs_in_over_ssh_and_her_jobs_run_as_her(
    login_pod: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    _, pod = login_pod
    started = time.monotonic()
    done = ssh(pod, ALICE, "id; pwd", tmp_path)
    assert done.returncode == 0, done.stderr
    print(f"ssh login as alice in {time.monotonic() - started:.1f}s: {done.stdout.strip()}")
    assert ids(done.stdout) == (ALICE.uid, {ALICE.gid, GPU_USERS[1]})
    # pam_mkhomedir made her home (sshd keeps CHOWN, not DAC_OVERRIDE).
    assert done.stdout.split()[-1] == f"/home/{ALICE.name}", done.stdout
    # A step through srun, and a batch job whose output the job's user wrote.
    script = (
        "set -e; srun --chdir=/tmp -N1 id; "
        "job=$(sbatch --parsable --chdir=/tmp -o /tmp/job-%j.out --wait --wrap id); "
        "scontrol show job $job | grep -o 'UserId=[^ ]*'; "
        "srun --chdir=/tmp -N1 cat /tmp/job-$job.out"
    )
    started = time.monotonic()
    done = ssh(pod, ALICE, script, tmp_path)
    assert done.returncode == 0, (done.stdout, done.stderr)
    print(f"srun + sbatch --wait as alice in {time.monotonic() - started:.1f}s:\n{done.stdout}")
    step, user, batch = done.stdout.strip().splitlines()[-3:]
    assert ids(step) == (ALICE.uid, {ALICE.gid, GPU_USERS[1]})
    assert ids(batch) == (ALICE.uid, {ALICE.gid, GPU_USERS[1]})
    assert user == f"UserId=alice({ALICE.uid})"


def test_slurm_user_root_and_ldap_system_ids_cannot_log_in(
    login_pod: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    namespace, pod = login_pod
    for who in (MALLORY, LdapUser("slurm", 401, 401, MALLORY.password)):
        done = ssh(pod, who, "id", tmp_path)
        assert done.returncode == 255, (who.name, done.stdout, done.stderr)
    name = pod["metadata"]["name"]
    with pytest.raises(KubectlError):
        kubectl_exec(namespace, name, "getent", "passwd", MALLORY.name, container="login")
    assert kubectl_exec(namespace, name, "getent", "passwd", ALICE.name, container="login")


def test_no_login_container_can_read_a_key_and_exec_lands_unprivileged(
    login_pod: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    namespace, pod = login_pod
    name = pod["metadata"]["name"]
    # The default container (`kubectl exec` without -c).
    uid, groups = ids(kubectl_exec(namespace, name, "id"))
    assert uid not in (0, 401), uid
    print(f"kubectl exec lands as uid {uid}, groups {sorted(groups)}")
    for container in ("login", "sshd"):
        for key in KEYS:
            with pytest.raises(KubectlError):
                kubectl_exec(namespace, name, "cat", key, container=container)
    done = ssh(pod, ALICE, f"cat {' '.join(KEYS)}", tmp_path)
    assert done.returncode != 0 and "No such file" in done.stderr, done
    # Not vacuous: the key is there, in sackd's container only.
    kubectl_exec(namespace, name, "test", "-s", KEYS[0], container="sackd")
