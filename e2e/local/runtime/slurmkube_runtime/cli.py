"""The runtime's command line: start/stop the agent, and `logs`/`exec` into its pods.

    python -m slurmkube_runtime up | down | status
    python -m slurmkube_runtime logs -n NAMESPACE POD [-c CONTAINER]
    python -m slurmkube_runtime exec -n NAMESPACE POD [-c CONTAINER] -- CMD...

`logs` and `exec` read the agent's state folder directly (they need no agent
RPC): a pod's logs are files, and its sandbox is found by UID in
`pods/<uid>/sandbox.json`, entered with nsenter like the agent's own probes.
`register(subparsers)` / `dispatch(args)` let slurmkube-e2e offer the same
subcommands (see docs/local-runtime.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from slurmkube_e2e import processes
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.waiting import has_condition
from slurmkube_runtime import sandbox
from slurmkube_runtime.agent import cleanup_leftovers, leftover_sandbox_pids
from slurmkube_runtime.layout import BRIDGE, RuntimeLayout, node_names

RUNTIME_COMMANDS = ("logs", "exec")


class CliError(RuntimeError):
    pass


def agent_process(layout: RuntimeLayout) -> processes.Process:
    return processes.Process(
        name="runtime-agent",
        argv=(sys.executable, str(layout.agent_script)),
        pid_dir=layout.state,
        log_dir=layout.state,
    )


def _kube(layout: RuntimeLayout) -> Kube:
    path = Path(os.environ.get("KUBECONFIG", layout.kubeconfig))
    if not path.exists():
        raise CliError(f"no kubeconfig at {path}: run `make cluster-up` first")
    return Kube(path)


def _nodes_ready(kube: Kube) -> dict[str, bool]:
    return {n: has_condition(kube.get("v1", "Node", n), "Ready") for n in node_names()}


def up(layout: RuntimeLayout, timeout: float = 60) -> None:
    kube = _kube(layout)
    proc = agent_process(layout)
    started = time.monotonic()
    pid = processes.start(proc)
    while True:
        ready = _nodes_ready(kube)
        if all(ready.values()):
            break
        if processes.running_pid(proc) is None:
            raise CliError(f"runtime agent exited:\n{processes.tail(proc.log_file)}")
        if time.monotonic() - started > timeout:
            raise CliError(f"local nodes not Ready after {timeout:.0f}s: {ready}")
        time.sleep(0.25)
    print(
        f"runtime-agent: pid {pid}, nodes {node_names()[0]}..{node_names()[-1]} Ready "
        f"in {time.monotonic() - started:.1f}s, log {proc.log_file}"
    )


def down(layout: RuntimeLayout) -> None:
    """Stop the agent by PID; then check (and clean, if it crashed) that nothing is left."""
    proc = agent_process(layout)
    pid = processes.stop(proc, timeout=60)
    print(f"runtime-agent: {'stopped pid ' + str(pid) if pid else 'was not running'}")
    cleaned = cleanup_leftovers(layout)
    shared = not sandbox.remove_bridge()
    if cleaned:
        print(f"runtime: cleaned leftovers of a previous agent: {', '.join(cleaned)}")
    left = leftover_sandbox_pids()
    problems = []
    if left:
        problems.append(f"sandbox processes still running: {left}")
    if sandbox.leftover_veths() or (not shared and Path(f"/sys/class/net/{BRIDGE}").exists()):
        problems.append(f"links left: {sandbox.leftover_veths()} {BRIDGE}")
    mounts = [
        line
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if str(layout.pods) in line
    ]
    if mounts:
        problems.append(f"mounts left: {mounts}")
    if problems:
        raise CliError("; ".join(problems))


def status(layout: RuntimeLayout) -> bool:
    proc = agent_process(layout)
    pid = processes.running_pid(proc)
    print(f"runtime-agent: {'pid ' + str(pid) if pid else 'not running'}  (log {proc.log_file})")
    sandboxes = sorted(layout.pods.glob("*/sandbox.json")) if layout.pods.exists() else []
    for path in sandboxes:
        sb = sandbox.Sandbox.load(path)
        print(
            f"  pod {sb.namespace}/{sb.name}  ip {sb.ip}  "
            f"init pid {sb.init_pid}  alive {sb.alive()}"
        )
    if pid is None:
        return False
    try:
        ready = _nodes_ready(_kube(layout))
    except CliError as err:
        print(f"  {err}")
        return False
    print("  nodes: " + " ".join(f"{n}={'Ready' if r else 'NotReady'}" for n, r in ready.items()))
    return all(ready.values())


# --- logs and exec ------------------------------------------------------------------


def _pod_uid(layout: RuntimeLayout, namespace: str, name: str) -> str:
    pod = _kube(layout).get("v1", "Pod", name, namespace)
    if pod is not None:
        return str(pod["metadata"]["uid"])
    # Deleted pods keep their logs: take the newest folder of that name.
    found = sorted(
        layout.logs.glob(f"{namespace}_{name}_*"), key=lambda p: p.stat().st_mtime, reverse=True
    )
    if not found:
        raise CliError(f"pod {namespace}/{name} not found")
    return found[0].name.rsplit("_", 1)[1]


def logs(layout: RuntimeLayout, namespace: str, name: str, container: str | None) -> None:
    folder = layout.log_dir(namespace, name, _pod_uid(layout, namespace, name))
    files = sorted(folder.glob("*.log"))
    if not files:
        raise CliError(f"no logs for pod {namespace}/{name} (is it on a local-* node?)")
    if container is None and len(files) > 1:
        names = [f.stem for f in files]
        raise CliError(
            f"pod {namespace}/{name} has several containers, choose one with -c: {names}"
        )
    chosen = folder / f"{container}.log" if container else files[0]
    if not chosen.exists():
        raise CliError(f"no log for container {container!r}; have {[f.stem for f in files]}")
    sys.stdout.buffer.write(chosen.read_bytes())
    sys.stdout.flush()


def running_sandbox(layout: RuntimeLayout, namespace: str, name: str) -> sandbox.Sandbox:
    """A running pod's sandbox (its init's PID holds the pod's namespaces)."""
    state = layout.pod_dir(_pod_uid(layout, namespace, name)) / "sandbox.json"
    if not state.exists():
        raise CliError(f"pod {namespace}/{name} has no sandbox on the local runtime")
    sb = sandbox.Sandbox.load(state)
    if not sb.alive():
        raise CliError(f"sandbox of pod {namespace}/{name} is not running")
    return sb


