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

from slurmkube import SLURM_VERSION, __version__, cli_goodput, cli_operator
from slurmkube.api.documents import ClusterBundle, DocumentError, parse_cluster, parse_nodes
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
    from slurmkube.render.files import render_topology, render_topology_conf, render_topology_yaml
    from slurmkube.topology.kueue import kueue_topology, resource_flavors

    try:
        nodes = parse_nodes(_load_yaml(args.nodes))
        bundle = _cluster_or_default(args.cluster)
        spec = bundle.cluster.spec.topology
        if args.format == "kueue":
            name = bundle.cluster.metadata.name
            docs = [kueue_topology(name, spec), *resource_flavors(bundle, name)]
            if not args.cluster:
                docs = docs[:1]
            print(yaml.safe_dump_all(docs, sort_keys=False), end="")
            return 0
        cluster = bundle.cluster
        if args.format in ("block", "tree"):
            cluster = cluster.model_copy(
                update={
                    "spec": cluster.spec.model_copy(
                        update={"topology": spec.model_copy(update={"plugin": args.format})}
                    )
                }
            )
        config = plan_config(ClusterBundle(cluster, bundle.node_sets), nodes)
    except (DocumentError, InvalidValue) as err:
        raise UsageError(str(err)) from err
    renderers = {
        None: render_topology,
        "yaml": render_topology_yaml,
        "block": render_topology_conf,
        "tree": render_topology_conf,
    }
    print(renderers[args.format](config), end="")
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


def _cluster_or_default(path: str | None) -> ClusterBundle:
    """The SlurmCluster in `path`; none given: every node, in one NodeSet, with
    default label keys and defaults everywhere else."""
    return parse_cluster(_load_yaml(path) if path else _default_cluster_documents())


def _health(args: argparse.Namespace) -> int:
    from slurmkube.plan.health import plan_health
    from slurmkube.plan.health_model import HealthSnapshot, SlurmHealthView, health_node

    try:
        nodes = parse_nodes(_load_yaml(args.nodes))
        spec = _cluster_or_default(args.cluster).cluster.spec
        # No cluster to ask: each node as a Slurm node that runs a job, not drained,
        # with no health history, so the worst first pass shows.
        assumed = SlurmHealthView(drain=False, reason="", busy=True)
        domain = spec.topology.nvlink_domain_label
        snapshot = HealthSnapshot(tuple(health_node(n, domain, assumed) for n in nodes))
    except (DocumentError, InvalidValue) as err:
        raise UsageError(str(err)) from err
    plan = plan_health(snapshot, spec.health)
    print(
        "# assuming each node is in Slurm, not drained, running a job, with no health history",
        file=sys.stderr,
    )
    if not spec.health.rules:
        print("# note: spec.health.rules is empty: no signal makes a node sick", file=sys.stderr)
    width = max((len(v.node) for v in plan.verdicts), default=0)
    for v in plan.verdicts:
        why = f" ({v.severity}: {', '.join(v.causes)})" if v.severity else ""
        wait = " [waits: circuit breaker open]" if v.waiting else ""
        todo = "; ".join(a.describe() for a in v.actions) or "nothing"
        print(f"{v.node:<{width}}  {v.verdict}{why}{wait} -> {todo}")
    for e in plan.escalations:
        print(f"domain {e.domain}: {e.out} of {len(e.nodes)} nodes out -> withhold from gangs")
    circuit = plan.circuit
    if circuit.open:
        print(
            f"circuit breaker open: {circuit.acted} of at most {circuit.allowed} nodes acted on; "
            f"waiting: {', '.join(circuit.waiting)}"
        )
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


def _crds(args: argparse.Namespace) -> int:
    from slurmkube.api.crd import crds

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, crd in crds().items():
        text = "# Generated by `slurmkube crds` from slurmkube.api.models; do not edit.\n"
        text += yaml.safe_dump(crd, sort_keys=False, width=100)
        (out / name).write_text(text, encoding="utf-8")
        print(f"wrote {out / name}")
    return 0


def _load_one(path: str | None) -> Any:
    if path is None:
        return None
    documents = [d for d in _load_yaml(path) if d is not None]
    if len(documents) != 1:
        raise UsageError(f"{path}: expected one document, found {len(documents)}")
    return documents[0]


