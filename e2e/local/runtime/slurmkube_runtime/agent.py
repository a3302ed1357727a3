"""The kubelet loop: keep the local Nodes alive and run the pods bound to them.

Level-based like a kubelet's pod workers: watches feed a cache of the pods on
our nodes and of every Service; each tick reconciles every pod against what
runs (sandbox, containers, probes, termination) and writes the status only
when it changed. Blocking work that may take seconds (exec probes, preStop
hooks) runs in a small thread pool; everything that changes a sandbox happens
on the main thread, in order.

Deviations from kubelet, chosen for a test runtime: restart back-off starts at
1 s and caps at 30 s (kubelet: 10 s, 5 min); all containers of a pod share one
filesystem view (their volume mounts are merged, conflicting mounts are
refused); init containers run in order, sidecar init containers are not
supported; ClusterIP Services resolve to a backing pod (see podspec.hosts_file).
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmkube_runtime import imagespec, nodes, podspec, sandbox
from slurmkube_runtime.api import Api
from slurmkube_runtime.images import ImageError, ImageStore
from slurmkube_runtime.layout import AGENT_POOL, BRIDGE_IP, SUBNET, RuntimeLayout, node_names
from slurmkube_runtime.podspec import Manifest, MissingObject, SpecError
from slurmkube_runtime.status import ContainerView, Terminated, pod_status

log = logging.getLogger("slurmkube-runtime")
TICK_SECONDS = 0.25
LEASE_EVERY = 10.0
NODE_STATUS_EVERY = 30.0
VOLUME_REFRESH_EVERY = 5.0
BACKOFF_BASE = 1.0
BACKOFF_CAP = 30.0
EXTRA_KILL_SECONDS = 2.0


@dataclass
class Probe:
    kind: str  # readiness | liveness | startup
    spec: Manifest
    next_at: float
    successes: int = 0
    failures: int = 0
    ok: bool | None = None
    future: Future[bool] | None = None


@dataclass
class Container:
    spec: Manifest
    init: bool
    restart_count: int = 0
    proc: Any = None  # subprocess.Popen[bytes] while it runs
    running_since: str | None = None
    terminated: Terminated | None = None
    last_terminated: Terminated | None = None
    backoff_until: float = 0.0
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    probes: dict[str, Probe] = field(default_factory=dict)
    ready: bool = False
    started: bool = False
    kill_at: float | None = None  # SIGKILL deadline after a liveness-failure SIGTERM
    kill_reason: str = ""

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def view(self, will_restart: bool) -> ContainerView:
        return ContainerView(
            name=self.name,
            image=str(self.spec.get("image", "")),
            restart_count=self.restart_count,
            running_since=self.running_since,
            terminated=self.terminated,
            last_terminated=self.last_terminated,
            waiting_reason=self.waiting_reason,
            waiting_message=self.waiting_message,
            ready=self.ready,
            started=self.started,
            will_restart=will_restart,
        )


@dataclass
class Termination:
    deadline: float
    stage: str = "prestop"  # prestop -> term -> kill -> done
    hooks: list[Future[tuple[int, str]]] = field(default_factory=list)
    hooked: list[Container] = field(default_factory=list)


def _restarts(policy: str, exit_code: int, init: bool) -> bool:
    if init:
        return policy != "Never" and exit_code != 0
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def _old_restart_counts(pod: Manifest) -> dict[str, int]:
    """After an agent restart, carry on the counts (a lost container counts as a restart)."""
    status = pod.get("status") or {}
    counts = {}
    for st in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        counts[st["name"]] = int(st.get("restartCount", 0)) + (1 if st.get("containerID") else 0)
    return counts


class PodWorker:
    """Everything the agent keeps about one pod (by UID)."""

    def __init__(self, agent: Agent, pod: Manifest) -> None:
        self.agent = agent
        self.pod = pod
        self.uid = str(pod["metadata"]["uid"])
        counts = _old_restart_counts(pod)
        spec = pod["spec"]
        self.init = [
            Container(c, True, counts.get(c["name"], 0)) for c in spec.get("initContainers") or []
        ]
        self.main = [Container(c, False, counts.get(c["name"], 0)) for c in spec["containers"]]
        self.sandbox: sandbox.Sandbox | None = None
        self.ip: str | None = None
        self.start_time = (pod.get("status") or {}).get("startTime") or nodes.now()
        self.transitions: dict[str, tuple[bool, str]] = {}
        self.sent: Manifest | None = None
        self.events: set[tuple[str, str]] = set()
        self.termination: Termination | None = None
        self.finished = False  # sandbox torn down for good
        self.retry_at = 0.0
        self.volumes_at = 0.0
        # The pod's annotations at the last volume sync: a change syncs at once.
        self.volumes_for: Manifest = {}
        self.hosts = ""
        self.envs: dict[str, dict[str, str]] = {}
        # What the pod's image says (resolve_image): config, and accounts if it is a built one.
        self.image = imagespec.host_build_config(agent.layout.slurm_prefix)
        self.accounts: imagespec.Accounts | None = None

    # --- helpers ---
    @property
    def meta(self) -> Manifest:
        return dict(self.pod["metadata"])

    @property
    def label(self) -> str:
        return f"{self.meta['namespace']}/{self.meta['name']}"

    @property
    def policy(self) -> str:
        return str(self.pod["spec"].get("restartPolicy") or "Always")

    def pod_with_ip(self) -> Manifest:
        status = dict(self.pod.get("status") or {})
        if self.ip:
            status.update(podIP=self.ip, podIPs=[{"ip": self.ip}])
        status.update(hostIP=str(BRIDGE_IP), hostIPs=[{"ip": str(BRIDGE_IP)}])
        return {**self.pod, "status": status}

    def event(self, type_: str, reason: str, message: str) -> None:
        if (reason, message) in self.events:
            return
        self.events.add((reason, message))
        log.info("event pod=%s reason=%s message=%s", self.label, reason, message)
        try:
            self.agent.api.event(self.pod, type_, reason, message, nodes.now())
        except Exception as err:  # events are best effort, like kubelet's recorder
            log.warning("event not recorded pod=%s err=%s", self.label, err)

    def _all(self) -> list[Container]:
        return self.init + self.main

    def log_file(self, container: str) -> Path:
        m = self.meta
        folder = self.agent.layout.log_dir(m["namespace"], m["name"], self.uid)
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{container}.log"

    # --- start ---
    def try_start(self) -> None:
        """Image check, volumes, sandbox; on a retryable problem, wait and report why."""
        if time.monotonic() < self.retry_at:
            return
        bad = [c for c in self._all() if not podspec.image_supported(str(c.spec.get("image", "")))]
        if bad:
            for c in bad:
                message = podspec.unsupported_image_message(str(c.spec.get("image", "")))
                c.waiting_reason, c.waiting_message = "ErrImagePull", message
                self.event("Warning", "UnsupportedImage", message)
            self.retry_at = time.monotonic() + 30
            return
        try:
            root = self.resolve_image()
        except (imagespec.ImageNotBuilt, ImageError, SpecError) as err:
            # Not built (or not extractable): what a kubelet reports for a failed pull.
            pulled = isinstance(err, imagespec.ImageNotBuilt | ImageError)
            for c in self._all():
                c.waiting_reason = "ErrImagePull" if pulled else "CreateContainerConfigError"
                c.waiting_message = str(err)
            self.event("Warning", "Failed", f"Failed to pull image: {err}" if pulled else str(err))
            self.retry_at = time.monotonic() + 30
            return
        try:
            binds = self.materialise_volumes()
        except MissingObject as err:
            self.event("Warning", "FailedMount", f"MountVolume.SetUp failed: {err}")
            self.retry_at = time.monotonic() + 2
            return
        except SpecError as err:
            self.event("Warning", "FailedMount", str(err))
            for c in self._all():
                c.waiting_reason, c.waiting_message = "CreateContainerConfigError", str(err)
            self.retry_at = time.monotonic() + 30
            return
        self.ip = self.agent.allocate_ip(self.uid)
        spec = sandbox.SandboxSpec(
            uid=self.uid,
            namespace=self.meta["namespace"],
            name=self.meta["name"],
            hostname=podspec.hostname(self.pod),
            ip=self.ip,
            gpus=podspec.gpu_count(self.pod),
            volume_binds=tuple(binds),
        )
        try:
            self.sandbox = sandbox.start_sandbox(self.pod_dir, spec, root)
        except sandbox.SandboxError as err:
            self.event("Warning", "FailedCreatePodSandBox", str(err))
            self.agent.release_ip(self.uid)
            self.ip = None
            with contextlib.suppress(sandbox.SandboxError):
                sandbox.remove_dir(self.pod_dir)
            self.retry_at = time.monotonic() + 5
            return
        self.write_identity()
        self.volumes_at = time.monotonic()
        log.info("sandbox started pod=%s ip=%s pid=%s", self.label, self.ip, self.sandbox.init_pid)

    def resolve_image(self) -> sandbox.RootSource:
        """The pod's root filesystem; sets the image config its containers start from."""
        images = [str(c.spec.get("image", "")) for c in self._all()]
        source = imagespec.pod_image_source(images)
        if isinstance(source, imagespec.HostBuild):
            prefix = self.agent.layout.slurm_prefix
            self.image, self.accounts = imagespec.host_build_config(prefix), None
            return sandbox.HostRoot(prefix)
        root = self.agent.images.root(images[0], source.ref)
        self.image, self.accounts = root.config, root.accounts
        return root

    def run_as(self, c: Container) -> tuple[int | None, int | None]:
        return imagespec.run_as(self.pod, c.spec, self.image, self.accounts)

    @property
    def pod_dir(self) -> Path:
        return self.agent.layout.pod_dir(self.uid)

    def write_identity(self) -> None:
        assert self.sandbox is not None
        root = self.sandbox.rootfs
        ns = self.meta["namespace"]
        sandbox.write_etc_file(root, "hostname", podspec.hostname(self.pod) + "\n")
        sandbox.write_etc_file(
            root,
            "resolv.conf",
            "# No cluster DNS on the local runtime: names come from /etc/hosts.\n"
            f"search {ns}.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n",
        )
        self.refresh_hosts()

    def refresh_hosts(self) -> None:
        if self.sandbox is None:
            return
        text = podspec.hosts_file(
            self.pod_with_ip(), self.agent.local_pods(), self.agent.services()
        )
        if text != self.hosts:
            sandbox.write_etc_file(self.sandbox.rootfs, "hosts", text)
            self.hosts = text

    def lookup(self, kind: str, namespace: str, name: str) -> Mapping[str, bytes] | None:
        obj = self.agent.api.data_of(kind, namespace, name)
        if obj is None:
            return None
        return podspec.decode_secret(obj) if kind == "Secret" else podspec.decode_config_map(obj)

    def materialise_volumes(self) -> list[sandbox.VolumeBind]:
        """Write every volume's files under pods/<uid>/volumes; return the binds."""
        root = self.pod_dir / "volumes"
        root.mkdir(parents=True, exist_ok=True)
        self.pod_dir.chmod(0o700)
        pod = self.pod_with_ip()
        # securityContext.fsGroup: volume files belong to that group, as kubelet does it.
        fs_group = (self.pod["spec"].get("securityContext") or {}).get("fsGroup")
        for volume in self.pod["spec"].get("volumes") or []:
            files = podspec.volume_files(pod, volume, self.lookup)
            folder = root / volume["name"]
            if "persistentVolumeClaim" in volume:
                self._claim_link(folder, volume["persistentVolumeClaim"]["claimName"])
                continue
            if files is None:
                if not folder.exists():
                    folder.mkdir(mode=0o777)
                    folder.chmod(0o777)
                continue
            _sync_files(folder, files, fs_group)
        binds: dict[str, sandbox.VolumeBind] = {}
        for c in self._all():
            for m in c.spec.get("volumeMounts") or []:
                source = root / m["name"] / m.get("subPath", "")
                if not (root / m["name"]).exists():
                    raise SpecError(f"container {c.name}: volumeMount {m['name']} has no volume")
                if m.get("subPath") and not source.exists():
                    source.mkdir(parents=True)
                bind = sandbox.VolumeBind(str(source), m["mountPath"], bool(m.get("readOnly")))
                other = binds.get(bind.target)
                if other is not None and other.source != bind.source:
                    raise SpecError(
                        f"mountPath {bind.target} gets different volumes in different containers; "
                        "containers of a pod share one filesystem on the local runtime"
                    )
                binds[bind.target] = bind
        return list(binds.values())

    def _claim_link(self, folder: Path, claim: str) -> None:
        """The volume's folder: a link to the claim's PersistentVolume directory, which
        outlives the pod (its data is there for the next pod of the claim)."""
        namespace = self.pod["metadata"]["namespace"]
        host = self.agent.api.claim_path(namespace, claim)
        if host is None:
            raise MissingObject(f"PersistentVolumeClaim {namespace}/{claim} is not bound yet")
        Path(host).mkdir(parents=True, exist_ok=True)
        # fsGroup, as a CSI driver with fsGroupPolicy File applies it: the group owns
        # the directory and what is made in it (setgid), so a non-root daemon writes.
        fs_group = (self.pod["spec"].get("securityContext") or {}).get("fsGroup")
        if fs_group is not None:
            os.chown(host, -1, int(fs_group))
            os.chmod(host, 0o2770)
        if not folder.is_symlink():
            folder.symlink_to(host, target_is_directory=True)

    # --- containers ---
    def start_container(self, c: Container) -> None:
        assert self.sandbox is not None
        try:
            env = podspec.container_env(
                self.pod_with_ip(),
                c.spec,
                self.lookup,
                imagespec.image_env(self.image, podspec.hostname(self.pod)),
            )
            argv = podspec.command_line(c.spec, env, self.image.entrypoint, self.image.cmd)
            run_as = self.run_as(c)
        except SpecError as err:
            c.waiting_reason, c.waiting_message = "CreateContainerConfigError", str(err)
            self.event("Warning", "Failed", f"container {c.name}: {err}")
            c.backoff_until = time.monotonic() + 5
            return
        self.sandbox.containers[c.name] = {"env": env, "run_as": list(run_as), "init": c.init}
        self.sandbox.save()
        with self.log_file(c.name).open("ab") as out:
            out.write(f"--- {nodes.now()} start {c.name} attempt {c.restart_count}\n".encode())
            out.flush()
            workdir = c.spec.get("workingDir") or self.image.working_dir or None
            c.proc = sandbox.start_process(
                self.sandbox, argv, env, out, run_as=run_as, workdir=workdir
            )
        c.running_since = nodes.now()
        c.terminated = None
        c.kill_at = None
        c.kill_reason = ""
        c.ready = not c.init and "readinessProbe" not in c.spec
        c.started = "startupProbe" not in c.spec
        now = time.monotonic()
        c.probes = {
            kind: Probe(
                kind,
                c.spec[f"{kind}Probe"],
                now + c.spec[f"{kind}Probe"].get("initialDelaySeconds", 0),
            )
            for kind in ("readiness", "liveness", "startup")
            if not c.init and f"{kind}Probe" in c.spec
        }
        self.event("Normal", "Started", f"Started container {c.name}")

    def reap(self, c: Container) -> None:
        if c.proc is None:
            return
        rc = c.proc.poll()
        if rc is None:
            if c.kill_at is not None and time.monotonic() > c.kill_at:
                sandbox.signal_process(c.proc, signal.SIGKILL)
            return
        code = rc if rc >= 0 else 128 - rc
        reason = c.kill_reason or ("Completed" if code == 0 else "Error")
        c.terminated = Terminated(code, reason, c.running_since or nodes.now(), nodes.now())
        c.proc = None
        c.running_since = None
        c.ready = False
        c.probes = {}
        log.info("container exited pod=%s container=%s code=%s", self.label, c.name, code)
        if self.termination is None and _restarts(self.policy, code, c.init):
            c.last_terminated = c.terminated
            c.restart_count += 1
            delay = min(BACKOFF_BASE * 2 ** (c.restart_count - 1), BACKOFF_CAP)
            c.backoff_until = time.monotonic() + delay
            c.waiting_reason = "CrashLoopBackOff"
            c.waiting_message = f"back-off {delay:.0f}s restarting failed container={c.name}"

    def will_restart(self, c: Container) -> bool:
        return (
            c.terminated is not None
            and self.termination is None
            and not self.finished
            and _restarts(self.policy, c.terminated.exit_code, c.init)
        )

    def step(self) -> None:
        """Reap exits, restart or start what should run, run due probes."""
        for c in self._all():
            self.reap(c)
        now = time.monotonic()
        pending_init = next(
            (c for c in self.init if c.terminated is None or c.terminated.exit_code != 0), None
        )
        if pending_init is not None:
            failed = pending_init.terminated is not None and not self.will_restart(pending_init)
            if pending_init.proc is None and not failed and now >= pending_init.backoff_until:
                if pending_init.terminated is not None:
                    pending_init.terminated = None
                self.start_container(pending_init)
            return
        for c in self.main:
            if c.proc is not None:
                self.probe(c)
            elif (c.terminated is None or self.will_restart(c)) and now >= c.backoff_until:
                self.start_container(c)

    # --- probes ---
    def probe(self, c: Container) -> None:
        now = time.monotonic()
        for kind, p in c.probes.items():
            if kind != "startup" and not c.started:
                continue
            if p.future is not None:
                if not p.future.done():
                    continue
                self._probe_result(c, p, p.future.result())
                p.future = None
                p.next_at = now + p.spec.get("periodSeconds", 10)
            if now >= p.next_at and p.future is None and c.proc is not None:
                p.future = self.agent.pool.submit(self._run_probe, c, p.spec)

    def _run_probe(self, c: Container, spec: Manifest) -> bool:
        timeout = float(spec.get("timeoutSeconds", 1))
        assert self.sandbox is not None and self.ip is not None
        try:
            if "exec" in spec:
                env = self.sandbox.containers.get(c.name, {}).get("env", {})
                rc, _ = sandbox.run_in_pod(
                    self.sandbox, spec["exec"]["command"], env, timeout, self.run_as(c)
                )
                return rc == 0
            if "tcpSocket" in spec:
                port = _port(c.spec, spec["tcpSocket"]["port"])
                with socket.create_connection((self.ip, port), timeout=timeout):
                    return True
            if "httpGet" in spec:
                get = spec["httpGet"]
                conn = http.client.HTTPConnection(
                    self.ip, _port(c.spec, get["port"]), timeout=timeout
                )
                try:
                    conn.request("GET", get.get("path", "/"))
                    return 200 <= conn.getresponse().status < 400
                finally:
                    conn.close()
        except (OSError, http.client.HTTPException):
            return False
        return False

    def _probe_result(self, c: Container, p: Probe, ok: bool) -> None:
        if ok:
            p.successes, p.failures = p.successes + 1, 0
            if p.successes >= p.spec.get("successThreshold", 1):
                p.ok = True
        else:
            p.failures, p.successes = p.failures + 1, 0
            if p.failures >= p.spec.get("failureThreshold", 3):
                p.ok = False
        if p.kind == "readiness":
            c.ready = p.ok is True
        elif p.kind == "startup" and p.ok:
            c.started = True
        if p.ok is False and p.kind in ("liveness", "startup") and c.kill_at is None:
            self.event("Warning", "Unhealthy", f"{p.kind.capitalize()} probe failed for {c.name}")
            self.event(
                "Normal", "Killing", f"Container {c.name} failed {p.kind} probe, will be restarted"
            )
            c.kill_reason = "Error"
            c.kill_at = time.monotonic() + self.grace_seconds()
            if c.proc is not None:
                sandbox.signal_process(c.proc, signal.SIGTERM)
        if not ok:
            # Deduplicated by message: one event per container and probe kind.
            self.event("Warning", "Unhealthy", f"{p.kind.capitalize()} probe failed for {c.name}")

    def grace_seconds(self) -> float:
        meta_grace = self.meta.get("deletionGracePeriodSeconds")
        spec_grace = self.pod["spec"].get("terminationGracePeriodSeconds")
        value = meta_grace if meta_grace is not None else spec_grace
        return float(30 if value is None else value)

    # --- termination ---
    def terminate_step(self) -> None:
        """preStop hooks, SIGTERM, grace period, SIGKILL, then the final delete."""
        if self.finished or self.sandbox is None:
            self.finish(delete=True)
            return
        for c in self._all():
            self.reap(c)
        now = time.monotonic()
        if self.termination is None:
            self.termination = Termination(deadline=now + self.grace_seconds())
            for c in self.main:
                hook = (c.spec.get("lifecycle") or {}).get("preStop") or {}
                if c.proc is not None and hook:
                    self.termination.hooks.append(self.agent.pool.submit(self._run_hook, c, hook))
                    self.termination.hooked.append(c)
            log.info(
                "terminating pod=%s grace=%s hooks=%s",
                self.label,
                self.grace_seconds(),
                len(self.termination.hooks),
            )
        t = self.termination
        running = [c for c in self._all() if c.proc is not None]
        if t.stage == "prestop" and (all(h.done() for h in t.hooks) or now >= t.deadline):
            for c, h in zip(t.hooked, t.hooks, strict=True):
                if h.done():
                    rc, out = h.result()
                    with self.log_file(c.name).open("a") as f:
                        f.write(f"--- {nodes.now()} preStop of {c.name} rc={rc}\n{out}")
                    if rc != 0:
                        self.event(
                            "Warning", "FailedPreStopHook", f"PreStopHook failed: rc={rc} {out}"
                        )
            t.stage = "term"
            for c in running:
                self.event("Normal", "Killing", f"Stopping container {c.name}")
                sandbox.signal_process(c.proc, signal.SIGTERM)
        elif t.stage == "term" and running and now >= t.deadline:
            t.stage = "kill"
            t.deadline = now + EXTRA_KILL_SECONDS
            for c in running:
                sandbox.signal_process(c.proc, signal.SIGKILL)
        if t.stage in ("term", "kill") and (
            not running or (t.stage == "kill" and now >= t.deadline)
        ):
            self.finish(delete=True)

    def _run_hook(self, c: Container, hook: Manifest) -> tuple[int, str]:
        assert self.sandbox is not None and self.termination is not None
        remaining = max(self.termination.deadline - time.monotonic(), 1.0)
        if "exec" in hook:
            env = self.sandbox.containers.get(c.name, {}).get("env", {})
            return sandbox.run_in_pod(
                self.sandbox, hook["exec"]["command"], env, remaining, self.run_as(c)
            )
        if "sleep" in hook:
            time.sleep(min(float(hook["sleep"]["seconds"]), remaining))
            return 0, ""
        return 0, "only exec and sleep preStop hooks run on the local runtime"

    def finish(self, delete: bool) -> None:
        """Tear the sandbox down (kills whatever is left), then optionally delete the pod."""
        if self.sandbox is not None:
            for c in self._all():
                if c.proc is not None:
                    sandbox.signal_process(c.proc, signal.SIGKILL)
            sandbox.stop_sandbox(self.sandbox)
            for c in self._all():
                if c.proc is not None:
                    with contextlib.suppress(Exception):
                        c.proc.wait(5)
                    self.reap(c)
            log.info("sandbox stopped pod=%s", self.label)
            self.sandbox = None
        self.agent.release_ip(self.uid)
        self.finished = True
        if delete:
            self.agent.api.delete_pod_now(self.meta["namespace"], self.meta["name"], self.uid)

    # --- report ---
    def report(self) -> None:
        init = [c.view(self.will_restart(c)) for c in self.init]
        main = [c.view(self.will_restart(c)) for c in self.main]
        body = pod_status(
            self.uid,
            self.ip,
            init=init,
            main=main,
            start_time=self.start_time,
            transitions=self.transitions,
            now=nodes.now(),
        )
        comparable = {k: v for k, v in body.items() if k != "conditions"}
        comparable["conditions"] = [(c["type"], c["status"]) for c in body["conditions"]]
        if comparable == self.sent:
            return
        self.agent.api.patch_pod_status(self.meta["namespace"], self.meta["name"], body)
        self.sent = comparable
        if body["phase"] in ("Succeeded", "Failed") and not self.finished:
            self.finish(delete=False)


