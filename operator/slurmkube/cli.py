"""The `slurmkube` command: render configs for GitOps and humans, print versions.

Thin: parse arguments, read YAML, call the pure packages, write files. Bad
input exits 2 with one line naming the object and field; nothing is written
unless everything rendered.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from slurmkube import SLURM_VERSION, __version__
from slurmkube.api.documents import DocumentError, parse_cluster, parse_nodes
from slurmkube.api.grammar import InvalidValue
from slurmkube.render import plan_config, render_files


class UsageError(Exception):
    """Input the user can fix; printed without a traceback."""


def _load_yaml(path: str) -> list[Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            return list(yaml.safe_load_all(handle))
    except OSError as err:
        raise UsageError(f"{path}: {err.strerror}") from err
    except yaml.YAMLError as err:
        raise UsageError(f"{path}: not valid YAML: {err}") from err


def _render(args: argparse.Namespace) -> int:
    try:
        bundle = parse_cluster(_load_yaml(args.cluster))
        nodes = parse_nodes(_load_yaml(args.nodes))
        rendered = render_files(plan_config(bundle, nodes))
    except (DocumentError, InvalidValue) as err:
        raise UsageError(str(err)) from err
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in sorted(rendered.files.items()):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out / name)
    print(f"wrote {', '.join(sorted(rendered.files))} to {out} (config hash {rendered.hash[:12]})")
    return 0


def _topology(args: argparse.Namespace) -> int:
    from slurmkube.api.documents import ClusterBundle
    from slurmkube.render.files import render_topology_conf
    from slurmkube.topology.kueue import kueue_topology, resource_flavors

    try:
        nodes = parse_nodes(_load_yaml(args.nodes))
        if args.cluster:
            bundle = parse_cluster(_load_yaml(args.cluster))
        else:
            # No cluster given: every node, in one NodeSet, with default label keys.
            bundle = parse_cluster(_default_cluster_documents())
        spec = bundle.cluster.spec.topology
        if args.format == "kueue":
            name = bundle.cluster.metadata.name
            docs = [kueue_topology(name, spec), *resource_flavors(bundle, name)]
            if not args.cluster:
                docs = docs[:1]
            print(yaml.safe_dump_all(docs, sort_keys=False), end="")
            return 0
        cluster = bundle.cluster.model_copy(
            update={
                "spec": bundle.cluster.spec.model_copy(
                    update={"topology": spec.model_copy(update={"plugin": args.format})}
                )
            }
        )
        config = plan_config(ClusterBundle(cluster, bundle.node_sets), nodes)
    except (DocumentError, InvalidValue) as err:
        raise UsageError(str(err)) from err
    print(render_topology_conf(config), end="")
    topo = config.topology
    notes = [
        f"{len(topo.nodes_without_domain)} nodes without an NVLink domain label"
        if topo.nodes_without_domain
        else "",
        f"domains below the base block size, left out: {', '.join(topo.undersized_blocks)}"
        if topo.undersized_blocks
        else "",
        *(p.message for p in topo.problems),
    ]
    for note in filter(None, notes):
        print(f"# note: {note}", file=sys.stderr)
    return 0


def _default_cluster_documents() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "slurmkube.io/v1alpha1",
            "kind": "SlurmCluster",
            "metadata": {"name": "fleet"},
            "spec": {},
        },
        {
            "apiVersion": "slurmkube.io/v1alpha1",
            "kind": "NodeSet",
            "metadata": {"name": "all"},
            "spec": {"clusterRef": "fleet", "nodeSelector": {}},
        },
    ]


def _version(_: argparse.Namespace) -> int:
    import kopf
    import pydantic

    print(f"slurmkube {__version__}")
    print(f"slurm {SLURM_VERSION} (built and tested against)")
    print(f"python {sys.version.split()[0]}")
    print(f"kopf {getattr(kopf, '__version__', 'unknown')}, pydantic {pydantic.VERSION}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="slurmkube", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    render = sub.add_parser(
        "render", help="render slurm.conf, gres.conf, cgroup.conf, topology.conf"
    )
    render.add_argument(
        "--cluster", required=True, help="YAML with a SlurmCluster and its NodeSets"
    )
    render.add_argument(
        "--nodes", required=True, help="YAML of Node objects (`kubectl get nodes -o yaml`)"
    )
    render.add_argument("--out", required=True, help="directory to write the files into")
    render.set_defaults(func=_render)

    topology = sub.add_parser(
        "topology", help="print the topology slurmkube would apply (Slurm or Kueue)"
    )
    topology.add_argument("--nodes", required=True, help="YAML of Node objects")
    topology.add_argument("--cluster", help="YAML with a SlurmCluster and its NodeSets")
    topology.add_argument("--format", choices=["block", "tree", "kueue"], default="block")
    topology.set_defaults(func=_topology)

    version = sub.add_parser("version", help="print versions")
    version.set_defaults(func=_version)

    for extension in _extensions():
        extension(sub)
    return parser


def _extensions() -> list[Any]:
    """Subcommands that live with their packages (e.g. `sim`), added when present."""
    found: list[Any] = []
    try:
        from slurmkube.sim import cli as sim_cli
    except ImportError:
        return found
    found.append(sim_cli.add_parser)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except UsageError as err:
        print(f"slurmkube {args.command}: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
