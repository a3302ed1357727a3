"""Real nodes: upstream kubelets on containerd 2.x joined to the local control plane.

`up` builds the pause image, saves the images `make images` built into one
archive, and starts each node (e2e/local/real-node.sh) in its own network
namespace, wired to the slot's bridge; then waits for every Node to be Ready
with its fake GPUs allocatable. `down` stops them by PID and removes what they
left: pod processes (by the node's cgroups), containerd shims (by their
socket), cgroups, the netns and veth, the node's folder.
(docs/local-kubernetes.md, "Real nodes".)
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import yaml
from slurmkube_runtime.layout import BRIDGE, BRIDGE_IP, SUBNET
from slurmkube_runtime.sandbox import ensure_bridge

from slurmkube_e2e import cluster_dns, host_inotify, processes
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.layout import LOOPBACK, Layout, go_module_dir, read_versions
from slurmkube_e2e.realnode_config import (
    CNI_BIN_DIR,
    NODE_BRIDGE,
    PAUSE_IMAGE,
    RUNC,
    RealNode,
    apiserver_relay_url,
    cni_config,
    containerd_config,
    kube_proxy_config,
    kubelet_args,
    kubelet_config,
    real_nodes,
)

GPU_RESOURCE = "nvidia.com/gpu"
NVIDIA_MAJOR = 195
CGROUP_FS = Path("/sys/fs/cgroup")


class RealNodeError(RuntimeError):
    """A real node did not come up; the message says which and why."""


def _run(argv: list[str], check: bool = True, **kw: object) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload]
    if check and done.returncode != 0:
        raise RealNodeError(f"`{' '.join(argv)}` failed: {(done.stderr or done.stdout).strip()}")
    return str(done.stdout)


def _write(path: Path, text: str, secret: bool = False) -> None:
    """Only when the text differs: kube-proxy exits when its config file is written
    to, and `up` again must leave running nodes alone."""
    if path.exists() and path.read_text() == text:
        return
    if secret:
        path.touch(mode=0o600)
        path.chmod(0o600)
    path.write_text(text)


class RealNodes:
    """The real nodes of one checkout's cluster (state under .run/real-nodes)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.state = layout.run / "real-nodes"
        self.script = layout.root / "e2e" / "local" / "real-node.sh"

    # -- images ----------------------------------------------------------------

    def _podman(self, *args: str) -> str:
        return _run(
            [sys.executable, str(self.layout.root / "images" / "build.py"), "podman", *args]
        )

    def _pause_image(self) -> None:
        """Kubernetes' pause (build/pause/linux/pause.c of the pinned release), built here."""
        version = read_versions(self.layout.versions_file)["K8S_VERSION"]
        source = (
            go_module_dir("k8s.io/kubernetes", version) / "build" / "pause" / "linux" / "pause.c"
        )
        if not source.exists():
            raise RealNodeError(f"{source} is missing; run `make cluster-build`")
        if (
            subprocess.run(
                [
                    sys.executable,
                    str(self.layout.root / "images" / "build.py"),
                    "podman",
                    "image",
                    "exists",
                    PAUSE_IMAGE,
                ],
                check=False,
            ).returncode
            == 0
        ):
            return
        work = self.layout.cache / "images" / "pause"
        work.mkdir(parents=True, exist_ok=True)
        tag = PAUSE_IMAGE.rsplit(":", 1)[1]
        _run(
            [
                "gcc",
                "-Os",
                "-Wall",
                "-Werror",
                "-static",
                f"-DVERSION=v{tag}-slurmkube",
                "-o",
                str(work / "pause"),
                str(source),
            ]
        )
        with tarfile.open(work / "rootfs.tar", "w") as tar:
            tar.add(work / "pause", arcname="pause")
        self._podman(
            "import",
            "--change",
            'ENTRYPOINT ["/pause"]',
            "--change",
            "USER 65535:65535",
            str(work / "rootfs.tar"),
            PAUSE_IMAGE,
        )

    def _image_archive(self) -> Path:
        """One docker-archive of pause and every image `make images` built, cached by image IDs."""
        listing = json.loads(
            _run([sys.executable, str(self.layout.root / "images" / "build.py"), "list", "--json"])
        )
        refs = [PAUSE_IMAGE, *sorted(t for e in listing.values() for t in e["tags"])]
        ids = self._podman("image", "inspect", "--format", "{{.Id}}", *refs).split()
        key = hashlib.sha256(json.dumps([refs, ids]).encode()).hexdigest()[:16]
        archive = self.layout.cache / "images" / f"node-images-{key}.tar"
        # Under a lock: another checkout's real nodes may be coming up from the same
        # cache (podman refuses to save into an archive another save began).
        archive.parent.mkdir(parents=True, exist_ok=True)
        with open(archive.parent / "node-images.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not archive.exists():
                for old in archive.parent.glob("node-images-*.tar"):
                    old.unlink()
                tmp = archive.with_suffix(f".{os.getpid()}.tmp")
                tmp.unlink(missing_ok=True)
                self._podman("save", "--multi-image-archive", "--output", str(tmp), *refs)
                tmp.rename(archive)
        return archive

    # -- one node --------------------------------------------------------------

    def node_dir(self, node: RealNode) -> Path:
        return self.state / node.name

    def _process(self, node: RealNode) -> processes.Process:
        return processes.Process(
            name=f"real-node-{node.name}",
            argv=("/usr/bin/bash", str(self.script), str(self.node_dir(node)), node.netns),
            pid_dir=self.layout.pids,
            log_dir=self.layout.logs,
            env=(("SLURMKUBE_CACHE", str(self.layout.cache)),),
        )

    def _relay(self) -> processes.Process:
        port = str(self.layout.ports.apiserver)
        return processes.Process(
            name="apiserver-relay",
            argv=(
                sys.executable,
                "-m",
                "slurmkube_e2e.relay",
                str(BRIDGE_IP),
                port,
                LOOPBACK,
                port,
            ),
            pid_dir=self.layout.pids,
            log_dir=self.layout.logs,
        )

    def _dns(self) -> processes.Process:
        return processes.Process(
            name="cluster-dns",
            argv=(str(self.layout.bin / "coredns"), "-conf", str(self.state / "dns" / "Corefile")),
            pid_dir=self.layout.pids,
            log_dir=self.layout.logs,
        )

    def _token(self, account: str) -> str:
        """A bound token of a kube-system ServiceAccount, for a daemon of the test bed."""
        return _run(
            [
                str(self.layout.kubectl),
                f"--kubeconfig={self.layout.kubeconfig}",
                "create",
                "token",
                account,
                "-n",
                cluster_dns.NAMESPACE,
                f"--duration={cluster_dns.TOKEN_SECONDS}s",
            ]
        ).strip()

    def _start_services(self) -> None:
        """CoreDNS on the bridge address the kubelets name; identities and the
        `kubernetes` Service's backend for the nodes' kube-proxies."""
        manifests = [
            *cluster_dns.rbac(),
            *cluster_dns.proxy_rbac(),
            cluster_dns.apiserver_endpoints(BRIDGE_IP, self.layout.ports.apiserver),
        ]
        _run(
            [
                str(self.layout.kubectl),
                f"--kubeconfig={self.layout.kubeconfig}",
                "apply",
                "-f",
                "-",
            ],
            input=yaml.safe_dump_all(manifests),
        )
        d = self.state / "dns"
        d.mkdir(parents=True, exist_ok=True)
        if not (d / "kubeconfig").exists():
            config = cluster_dns.token_kubeconfig(
                self.layout.apiserver_url,
                self.layout.pki / "ca.crt",
                self._token(cluster_dns.ACCOUNT),
                cluster_dns.ACCOUNT,
            )
            _write(d / "kubeconfig", yaml.safe_dump(config), secret=True)
        _write(d / "Corefile", cluster_dns.corefile(BRIDGE_IP, d / "kubeconfig"))
        processes.start(self._dns())

    def _proxy_kubeconfig(self) -> str:
        proxy = cluster_dns.token_kubeconfig(
            apiserver_relay_url(self.layout.ports.apiserver),
            self.layout.pki / "ca.crt",
            self._token(cluster_dns.PROXY_ACCOUNT),
            cluster_dns.PROXY_ACCOUNT,
            server_name="localhost",
        )
        return yaml.safe_dump(proxy)

    def _write_files(self, node: RealNode, archive: Path) -> None:
        d = self.node_dir(node)
        for sub in ("containerd", "cni", "cni-ipam", "kubelet", "dev"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        for i in range(node.gpus):
            dev = d / "dev" / f"nvidia{i}"
            if not dev.exists():
                os.mknod(dev, 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, i))
        _write(d / "gpus", f"{node.gpus}\n")
        pki = self.layout.pki
        _write(d / "kubelet.yaml", yaml.safe_dump(kubelet_config(node, d, pki / "ca.crt")))
        _write(d / "kubelet.args", "\n".join(kubelet_args(node, d)) + "\n")
        _write(d / "containerd.toml", containerd_config(node, d))
        _write(d / "kube-proxy.yaml", yaml.safe_dump(kube_proxy_config(node, d)))
        if not (d / "kube-proxy.kubeconfig").exists():
            _write(d / "kube-proxy.kubeconfig", self._proxy_kubeconfig(), secret=True)
        _write(d / "cni" / "10-slurmkube.conflist", cni_config(node, d))
        kubeconfig = yaml.safe_load(
            self.layout.component_kubeconfig(f"node-{node.name}").read_text()
        )
        for cluster in kubeconfig["clusters"]:
            cluster["cluster"]["server"] = apiserver_relay_url(self.layout.ports.apiserver)
            cluster["cluster"]["tls-server-name"] = "localhost"
        _write(d / "kubeconfig", yaml.safe_dump(kubeconfig), secret=True)
        images = d / "images.tar"
        images.unlink(missing_ok=True)
        images.symlink_to(archive)

    def _cgroup_dirs(self, node: RealNode) -> list[Path]:
        """The node's cgroup root in every hierarchy of this host (v1 controllers and v2)."""
        rel = node.cgroup_root.lstrip("/")
        return [h / rel for h in sorted(CGROUP_FS.iterdir()) if h.is_dir()]

    def _make_cgroups(self, node: RealNode) -> None:
        for path in self._cgroup_dirs(node):
            path.mkdir(parents=True, exist_ok=True)
            if path.parent.parent.name == "cpuset":
                # A new cpuset takes no tasks until it has CPUs and memory nodes.
                for parent in (path.parent, path):
                    for f in ("cpuset.cpus", "cpuset.mems"):
                        if not (parent / f).read_text().strip():
                            (parent / f).write_text((CGROUP_FS / "cpuset" / f).read_text())

    def _make_network(self, node: RealNode) -> None:
        ns = node.netns
        if not Path(f"/run/netns/{ns}").exists():
            _run(["ip", "netns", "add", ns])
        if not Path(f"/sys/class/net/{node.host_veth}").exists():
            _run(
                [
                    "ip",
                    "link",
                    "add",
                    node.host_veth,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    ns,
                ]
            )
        _run(["ip", "link", "set", node.host_veth, "master", BRIDGE, "up"])
        links = _run(["ip", "-n", ns, "-o", "link", "show"])
        if f" {NODE_BRIDGE}:" not in links:
            _run(["ip", "-n", ns, "link", "add", NODE_BRIDGE, "type", "bridge"])
            _run(["ip", "-n", ns, "link", "set", "eth0", "master", NODE_BRIDGE])
            _run(
                ["ip", "-n", ns, "addr", "add", f"{node.ip}/{SUBNET.prefixlen}", "dev", NODE_BRIDGE]
            )
        for link in ("lo", "eth0", NODE_BRIDGE):
            _run(["ip", "-n", ns, "link", "set", link, "up"])

    # -- the fleet -------------------------------------------------------------

    def saved(self) -> list[RealNode]:
        path = self.state / "nodes.json"
        if not path.exists():
            return []
        data = json.loads(path.read_text())
        return real_nodes(int(data["count"]), int(data["gpus"]))

    def check_tools(self) -> None:
        bin_ = self.layout.bin
        needed = [
            bin_ / "slurmkube-k8s",
            bin_ / "containerd",
            bin_ / "ctr",
            bin_ / "containerd-shim-runc-v2",
            bin_ / "coredns",
            Path(RUNC),
            *(Path(CNI_BIN_DIR) / p for p in ("bridge", "host-local", "loopback")),
        ]
        missing = [str(p) for p in needed if not p.exists()]
        missing += [t for t in ("gcc", "nsenter", "unshare", "ip", "podman") if not shutil.which(t)]
        if missing:
            raise RealNodeError(
                f"missing {missing}: run `make real-nodes-build` "
                "(apt-get install runc containernetworking-plugins gcc for the Debian parts)"
            )

    def up(self, count: int, gpus: int = 4, timeout: float = 300) -> list[str]:
        nodes = real_nodes(count, gpus)
        saved = self.saved()
        if saved and [n.name for n in saved] != [n.name for n in nodes]:
            raise RealNodeError(
                f"{len(saved)} real nodes are up; `make cluster-down` before asking for {count}"
            )
        self.check_tools()
        start = time.monotonic()
        self.state.mkdir(parents=True, exist_ok=True)
        (self.state / "nodes.json").write_text(json.dumps({"count": count, "gpus": gpus}) + "\n")
        _run(
            [
                str(self.layout.k8s_binary),
                "pki",
                f"--dir={self.layout.pki}",
                f"--server={self.layout.apiserver_url}",
                *(f"--node={n.name}" for n in nodes),
            ]
        )
        self._pause_image()
        archive = self._image_archive()
        ensure_bridge()
        processes.start(self._relay())
        self._start_services()
        self._ensure_inotify_room(nodes)
        for node in nodes:
            self._write_files(node, archive)
            self._make_cgroups(node)
            self._make_network(node)
            processes.start(self._process(node))
        self.wait_ready(nodes, timeout)
        print(
            f"real nodes up in {time.monotonic() - start:.0f}s: {', '.join(n.name for n in nodes)}"
        )
        return [n.name for n in nodes]

    def _ensure_inotify_room(self, nodes: list[RealNode]) -> None:
        new = [n for n in nodes if processes.running_pid(self._process(n)) is None]
        try:
            raised = host_inotify.ensure_room(len(new))
        except host_inotify.InotifyLimitError as e:
            raise RealNodeError(str(e)) from e
        for r in raised:
            print(
                "raised an inotify limit for new real nodes: "
                f"sysctl={r.name} from={r.current} to={r.needed} in_use={r.in_use} "
                f"new_nodes={len(new)}"
            )

    def wait_ready(self, nodes: list[RealNode], timeout: float) -> None:
        kube = Kube(self.layout.kubeconfig)
        deadline = time.monotonic() + timeout
        pending = [n.name for n in nodes]
        # The PIDs just started, checked for life only: a node's script execs through
        # nsenter and unshare into itself, so for a moment its command line is not
        # the one `running_pid` knows, and a node was once called exited there.
        started = {n.name: int(self._process(n).pid_file.read_text().strip()) for n in nodes}
        while pending and time.monotonic() < deadline:
            for node in nodes:
                proc = self._process(node)
                if not processes.alive(started[node.name]):
                    raise RealNodeError(
                        f"real node {node.name} exited:\n{processes.tail(proc.log_file)}\n"
                        f"see {self.node_dir(node)}/*.log"
                    )
            pending = [name for name in pending if not _ready_with_gpus(kube, name)]
            time.sleep(2)
        if pending:
            raise RealNodeError(
                f"real nodes {pending} not Ready with {GPU_RESOURCE} after {timeout:.0f}s; "
                f"see {self.state}/<node>/kubelet.log"
            )

    def down(self) -> None:
        nodes = self.saved()
        for node in nodes:
            processes.stop(self._process(node), timeout=30)
            self._kill_leftovers(node)
            self._remove_cgroups(node)
            _run(["ip", "link", "del", node.host_veth], check=False)
            _run(["ip", "netns", "del", node.netns], check=False)
        processes.stop(self._relay())
        processes.stop(self._dns())
        if nodes and self.layout.kubeconfig.exists():
            _run(
                [
                    str(self.layout.kubectl),
                    f"--kubeconfig={self.layout.kubeconfig}",
                    "delete",
                    "node",
                    "--ignore-not-found",
                    "--wait=false",
                    *(n.name for n in nodes),
                ],
                check=False,
            )
        if self.state.exists():
            shutil.rmtree(self.state)

    def _kill_leftovers(self, node: RealNode) -> None:
        """Pod processes (in the node's cgroups) and containerd shims (by the node's socket)."""
        pids: set[int] = set()
        for top in self._cgroup_dirs(node):
            if top.exists():
                for procs in top.rglob("cgroup.procs"):
                    pids.update(int(p) for p in procs.read_text().split())
        marker = str(self.node_dir(node)).encode()
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    if marker in (proc / "cmdline").read_bytes():
                        pids.add(int(proc.name))
                except OSError:
                    continue
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + 10
        while any(processes.alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)

    def _remove_cgroups(self, node: RealNode) -> None:
        for top in self._cgroup_dirs(node):
            if not top.exists():
                continue
            for sub in sorted(
                (p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
            ):
                sub.rmdir()
            top.rmdir()
            if not any(p.is_dir() for p in top.parent.iterdir()):
                top.parent.rmdir()

    def status(self) -> bool:
        nodes = self.saved()
        if not nodes:
            print("real nodes: none")
            return True
        kube = Kube(self.layout.kubeconfig)
        ok = True
        for node in nodes:
            pid = processes.running_pid(self._process(node))
            ready = _ready_with_gpus(kube, node.name)
            ok = ok and pid is not None and ready
            print(f"{node.name}: pid={pid} ip={node.ip} ready-with-gpus={ready}")
        return ok


def _ready_with_gpus(kube: Kube, name: str) -> bool:
    node = kube.get("v1", "Node", name)
    if node is None:
        return False
    status = node.get("status", {})
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", [])
    )
    return ready and int(status.get("allocatable", {}).get(GPU_RESOURCE, "0")) > 0
