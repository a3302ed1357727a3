"""`python -m slurmkube_e2e` (the `slurmkube-e2e` tool): cluster up/down/status and fleet.

Used by mk/cluster.mk and by developers directly, e.g. to reshape the
simulated fleet of a running cluster:

    slurmkube-e2e fleet --nvl-domains 4 --nodes-per-domain 18 --gpus 4
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml
from slurmkube_runtime import cli as runtime_cli

from slurmkube_e2e import demo, fleet
from slurmkube_e2e.cluster import (
    NODE_LEASE_SECONDS,
    ClusterError,
    LocalCluster,
    apply_fleet,
    wait_nodes_ready,
)
from slurmkube_e2e.kube import Kube
from slurmkube_e2e.kubectl import KubectlError
from slurmkube_e2e.layout import Layout
from slurmkube_e2e.realnodes import RealNodeError, RealNodes
from slurmkube_e2e.waiting import WaitTimeout


def _fleet_args(parser: argparse.ArgumentParser) -> None:
    d = fleet.FleetSpec()
    parser.add_argument("--fleet-name", default=d.name, help="node name prefix and fleet label")
    parser.add_argument("--nvl-domains", type=int, default=d.nvl_domains)
    parser.add_argument("--nodes-per-domain", type=int, default=d.nodes_per_domain)
    parser.add_argument("--gpus", type=int, default=d.gpus, help="GPUs per node")
    parser.add_argument("--product", default=d.product, help="nvidia.com/gpu.product value")
    parser.add_argument("--domains-per-leaf", type=int, default=d.domains_per_leaf)
    parser.add_argument("--leaves-per-spine", type=int, default=d.leaves_per_spine)


def _spec(args: argparse.Namespace) -> fleet.FleetSpec:
    return fleet.FleetSpec(
        name=args.fleet_name,
        nvl_domains=args.nvl_domains,
        nodes_per_domain=args.nodes_per_domain,
        gpus=args.gpus,
        product=args.product,
        domains_per_leaf=args.domains_per_leaf,
        leaves_per_spine=args.leaves_per_spine,
    )


def advertise_gpus(kube: Kube) -> list[str]:
    """Give nodes labelled with a GPU count that capacity (the extended-resource patch the
    Kubernetes docs describe for resources without a device plugin)."""
    patched = []
    for node in kube.list("v1", "Node", label_selector=fleet.COUNT_LABEL):
        count = node["metadata"]["labels"][fleet.COUNT_LABEL]
        if (node["status"].get("capacity") or {}).get(fleet.GPU_RESOURCE) != count:
            kube.patch_status(
                "v1",
                "Node",
                node["metadata"]["name"],
                {"status": {"capacity": {fleet.GPU_RESOURCE: count}}},
            )
            patched.append(node["metadata"]["name"])
    return patched


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="slurmkube-e2e", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the local control plane (idempotent)")
    _fleet_args(up)
    up.add_argument(
        "--node-lease-seconds",
        type=int,
        default=NODE_LEASE_SECONDS,
        help="kwok's node Lease duration (renewed every quarter of it); longer for large fleets",
    )
    sub.add_parser("down", help="stop every process of the local control plane by PID")
    sub.add_parser("status", help="PIDs, health and versions; exit 1 unless all are healthy")
    fl = sub.add_parser("fleet", help="create/update the simulated GPU nodes (kwok)")
    _fleet_args(fl)
    fl.add_argument("--dry-run", action="store_true", help="print the Node objects as YAML")
    fl.add_argument("--no-prune", action="store_true", help="keep nodes this spec drops")
    kc = sub.add_parser("kind-config", help="print a kind cluster config with the fleet's labels")
    _fleet_args(kc)
    kc.add_argument("--name", default="slurmkube-e2e", help="kind cluster name")
    kc.add_argument("--image", help="kind node image (default: the kind release's own)")
    sub.add_parser("demo", help="helm install, a SlurmCluster on the local nodes, a gang job")
    sub.add_parser("demo-down", help="remove what `demo` made (drain first), stop its operator")
    sub.add_parser(
        "advertise-gpus", help="patch nvidia.com/gpu capacity into labelled real nodes (kind)"
    )
    real = sub.add_parser("real-nodes-up", help="join real kubelets (containerd, fake GPUs)")
    real.add_argument("--count", type=int, default=4, help="how many real nodes (1..8)")
    sub.add_parser("real-nodes-down", help="stop the real nodes and remove what they left")
    sub.add_parser("real-nodes-status", help="real nodes' PIDs and readiness")
    # The local pod runtime's commands (logs, exec) live with the runtime.
    runtime_cli.register(sub)
    args = parser.parse_args(argv)
    if args.command in runtime_cli.RUNTIME_COMMANDS:
        return runtime_cli.dispatch(args)

    layout = Layout.from_env()
    try:
        if args.command == "up":
            if args.node_lease_seconds < NODE_LEASE_SECONDS:
                parser.error(f"--node-lease-seconds must be >= {NODE_LEASE_SECONDS}")
            LocalCluster(layout, args.node_lease_seconds).up(_spec(args))
        elif args.command == "down":
            LocalCluster(layout).down()
        elif args.command == "status":
            return 0 if LocalCluster(layout).status() else 1
        elif args.command == "fleet":
            spec = _spec(args)
            if args.dry_run:
                print(yaml.safe_dump_all(fleet.manifests(spec), sort_keys=False), end="")
                return 0
            kubeconfig = Path(os.environ.get("KUBECONFIG", layout.kubeconfig))
            names = apply_fleet(kubeconfig, spec, prune=not args.no_prune)
            wait_nodes_ready(kubeconfig, names, timeout=120)
            print(f"fleet {spec.name}: {len(names)} nodes Ready")
        elif args.command == "real-nodes-up":
            RealNodes(layout).up(args.count)
        elif args.command == "real-nodes-down":
            RealNodes(layout).down()
        elif args.command == "real-nodes-status":
            return 0 if RealNodes(layout).status() else 1
        elif args.command == "demo":
            return demo.up(layout)
        elif args.command == "demo-down":
            return demo.down(layout)
        elif args.command == "kind-config":
            config = fleet.kind_cluster_config(_spec(args), args.name, args.image)
            print(yaml.safe_dump(config, sort_keys=False), end="")
        elif args.command == "advertise-gpus":
            kubeconfig = Path(os.environ.get("KUBECONFIG", layout.kubeconfig))
            for name in advertise_gpus(Kube(kubeconfig)):
                print(f"advertised {fleet.GPU_RESOURCE} on {name}")
    except (
        ClusterError,
        RealNodeError,
        ValueError,
        demo.DemoError,
        WaitTimeout,
        KubectlError,
    ) as err:
        print(f"slurmkube-e2e {args.command}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
