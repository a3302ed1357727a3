"""Login pods: users, the client commands and sackd, which alone holds the key (pure).

auth/slurm clients never read slurm.key: they ask a sack socket to sign for them
(`/run/slurm/sack.socket` first; src/common/sack_api.c), and sackd signs for the
uid the socket's peer has (SO_PEERCRED, src/plugins/auth/slurm/sack.c). So the
key is mounted into the sackd container only, and every other container of the
pod sees sackd's /run/slurm read-only: the socket to connect to and the config
sackd fetched (configless), nothing to replace. The container `kubectl exec`
lands in (`login`, the default) runs as an unprivileged uid.

With `spec.login.ldap`, users log in over ssh as themselves: sssd resolves and
authenticates them against LDAP, sshd (root, the only way to become a user) runs
their shells, and sackd, with AuthInfo=use_client_ids, puts the user's name and
groups it resolved through the same sssd into the credential, so slurmd needs
no LDAP.
"""

from __future__ import annotations

from typing import Final

from slurmkube.api import well_known as wk
from slurmkube.api.login import LdapSpec
from slurmkube.api.models import SlurmCluster
from slurmkube.build.names import SLURM_GID, Manifest, names_of
from slurmkube.build.pod import (
    SACK_ENV,
    SLURM_KEY,
    cluster_service,
    daemon_container,
    deployment,
    exec_readiness,
    slurm_etc,
    tcp_readiness,
)
from slurmkube.build.sssd import (
    LDAP_BIND_DIR,
    LDAP_BIND_KEY,
    LDAP_CA_DIR,
    LDAP_CA_KEY,
    SSSD_CONF,
    SSSD_CONF_DIR,
)

# `nobody` in Debian: owns nothing, in no group of the image.
LOGIN_UID: Final = 65534
SSH_PORT: Final = 22
RUN_SLURM: Final = {"name": "run-slurm", "mountPath": "/run/slurm"}
# sssd's sockets (nss, pam) and its memory cache, shared with whoever resolves users.
SSS_MOUNTS: Final = (
    {"name": "sss-pipes", "mountPath": "/var/lib/sss/pipes"},
    {"name": "sss-mc", "mountPath": "/var/lib/sss/mc"},
)
SSHD_CAPABILITIES: Final = (
    "AUDIT_WRITE",
    "CHOWN",
    "KILL",
    "NET_BIND_SERVICE",
    "SETGID",
    "SETUID",
    "SYS_CHROOT",
)
_NO_ESCALATION: Final = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _user_side(cluster: SlurmCluster, name: str, args: list[str], image: str | None) -> Manifest:
    """A container with the client commands and sackd's socket, no key."""
    container = daemon_container(cluster, name, args, [], image=image)
    del container["readinessProbe"], container["ports"]
    # Clients find sackd's fetched config under /run/slurm/conf themselves.
    del container["env"]
    container["volumeMounts"] = [{**RUN_SLURM, "readOnly": True}]
    return container


def _login(cluster: SlurmCluster, image: str | None) -> Manifest:
    # The image's entrypoint role `sleep` (images/slurm/entrypoint.sh) checks the uid.
    container = _user_side(cluster, "login", ["sleep", "infinity"], image)
    container["securityContext"] = {
        "runAsUser": LOGIN_UID,
        "runAsGroup": LOGIN_UID,
        "runAsNonRoot": True,
        **_NO_ESCALATION,
    }
    return container


def _sackd(cluster: SlurmCluster, image: str | None) -> Manifest:
    names = names_of(cluster)
    container = daemon_container(
        cluster,
        "sackd",
        ["sackd", "-D", "--conf-server", f"{names.controller_fqdn}:{wk.SLURMCTLD_PORT}"],
        [],
        image=image,
    )
    del container["readinessProbe"], container["ports"]
    container["env"] = list(SACK_ENV)
    # sackd caches the fetched config in /run/slurm/conf and serves its socket
    # from /run/slurm, but creates neither parent: without it, it exits at once
    # ("failed to create a clean cache dir").
    container["volumeMounts"].append(dict(RUN_SLURM))
    container["securityContext"] = dict(_NO_ESCALATION)
    return container