def exec_argv(
    layout: RuntimeLayout,
    namespace: str,
    name: str,
    container: str | None,
    command: list[str],
    *,
    workdir: str | None = None,
) -> tuple[list[str], dict[str, str]]:
    """nsenter argv and env that run command in the pod as its container would
    (its user and environment), in `workdir` if given."""
    sb = running_sandbox(layout, namespace, name)
    # As kubectl exec: the pod's first app container, never an init container.
    chosen = container or next(
        (n for n, info in sb.containers.items() if not info.get("init")), None
    )
    if chosen is None or chosen not in sb.containers:
        raise CliError(
            f"container {chosen!r} not started in {namespace}/{name}: {list(sb.containers)}"
        )
    info = sb.containers[chosen]
    run_as = info.get("run_as") or [None, None]
    return sb.enter(command, (run_as[0], run_as[1]), workdir), dict(info["env"])


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `logs` and `exec` to a parent CLI (slurmkube-e2e)."""
    lg = sub.add_parser("logs", help="print a local-runtime pod's container log")
    ex = sub.add_parser("exec", help="run a command inside a local-runtime pod")
    for p in (lg, ex):
        p.add_argument("-n", "--namespace", default="default")
        p.add_argument("pod")
        p.add_argument("-c", "--container")
    ex.add_argument("-w", "--workdir", help="directory in the pod to run CMD in")
    ex.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")


def dispatch(args: argparse.Namespace) -> int:
    """Run a command added by register(); returns the exit code (exec replaces the process)."""
    layout = RuntimeLayout.from_env()
    try:
        if args.command == "logs":
            logs(layout, args.namespace, args.pod, args.container)
        elif args.command == "exec":
            cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
            if not cmd:
                raise CliError("exec needs a command: exec -n NS POD -- CMD")
            argv, env = exec_argv(
                layout, args.namespace, args.pod, args.container, cmd, workdir=args.workdir
            )
            sys.stdout.flush()
            os.execvpe(argv[0], argv, env)
        elif args.command == "up":
            up(layout)
        elif args.command == "down":
            down(layout)
        elif args.command == "status":
            return 0 if status(layout) else 1
    except CliError as err:
        print(f"slurmkube-runtime {args.command}: {err}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="slurmkube-runtime", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="start the agent (idempotent) and wait for its nodes")
    sub.add_parser("down", help="stop the agent by PID; fail if anything of it is left")
    sub.add_parser("status", help="agent PID, sandboxes, node readiness")
    register(sub)
    return dispatch(parser.parse_args(argv))
