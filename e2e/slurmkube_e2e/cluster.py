"""Bring the local control plane up, report on it, and take it down.

Order matters and each step waits for the previous one to be healthy: etcd,
kube-apiserver, bootstrap RBAC, controller-manager and scheduler, kwok, Kueue
(CRDs and webhooks first, then the process), then the simulated GPU fleet.
Every step is idempotent: a running, healthy component is left alone, so a
second `up` only checks. `down` stops by PID in reverse order, removes the etcd
data (each `up` starts an empty cluster) and verifies no port stays open.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from slurmkube_e2e import fleet, kueue, kwok, processes
from slurmkube_e2e.audit import audit_policy
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.kubectl import KubectlError, apply, kubectl
from slurmkube_e2e.layout import LOOPBACK, Layout, go_module_dir, read_versions

KUEUE_FRAMEWORKS = ("batch/job", "pod", "jobset.x-k8s.io/jobset")
COMPONENTS_GROUP = "slurmkube:components"
POD_CIDR = "127.1.0.0/16"
SERVICE_CIDR = "10.96.0.0/16"
# kwok renews each simulated node's Lease every quarter of this (as a kubelet
# does, 10 s). A 25,000-node fleet renews 2,500 Leases a second at 40 s, more
# than two cores' API server keeps up with: renewals come late, nodes flap
# NotReady, and what a bench measures is the test bed. Large-fleet benches pass
# a longer lease (`make cluster-up NODE_LEASE_SECONDS=1200`).
NODE_LEASE_SECONDS = 40


def node_monitor_grace(lease_seconds: int) -> int:
    """kube-controller-manager's grace before a silent node goes Unknown: its
    default 50 s at a 40 s lease, the lease and a renew interval beyond that."""
    return max(50, lease_seconds + lease_seconds // 4)


class ClusterError(RuntimeError):
    """A component did not become healthy; the message says which and shows its log."""


@dataclass(frozen=True)
class Component:
    process: processes.Process
    ready: Callable[[], bool]
    port: int


def _go_mod_dir(module: str, version: str) -> Path:
    path = go_module_dir(module, version)
    if not path.is_dir():
        raise ClusterError(
            f"{module}@{version} is not in the Go module cache ({path}); run `make cluster-build`"
        )
    return path


def _https_ok(url: str, context: ssl.SSLContext, expect: str = "ok") -> bool:
    try:
        with urllib.request.urlopen(url, context=context, timeout=3) as resp:
            return bool(resp.status == 200 and resp.read().decode().strip() == expect)
    except (OSError, urllib.error.URLError):
        return False


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _http_json_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return bool(json.loads(resp.read()).get("health") == "true")
    except (OSError, ValueError, urllib.error.URLError):
        return False


class LocalCluster:
    """The local control plane of one checkout (paths and ports from its Layout)."""

    def __init__(self, layout: Layout, node_lease_seconds: int = NODE_LEASE_SECONDS) -> None:
        self.layout = layout
        self.node_lease_seconds = node_lease_seconds
        self.versions = read_versions(layout.versions_file)
        self._admin_tls: ssl.SSLContext | None = None
        # kube-controller-manager and kube-scheduler serve /healthz with a
        # self-signed certificate they make at start; only liveness is read from it.
        self._selfsigned = ssl.create_default_context()
        self._selfsigned.check_hostname = False
        self._selfsigned.verify_mode = ssl.CERT_NONE

    # -- processes -------------------------------------------------------------

    def _proc(
        self, name: str, argv: list[str], env: dict[str, str] | None = None
    ) -> processes.Process:
        return processes.Process(
            name=name,
            argv=tuple(argv),
            pid_dir=self.layout.pids,
            log_dir=self.layout.logs,
            env=tuple(sorted((env or {}).items())),
        )

    def components(self) -> list[Component]:
        """All components in start order."""
        lay, ports, pki = self.layout, self.layout.ports, self.layout.pki
        k8s = str(lay.k8s_binary)

        def kubeconfig_flags(name: str) -> list[str]:
            path = lay.component_kubeconfig(name)
            return [
                f"--kubeconfig={path}",
                f"--authentication-kubeconfig={path}",
                f"--authorization-kubeconfig={path}",
            ]

        etcd = self._proc(
            "etcd",
            [
                k8s,
                "etcd",
                f"--data-dir={lay.etcd_data}",
                f"--listen-client-url=http://{LOOPBACK}:{ports.etcd_client}",
                f"--listen-peer-url=http://{LOOPBACK}:{ports.etcd_peer}",
            ],
        )
        apiserver = self._proc(
            "kube-apiserver",
            [
                k8s,
                "kube-apiserver",
                f"--etcd-servers=http://{LOOPBACK}:{ports.etcd_client}",
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                f"--secure-port={ports.apiserver}",
                # The kubernetes Service would get 127.0.0.1 as endpoint, which
                # Endpoints validation rejects; nothing here needs that Service.
                "--endpoint-reconciler-type=none",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
                # Real nodes' names resolve nowhere; their address is on the slot's bridge.
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                "--profiling=false",
                # The e2e operators' requests, judged against the chart's RBAC
                # after the suite (slurmkube_e2e/audit.py). One file for a whole
                # session: rotation only past 1 GiB, and then every backup is kept.
                f"--audit-policy-file={lay.config / 'audit-policy.yaml'}",
                f"--audit-log-path={lay.audit_log}",
                "--audit-log-maxsize=1024",
            ],
        )
        controller_manager = self._proc(
            "kube-controller-manager",
            [
                k8s,
                "kube-controller-manager",
                *kubeconfig_flags("kube-controller-manager"),
                f"--bind-address={LOOPBACK}",
                f"--secure-port={ports.controller_manager}",
                "--leader-elect=false",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=true",
                f"--cluster-signing-cert-file={pki / 'ca.crt'}",
                f"--cluster-signing-key-file={pki / 'ca.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--profiling=false",
                # PersistentVolumes for the runtime's pods: directories under
                # /tmp/hostpath_pv on this host (the in-tree provisioner's own base),
                # made on claim and removed with it (reclaim policy Delete).
                "--enable-hostpath-provisioner",
                # A node whose Lease was not renewed this long goes Unknown; kept
                # past the kwok renew interval (a quarter of the lease).
                f"--node-monitor-grace-period={node_monitor_grace(self.node_lease_seconds)}s",
            ],
        )
        scheduler = self._proc(
            "kube-scheduler",
            [
                k8s,
                "kube-scheduler",
                *kubeconfig_flags("kube-scheduler"),
                f"--bind-address={LOOPBACK}",
                f"--secure-port={ports.scheduler}",
                "--leader-elect=false",
                "--profiling=false",
            ],
        )
        kwok_proc = self._proc(
            "kwok",
            [
                str(lay.bin / "kwok"),
                f"--kubeconfig={lay.component_kubeconfig('kwok')}",
                f"--config={lay.config / 'kwok.yaml'}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector="
                f"{fleet.KWOK_ANNOTATION}={fleet.KWOK_ANNOTATION_VALUE}",
                # Pod and node addresses are status only; loopback keeps any
                # accidental connection to them on this machine.
                f"--cidr={POD_CIDR}",
                f"--node-ip={LOOPBACK}",
                f"--node-lease-duration-seconds={self.node_lease_seconds}",
                f"--server-address={LOOPBACK}:{ports.kwok}",
            ],
        )
        kueue_proc = self._proc(
            "kueue",
            [
                str(lay.bin / "kueue"),
                f"--config={lay.config / 'kueue.yaml'}",
                "--zap-log-level=info",
            ],
            env={"KUBECONFIG": str(lay.component_kubeconfig("kueue"))},
        )
        base = f"https://{LOOPBACK}"
        return [
            Component(
                etcd,
                lambda: _http_json_ok(f"http://{LOOPBACK}:{ports.etcd_client}/health"),
                ports.etcd_client,
            ),
            Component(apiserver, lambda: self._api_ok("/readyz"), ports.apiserver),
            Component(
                controller_manager,
                lambda: _https_ok(f"{base}:{ports.controller_manager}/healthz", self._selfsigned),
                ports.controller_manager,
            ),
            Component(
                scheduler,
                lambda: _https_ok(f"{base}:{ports.scheduler}/healthz", self._selfsigned),
                ports.scheduler,
            ),
            Component(
                kwok_proc, lambda: _http_ok(f"http://{LOOPBACK}:{ports.kwok}/healthz"), ports.kwok
            ),
            Component(
                kueue_proc,
                lambda: _http_ok(f"http://{LOOPBACK}:{ports.kueue_health}/readyz"),
                ports.kueue_webhook,
            ),
        ]

    def _api_ok(self, path: str) -> bool:
        if self._admin_tls is None:
            pki = self.layout.pki
            self._admin_tls = ssl.create_default_context(cafile=str(pki / "ca.crt"))
            self._admin_tls.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return _https_ok(f"{self.layout.apiserver_url}{path}", self._admin_tls)

    # -- up ----------------------------------------------------------------------

    def up(self, spec: fleet.FleetSpec, timeout: float = 120) -> None:
        """Start whatever is not running, wait for each part, apply the fleet."""
        started = time.monotonic()
        self._check_binaries()
        self._write_pki()
        self._write_kwok_config()
        self._write_audit_policy()
        by_name = {c.process.name: c for c in self.components()}
        for name in ("etcd", "kube-apiserver"):
            self._ensure(by_name[name], timeout)
        self._bootstrap()
        for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
            self._ensure(by_name[name], timeout)
        self._install_kueue_manifests()
        self._write_kueue_config()
        self._ensure(by_name["kueue"], timeout)
        self._wait_for_kueue_webhooks(timeout)
        names = apply_fleet(self.layout.kubeconfig, spec)
        wait_nodes_ready(self.layout.kubeconfig, names, timeout)
        print(
            f"fleet {spec.name}: {len(names)} Ready kwok nodes "
            f"({spec.nvl_domains} NVLink domains x {spec.nodes_per_domain} nodes"
            f" x {spec.gpus} GPUs)"
        )
        print(
            f"cluster up in {time.monotonic() - started:.1f}s; "
            f"export KUBECONFIG={self.layout.kubeconfig}"
        )
        self.print_versions()

    def _check_binaries(self) -> None:
        missing = [
            str(p)
            for p in (
                self.layout.k8s_binary,
                self.layout.kubectl,
                *(self.layout.bin / t for t in ("kwok", "kueue", "helm")),
            )
            if not p.exists()
        ]
        if missing:
            raise ClusterError(f"missing binaries {missing}; run `make cluster-build` first")

    def _write_pki(self) -> None:
        subprocess.run(
            [
                str(self.layout.k8s_binary),
                "pki",
                f"--dir={self.layout.pki}",
                f"--server={self.layout.apiserver_url}",
            ],
            check=True,
        )
        shutil.copyfile(self.layout.component_kubeconfig("admin"), self.layout.kubeconfig)
        self.layout.kubeconfig.chmod(0o600)
        # Kueue's webhook server reads tls.crt/tls.key from one folder, where
        # a pod would have its Secret mounted; we put the same files there.
        certs = self.layout.pki / "kueue-webhook"
        certs.mkdir(exist_ok=True)
        shutil.copyfile(self.layout.pki / "kueue-webhook.crt", certs / "tls.crt")
        shutil.copyfile(self.layout.pki / "kueue-webhook.key", certs / "tls.key")

    def _write_kwok_config(self) -> None:
        module = _go_mod_dir("sigs.k8s.io/kwok", self.versions["KWOK_VERSION"])
        self.layout.config.mkdir(parents=True, exist_ok=True)
        (self.layout.config / "kwok.yaml").write_text(
            kwok.render_stages(module / "kustomize/stage")
        )

    def _write_audit_policy(self) -> None:
        self.layout.audit_log.parent.mkdir(parents=True, exist_ok=True)
        (self.layout.config / "audit-policy.yaml").write_text(yaml.safe_dump(audit_policy()))

    def _write_kueue_config(self) -> None:
        ports = self.layout.ports
        config = kueue.render_configuration(
            webhook_port=ports.kueue_webhook,
            cert_dir=self.layout.pki / "kueue-webhook",
            metrics_address=f"{LOOPBACK}:{ports.kueue_metrics}",
            health_address=f"{LOOPBACK}:{ports.kueue_health}",
            frameworks=KUEUE_FRAMEWORKS,
        )
        (self.layout.config / "kueue.yaml").write_text(yaml.safe_dump(config, sort_keys=False))

    def _ensure(self, comp: Component, timeout: float) -> None:
        proc = comp.process
        pid = processes.running_pid(proc)
        if pid is not None and comp.ready():
            print(f"{proc.name}: running (pid {pid})")
            return
        if pid is None and processes.listening_ports([comp.port], LOOPBACK):
            raise ClusterError(
                f"{proc.name}: port {LOOPBACK}:{comp.port} is taken by a process this cluster "
                f"did not start; stop it or change the ports in {Layout.__module__}"
            )
        pid = processes.start(proc)
        deadline = time.monotonic() + timeout
        while not comp.ready():
            # By PID, not by running_pid(): right after fork the child's cmdline
            # is still ours until it execs.
            if not processes.alive(pid):
                raise ClusterError(
                    f"{proc.name} exited; last lines of {proc.log_file}:\n"
                    + processes.tail(proc.log_file)
                )
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"{proc.name} (pid {pid}) not ready after {timeout:.0f}s; "
                    f"last lines of {proc.log_file}:\n" + processes.tail(proc.log_file)
                )
            time.sleep(0.25)
        print(f"{proc.name}: started (pid {pid}, log {proc.log_file})")

    def restart(self, name: str, down_seconds: float = 0.0, timeout: float = 120) -> None:
        """Stop one component by PID, leave it down `down_seconds`, start it again
        and wait until it is ready (an API-server restart, for HA tests)."""
        comp = {c.process.name: c for c in self.components()}[name]
        processes.stop(comp.process)
        time.sleep(down_seconds)
        self._ensure(comp, timeout)

    def _kubectl(self, args: list[str], stdin: str | None = None) -> str:
        return kubectl(self.layout.kubectl, self.layout.kubeconfig, args, stdin=stdin)

    def _bootstrap(self) -> None:
        """RBAC for our helper processes (kwok, Kueue): they act cluster-wide, as their
        upstream deployments do, so the group gets cluster-admin."""
        apply(
            self.layout.kubectl,
            self.layout.kubeconfig,
            [
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": "slurmkube-e2e-components"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": "cluster-admin",
                    },
                    "subjects": [
                        {
                            "apiGroup": "rbac.authorization.k8s.io",
                            "kind": "Group",
                            "name": COMPONENTS_GROUP,
                        }
                    ],
                },
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": kueue.KUEUE_NAMESPACE},
                },
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "StorageClass",
                    "metadata": {
                        "name": "local-hostpath",
                        "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
                    },
                    "provisioner": "kubernetes.io/host-path",
                    "reclaimPolicy": "Delete",
                    "volumeBindingMode": "Immediate",
                },
            ],
        )

    def _install_kueue_manifests(self) -> None:
        kueue_dir = _go_mod_dir("sigs.k8s.io/kueue", self.versions["KUEUE_VERSION"])
        jobset_dir = _go_mod_dir("sigs.k8s.io/jobset", self.versions["JOBSET_VERSION"])
        pki = self.layout.pki
        ca = (pki / "kueue-ca.crt").read_bytes()
        base = f"https://{LOOPBACK}:{self.layout.ports.kueue_webhook}"
        crds = kueue.render_crds(kueue_dir / "config/components/crd", base, ca)
        # JobSet's CRD lets Kueue's jobset integration start; the JobSet
        # controller itself is not run (no pods are made from a JobSet here).
        for path in sorted((jobset_dir / "config/components/crd/bases").glob("*.yaml")):
            crds.extend(kueue.load_yaml_documents(path))
        apply(self.layout.kubectl, self.layout.kubeconfig, crds)
        self._kubectl(
            [
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                *(f"crd/{c['metadata']['name']}" for c in crds),
            ]
        )
        hooks = kueue.render_webhook_configurations(
            kueue.load_yaml_documents(kueue_dir / "config/components/webhook/manifests.yaml"),
            base,
            ca,
            KUEUE_FRAMEWORKS,
        )
        secret = kueue.render_cert_secret(
            ca,
            (pki / "kueue-ca.key").read_bytes(),
            (pki / "kueue-webhook.crt").read_bytes(),
            (pki / "kueue-webhook.key").read_bytes(),
        )
        apply(self.layout.kubectl, self.layout.kubeconfig, [*hooks, secret])

    def _wait_for_kueue_webhooks(self, timeout: float) -> None:
        """Kueue is ready when the API server can call its webhooks: a server-side
        dry-run create of a ResourceFlavor goes through both of them."""
        probe = yaml.safe_dump(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": "slurmkube-e2e-webhook-probe"},
            }
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._kubectl(["create", "--dry-run=server", "-f", "-"], stdin=probe)
                return
            except KubectlError as err:
                if time.monotonic() > deadline:
                    raise ClusterError(f"Kueue webhooks not reachable: {err}") from err
                time.sleep(0.5)

    # -- down --------------------------------------------------------------------

    def down(self) -> None:
        """Stop every component by PID (reverse start order), drop the etcd data
        and the audit log (e2e-local's last test has read it)."""
        comps = self.components()
        for comp in reversed(comps):
            pid = processes.stop(comp.process)
            print(f"{comp.process.name}: " + (f"stopped pid {pid}" if pid else "not running"))
        shutil.rmtree(self.layout.etcd_data, ignore_errors=True)
        shutil.rmtree(self.layout.audit_log.parent, ignore_errors=True)
        left = processes.listening_ports(list(self.layout.ports.all().values()), LOOPBACK)
        if left:
            raise ClusterError(f"ports still listening after cluster-down: {left}")
        print("cluster down; no cluster port is listening")

    # -- status ------------------------------------------------------------------

    def status(self) -> bool:
        """Print each component's PID and health; True if all are healthy."""
        healthy = True
        for comp in self.components():
            pid = processes.running_pid(comp.process)
            ready = pid is not None and comp.ready()
            healthy = healthy and ready
            state = "ready" if ready else ("running, not ready" if pid else "stopped")
            print(
                f"{comp.process.name:24} {state:20} pid={pid or '-':<8} port={LOOPBACK}:{comp.port}"
            )
        if healthy:
            self.print_versions()
            print(
                self._kubectl(
                    ["get", "nodes", "-L", fleet.CLIQUE_LABEL, "-L", fleet.RACK_LABEL]
                ).rstrip()
            )
        return healthy

    def print_versions(self) -> None:
        server = json.loads(self._kubectl(["version", "-o", "json"]))["serverVersion"]
        v = self.versions
        print(
            f"kubernetes {server['gitVersion']} (server), etcd {v['ETCD_VERSION']} (embedded), "
            f"kwok {v['KWOK_VERSION']}, kueue {v['KUEUE_VERSION']}, helm {v['HELM_VERSION']}, "
            f"jobset CRD {v['JOBSET_VERSION']}"
        )


def apply_fleet(kubeconfig: Path, spec: fleet.FleetSpec, prune: bool = True) -> list[str]:
    """Create or update the fleet's Node objects; delete nodes of this fleet the spec dropped.

    Nodes are created with their status (as a kubelet registers), and on update
    capacity/allocatable are patched through the status subresource.
    """
    kube = Kube(kubeconfig)
    existing = {
        n["metadata"]["name"]
        for n in kube.list("v1", "Node", label_selector=f"{fleet.FLEET_LABEL}={spec.name}")
    }
    wanted = fleet.manifests(spec)
    for node in wanted:
        name = node["metadata"]["name"]
        if name in existing:
            kube.patch("v1", "Node", name, {"metadata": node["metadata"]})
            resources = {k: node["status"][k] for k in ("capacity", "allocatable")}
            kube.patch_status("v1", "Node", name, {"status": resources})
        else:
            kube.create(node)
    names = [n["metadata"]["name"] for n in wanted]
    if prune:
        for name in sorted(existing - set(names)):
            kube.delete("v1", "Node", name)
    return names


def node_ready(node: dict[str, object]) -> bool:
    status = node.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions or [])


def wait_nodes_ready(kubeconfig: Path, names: list[str], timeout: float) -> None:
    kube = Kube(kubeconfig)
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending:
        pending -= {n["metadata"]["name"] for n in kube.list("v1", "Node") if node_ready(n)}
        if not pending:
            return
        if time.monotonic() > deadline:
            raise ClusterError(f"nodes not Ready after {timeout:.0f}s: {sorted(pending)}")
        time.sleep(0.5)