def _sssd(ldap: LdapSpec, image: str | None, cluster: SlurmCluster) -> Manifest:
    container = daemon_container(cluster, "sssd", ["sssd"], [], image=image)
    del container["ports"]
    container["env"] = [{"name": "SLURMKUBE_SSSD_CONF", "value": f"{SSSD_CONF_DIR}/{SSSD_CONF}"}]
    mounts = [{"name": "sssd-conf", "mountPath": SSSD_CONF_DIR, "readOnly": True}, *SSS_MOUNTS]
    if ldap.ca_config_map:
        mounts.append({"name": "ldap-ca", "mountPath": LDAP_CA_DIR, "readOnly": True})
    if ldap.bind_password_secret:
        mounts.append({"name": "ldap-bind", "mountPath": LDAP_BIND_DIR, "readOnly": True})
        path = f"{LDAP_BIND_DIR}/{LDAP_BIND_KEY}"
        container["env"].append({"name": "SLURMKUBE_LDAP_BIND_PASSWORD_FILE", "value": path})
    container["volumeMounts"] = mounts
    container["readinessProbe"] = exec_readiness("test", "-S", "/var/lib/sss/pipes/nss")
    container["securityContext"] = {"runAsUser": 0, "runAsGroup": 0}
    return container


def _sshd(cluster: SlurmCluster, image: str | None) -> Manifest:
    container = _user_side(cluster, "sshd", ["sshd"], image)
    container["ports"] = [{"name": "ssh", "containerPort": SSH_PORT, "protocol": "TCP"}]
    container["readinessProbe"] = tcp_readiness(SSH_PORT)
    # Root, as it becomes each user; with only the capabilities that takes: a
    # session's ids (SETUID, SETGID), its pty and home (CHOWN, pam_mkhomedir),
    # the privilege-separated child (SYS_CHROOT), port 22, the login record,
    # ending sessions. No DAC_OVERRIDE: root here reads only what root owns.
    container["securityContext"] = {
        "runAsUser": 0,
        "runAsGroup": 0,
        "capabilities": {"drop": ["ALL"], "add": list(SSHD_CAPABILITIES)},
    }
    return container


def _ldap_volumes(ldap: LdapSpec, cluster: SlurmCluster) -> list[Manifest]:
    names = names_of(cluster)
    volumes: list[Manifest] = [
        {"name": "sssd-conf", "configMap": {"name": names.login_sssd, "defaultMode": 0o444}},
        {"name": "sss-pipes", "emptyDir": {"medium": "Memory"}},
        {"name": "sss-mc", "emptyDir": {"medium": "Memory"}},
    ]
    if ldap.ca_config_map:
        items = [{"key": LDAP_CA_KEY, "path": LDAP_CA_KEY}]
        volumes.append(
            {"name": "ldap-ca", "configMap": {"name": ldap.ca_config_map, "items": items}}
        )
    if ldap.bind_password_secret:
        items = [{"key": LDAP_BIND_KEY, "path": LDAP_BIND_KEY}]
        secret = {"secretName": ldap.bind_password_secret, "items": items, "defaultMode": 0o400}
        volumes.append({"name": "ldap-bind", "secret": secret})
    return volumes


def login_deployment(cluster: SlurmCluster, image: str | None = None) -> Manifest:
    """The login Deployment; `image` is the one a Slurm upgrade's step allows."""
    names = names_of(cluster)
    ldap = cluster.spec.login.ldap
    # `login` first: it is where `kubectl exec` lands. sackd after the containers that
    # mount /run/slurm read-only (the local e2e runtime merges a pod's mounts in order).
    containers = [_login(cluster, image)]
    volumes = [
        slurm_etc(cluster, keys=[SLURM_KEY], config=False),
        {"name": "run-slurm", "emptyDir": {"medium": "Memory"}},
    ]
    if ldap:
        containers += [_sshd(cluster, image), _sssd(ldap, image, cluster)]
        volumes += _ldap_volumes(ldap, cluster)
    # spec.login.resources: where the users' commands run.
    if resources := cluster.spec.login.resources.manifest():
        containers[1 if ldap else 0]["resources"] = resources
    containers.append(_sackd(cluster, image))
    if ldap:
        # Everyone resolves LDAP users through sssd's sockets; sackd for
        # use_client_ids (the peer's name and groups, fetch_identity).
        for container in containers:
            if container["name"] != "sssd":
                container["volumeMounts"] += list(SSS_MOUNTS)
    pod = {
        "containers": containers,
        "volumes": volumes,
        # The key's group (slurm_etc): sackd reads it as uid 401. Kubernetes gives
        # every container of the pod this group; none but sackd's mounts the key.
        "securityContext": {"fsGroup": SLURM_GID},
    }
    manifest = deployment(cluster, names.login, "sackd", cluster.spec.login.replicas, pod)
    template = manifest["spec"]["template"]
    template["metadata"]["annotations"] = {"kubectl.kubernetes.io/default-container": "login"}
    return manifest


def login_service(cluster: SlurmCluster) -> Manifest:
    """ssh to the login pods (only with `spec.login.ldap`)."""
    return cluster_service(cluster, names_of(cluster).login, "sackd", ("ssh", SSH_PORT))