def _policy_plan(args: argparse.Namespace) -> int:
    from slurmkube.plan.policy import PolicyError, plan_text, policy_from_object
    from slurmkube.plan.policy.sources import SourceAnswers

    answers = SourceAnswers(
        document=_load_one(args.teams),
        coldfront_allocations=_load_one(args.coldfront_allocations),
        coldfront_projects=_load_one(args.coldfront_projects),
    )
    try:
        policy = policy_from_object(_load_one(args.source), args.source, answers)
    except (PolicyError, InvalidValue) as err:
        raise UsageError(str(err)) from err
    print(plan_text(policy), end="")
    return 0


def _policy_status(args: argparse.Namespace) -> int:
    from slurmkube.api import well_known as wk
    from slurmkube.kube.client import Kube, load_config
    from slurmkube.plan.policy.output import status_text

    obj = Kube(load_config(os.environ.get("KUBECONFIG"))).get(
        wk.API_VERSION, "AllocationSource", args.name, args.namespace
    )
    if obj is None:
        raise UsageError(f"AllocationSource {args.namespace}/{args.name} not found")
    print(status_text(obj), end="")
    return 0


def _policy_schema(_: argparse.Namespace) -> int:
    from slurmkube.plan.policy.sources import document_schema_text

    print(document_schema_text(), end="")
    return 0


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
        "render",
        help="render slurm.conf, gres.conf, cgroup.conf and topology.conf (Slurm 24.11) "
        "or topology.yaml (25.05+)",
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
    topology.add_argument(
        "--format",
        choices=["block", "tree", "yaml", "kueue"],
        help="topology.conf as block or tree, topology.yaml (Slurm 25.05+: both, "
        "the cluster's plugin as default), or the Kueue Topology and ResourceFlavors; "
        "default: the file the cluster's Slurm release reads",
    )
    topology.set_defaults(func=_topology)

    health = sub.add_parser(
        "health", help="print each node's health verdict and the action it would get"
    )
    health.add_argument("--nodes", required=True, help="YAML of Node objects")
    health.add_argument("--cluster", help="YAML with a SlurmCluster (its spec.health)")
    health.set_defaults(func=_health)

    crd = sub.add_parser("crds", help="write the CRDs generated from the API models")
    crd.add_argument("--out", default="crds", help="directory (default: crds)")
    crd.set_defaults(func=_crds)

    policy = sub.add_parser("policy", help="the allocation policy on Slurm and Kueue")
    policy_sub = policy.add_subparsers(dest="policy_command", required=True)
    plan = policy_sub.add_parser(
        "plan", help="print what Slurm (sacctmgr) and Kueue (YAML) would get, without a cluster"
    )
    plan.add_argument(
        "--source",
        required=True,
        help="YAML/JSON: an AllocationSource with inline teams, or an allocations document",
    )
    plan.add_argument("--teams", help="for an http source: the document it serves (JSON)")
    plan.add_argument(
        "--coldfront-allocations", help="for a coldfront source: GET /api/allocations (JSON)"
    )
    plan.add_argument(
        "--coldfront-projects",
        help="for a coldfront source: GET /api/projects?project_users=true (JSON)",
    )
    plan.set_defaults(func=_policy_plan)
    schema = policy_sub.add_parser(
        "schema", help="print the JSON schema of the allocations document (docs/)"
    )
    schema.set_defaults(func=_policy_schema)
    status = policy_sub.add_parser("status", help="a live AllocationSource's teams and conditions")
    status.add_argument("name")
    status.add_argument("--namespace", "-n", default="default")
    status.set_defaults(func=_policy_status)

    cli_operator.add_parser(sub)

    version = sub.add_parser("version", help="print versions")
    version.set_defaults(func=_version)

    for extension in (cli_goodput.add_parser, *_extensions()):
        extension(sub)
    return parser


def _extensions() -> list[Any]:
    """Subcommands that live with their packages (e.g. `sim`), added when present."""
    try:
        from slurmkube_sim import cli as sim_cli
    except ImportError:
        return []
    return [sim_cli.add_parser]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (UsageError, cli_goodput.GoodputInputError) as err:
        print(f"slurmkube {args.command}: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