def _port(container: Manifest, port: int | str) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise SpecError(f"container {container['name']} has no port named {port!r}")


def _sync_files(folder: Path, files: list[podspec.VolumeFile], gid: int | None = None) -> None:
    """Make folder hold exactly files (atomic per file), as kubelet's AtomicWriter ends up.

    The kubelet swaps all files of a volume at once; here `config-hash` goes
    last, so whoever sees a new hash (the slurmctld pod's config reloader)
    finds the files it stands for already written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    wanted = set()
    for f in sorted(files, key=lambda f: f.path == "config-hash"):
        path = folder / f.path
        wanted.add(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            if path.read_bytes() == f.data and (path.stat().st_mode & 0o7777) == f.mode:
                continue
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(f.data)
        if gid is not None:
            os.chown(tmp, 0, gid)
        tmp.chmod(f.mode)
        tmp.replace(path)
    for path in folder.rglob("*"):
        if path.is_file() and path not in wanted:
            path.unlink()


class Agent:
    def __init__(self, layout: RuntimeLayout) -> None:
        self.layout = layout
        self.api = Api(layout.kubeconfig)
        self.stop = threading.Event()
        self.wake = threading.Event()
        self.lock = threading.Lock()
        self.pods: dict[str, Manifest] = {}
        self.svcs: dict[str, Manifest] = {}
        self.workers: dict[str, PodWorker] = {}
        self.ips: dict[str, str] = {}
        self.node_set = set(node_names())
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="probe")
        self.images = ImageStore(layout)
        self.boot_id = str(uuid.uuid4())

    # --- shared views ---
    def local_pods(self) -> list[Manifest]:
        with self.lock:
            return list(self.pods.values())

    def services(self) -> list[Manifest]:
        with self.lock:
            return list(self.svcs.values())

    def allocate_ip(self, uid: str) -> str:
        if uid in self.ips:
            return self.ips[uid]
        used = set(self.ips.values()) | {str(BRIDGE_IP)}
        for host in AGENT_POOL.hosts():
            if str(host) not in used:
                self.ips[uid] = str(host)
                return str(host)
        raise SpecError(f"no free address left in {AGENT_POOL}")

    def release_ip(self, uid: str) -> None:
        self.ips.pop(uid, None)

    # --- informers ---
    def _keep(self, kind: str, obj: Manifest) -> bool:
        return kind == "Service" or obj.get("spec", {}).get("nodeName") in self.node_set

    def _informer(self, kind: str) -> None:
        store = self.pods if kind == "Pod" else self.svcs
        while not self.stop.is_set():
            try:
                items, version = self.api.list_all(kind)
                with self.lock:
                    store.clear()
                    store.update({i["metadata"]["uid"]: i for i in items if self._keep(kind, i)})
                self.wake.set()
                for type_, obj in self.api.watch(kind, version, self.stop):
                    if type_ == "ERROR":
                        break
                    uid = obj["metadata"]["uid"]
                    with self.lock:
                        if type_ == "DELETED" or not self._keep(kind, obj):
                            store.pop(uid, None)
                        else:
                            store[uid] = obj
                    self.wake.set()
            except Exception as err:  # the API server restarting, a watch expiring: relist
                if not self.stop.is_set():
                    log.warning("watch failed kind=%s err=%s", kind, err)
                    self.stop.wait(1)

    def _heartbeats(self) -> None:
        node_uids = {}
        last_status = 0.0
        while not self.stop.is_set():
            try:
                if time.monotonic() - last_status > NODE_STATUS_EVERY:
                    for manifest in nodes.node_manifests():
                        name = manifest["metadata"]["name"]
                        if name not in node_uids:
                            # Registration, as a kubelet's: labels and taints are set
                            # when the agent (re)registers its node, not re-asserted at
                            # each status update, so a test may relabel a local node
                            # (nvidia.com/gpu.clique included) and restore it after.
                            node = self.api.apply_node(manifest)
                            node_uids[name] = node["metadata"]["uid"]
                        if not self.api.patch_node_status(
                            name, nodes.node_status(name, self.boot_id)
                        ):
                            del node_uids[name]  # deleted: registered again next round
                    last_status = time.monotonic()
                for name, uid in node_uids.items():
                    self.api.renew_lease(nodes.lease_manifest(name, uid))
            except Exception as err:
                log.warning("heartbeat failed err=%s", err)
                last_status = 0.0
            self.stop.wait(LEASE_EVERY)

    # --- the loop ---
    def run(self) -> None:
        cleanup_leftovers(self.layout)
        sandbox.ensure_bridge()
        self.layout.pods.mkdir(parents=True, exist_ok=True)
        self.layout.pods.chmod(0o700)
        threads = [
            threading.Thread(target=self._heartbeats, name="heartbeat", daemon=True),
            threading.Thread(target=self._informer, args=("Pod",), name="pods", daemon=True),
            threading.Thread(
                target=self._informer, args=("Service",), name="services", daemon=True
            ),
        ]
        for t in threads:
            t.start()
        log.info("agent started nodes=%s subnet=%s", ",".join(sorted(self.node_set)), SUBNET)
        try:
            while not self.stop.is_set():
                self.wake.wait(TICK_SECONDS)
                self.wake.clear()
                self.tick()
        finally:
            self.shutdown()

    def tick(self) -> None:
        pods = {p["metadata"]["uid"]: p for p in self.local_pods()}
        for uid, worker in list(self.workers.items()):
            if uid not in pods:
                # Gone from the API (final delete done, or force-deleted): no grace left.
                worker.finish(delete=False)
                del self.workers[uid]
        for uid, pod in pods.items():
            if uid not in self.workers:
                self.workers[uid] = PodWorker(self, pod)
            worker = self.workers[uid]
            worker.pod = pod
            try:
                self.sync(worker)
            except Exception:
                log.exception("sync failed pod=%s", worker.label)
        sandbox.reap_children()

    def sync(self, w: PodWorker) -> None:
        if w.meta.get("deletionTimestamp"):
            w.terminate_step()
            return
        if w.finished:
            return
        if w.sandbox is None:
            w.try_start()
        if w.sandbox is not None:
            w.step()
            # Any pod update makes a kubelet sync the pod's volumes now
            # (volumemanager ReprocessPod), not at its next periodic sync: the
            # operator annotates slurmctld's pod with a new config hash for that.
            annotations = w.meta.get("annotations") or {}
            stale = time.monotonic() - w.volumes_at > VOLUME_REFRESH_EVERY
            if stale or annotations != w.volumes_for:
                w.volumes_at = time.monotonic()
                w.volumes_for = annotations
                with contextlib.suppress(SpecError):
                    w.materialise_volumes()
            w.refresh_hosts()
        w.report()

    def shutdown(self) -> None:
        """Stop every pod (SIGTERM, then a short grace), remove our nodes and the bridge."""
        log.info("agent stopping pods=%s", len(self.workers))
        self.stop.set()
        for w in self.workers.values():
            for c in w._all():
                if c.proc is not None:
                    sandbox.signal_process(c.proc, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(
            c.proc is not None and c.proc.poll() is None
            for w in self.workers.values()
            for c in w._all()
        ):
            time.sleep(0.05)
        for w in self.workers.values():
            with contextlib.suppress(Exception):
                w.finish(delete=False)
        for name in sorted(self.node_set):
            try:
                for pod in self.api.pods_on(name):
                    m = pod["metadata"]
                    self.api.delete_pod_now(m["namespace"], m["name"], m["uid"])
                self.api.delete_node(name)
            except Exception as err:
                log.warning("node cleanup failed node=%s err=%s", name, err)
        cleanup_leftovers(self.layout)
        sandbox.remove_bridge()
        self.pool.shutdown(wait=False, cancel_futures=True)
        log.info("agent stopped")


def cleanup_leftovers(layout: RuntimeLayout) -> list[str]:
    """Kill sandboxes a previous agent left (by PID, checked against init's cmdline),
    remove their folders and veths. Returns what was cleaned, for the log."""
    cleaned = []
    if layout.pods.exists():
        for pod_dir in sorted(layout.pods.iterdir()):
            state = pod_dir / "sandbox.json"
            if state.exists():
                with contextlib.suppress(OSError, ValueError, TypeError):
                    sandbox.stop_sandbox(sandbox.Sandbox.load(state))
            with contextlib.suppress(sandbox.SandboxError):
                sandbox.remove_dir(pod_dir)
            cleaned.append(pod_dir.name)
    for veth in sandbox.leftover_veths():
        sandbox.delete_link(veth)
        cleaned.append(veth)
    if cleaned:
        log.info("cleaned leftovers items=%s", ",".join(cleaned))
    return cleaned


def leftover_sandbox_pids() -> list[int]:
    """PIDs of any process running our init.py: must be empty once the runtime is down."""
    pids = []
    needle = str(sandbox.INIT_SCRIPT).encode()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if needle in (proc / "cmdline").read_bytes().split(b"\0"):
                    pids.append(int(proc.name))
    return pids


def main() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S"
    )
    agent = Agent(RuntimeLayout.from_env())
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: agent.stop.set())
    os.umask(0o022)
    agent.run()


__all__ = ["Agent", "cleanup_leftovers", "leftover_sandbox_pids", "main"]
