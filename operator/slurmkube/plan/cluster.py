"""The reconcile plan of one SlurmCluster: observed state in, actions out (pure).

Level based (DESIGN.md §4): the plan never asks whether something was created
or updated, it compares what is with what should be. Safety rules live here,
where they are table-tested:

- a node Slurm shows with a job keeps its line, NodeSet and pod until drained
  and idle (plan/holds.py, plan/removal.py), whatever Kubernetes now says;
- when Slurm cannot be asked, no slurmd pod is deleted at all;
- a drain that does not carry our prefix (an admin's) is never undone;
- an invalid spec yields no actions, only a condition that says what to fix;
  a bad node is left out and reported (`node_problems`, NodesValid).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurmkube.api import well_known as wk
from slurmkube.api.grammar import InvalidValue
from slurmkube.api.models import NodeSet
from slurmkube.build.login import login_deployment, login_service
from slurmkube.build.names import Manifest, deployment_context, names_of
from slurmkube.build.slurmctld import (
    config_map,
    controller_service,
    controller_statefulset,
    metrics_service,
)
from slurmkube.build.slurmd import SlurmdResources, slurmd_disruption_budget, slurmd_pod
from slurmkube.build.slurmrestd import (
    restapi_deployment,
    restapi_proxy_config_map,
    restapi_service,
    tls_secret_name,
)
from slurmkube.build.sssd import sssd_config_map
from slurmkube.plan.autoscale import (
    RESUMING,
    Scaling,
    hold_undeployed,
    plan_scaling,
)
from slurmkube.plan.holds import (
    change_drains,
    gpu_problems,
    held_nodes,
    is_stale,
)
from slurmkube.plan.holds import overdue as overdue_nodes
from slurmkube.plan.lost_pods import lost_while_busy
from slurmkube.plan.model import (
    Condition,
    Observed,
    Plan,
    SlurmNodeView,
)
from slurmkube.plan.objects import accounting_objects, kueue_objects
from slurmkube.plan.removal import busy_labels, plan_removal
from slurmkube.plan.rollout import STARTING_LOOK_SECONDS, Rollout, plan_rollout
from slurmkube.plan.topology_status import topology_conditions, topology_summary
from slurmkube.plan.upgrade import plan_upgrade
from slurmkube.plan.upgrade_input import rendered_bundle, upgrade_input
from slurmkube.plan.upgrade_model import LOGIN, SLURMCTLD, SLURMDBD, SLURMRESTD
from slurmkube.render.config import SlurmConfig, plan_config
from slurmkube.render.files import RenderedConfig, render_files
from slurmkube.render.membership import HeldNode, NodeProblem
from slurmkube.topology.model import FleetTopology

DRAIN_REASON = f"{wk.DRAIN_REASON_PREFIX} slurmd pod removal"


@dataclass(frozen=True, slots=True)
class Configured:
    """The cluster's Slurm config as Kubernetes alone decides it (spec, NodeSets,
    Node labels; nothing Slurm reports): rendered first, so a reconcile can write
    the ConfigMap before it asks Slurm anything (controllers/handlers.py)."""

    config: SlurmConfig
    rendered: RenderedConfig
    config_map: Manifest
    accounting: tuple[Manifest, ...]
    # The holds it was made with (plan/holds.py): `plan_cluster` makes it again
    # when the reconcile's read of Slurm asks for other holds.
    held: Mapping[str, HeldNode] = field(default_factory=dict)


def configure(observed: Observed) -> Configured | Condition:
    """The config, or the InvalidSpec condition that says what to fix. Nodes that
    may run a job are held as Slurm registered them (plan/holds.py): call it with
    the reconcile's pods and Slurm nodes, or the config cannot protect them."""
    cluster = observed.bundle.cluster
    held = held_nodes(observed.slurm_nodes, observed.pods, observed.fleet)
    problems: list[NodeProblem] = []
    try:
        config = plan_config(
            rendered_bundle(observed),
            observed.fleet,
            deployment_context(cluster),
            held=held,
            problems=problems,
        )
        accounting = accounting_objects(cluster, observed.database)
    except InvalidValue as err:
        return Condition("ConfigApplied", False, "InvalidSpec", str(err))
    rendered = render_files(config)
    return Configured(
        config,
        rendered,
        config_map(cluster, rendered, config.slurm_version),
        tuple(accounting),
        held,
    )


# Renew the operator's own slurmrestd certificate this long before it ends.
RENEW_BEFORE_S = 30 * 86400.0


def _issues_restapi_tls(observed: Observed) -> bool:
    """The operator issues slurmrestd's certificate when TLS is on, the spec names no
    Secret of its own, and the operator's Secret has none yet or one that ends
    within RENEW_BEFORE_S."""
    rest_api = observed.bundle.cluster.spec.rest_api
    if not rest_api.replicas or not rest_api.tls.enabled or rest_api.tls.secret_name:
        return False
    expires = observed.restapi_tls_expires
    return observed.restapi_tls is None or (
        expires is not None and expires - observed.now < RENEW_BEFORE_S
    )


def plan_cluster(observed: Observed, configured: Configured | Condition | None = None) -> Plan:
    """`configured` is `configure(observed)`, when the caller already has it."""
    bundle = observed.bundle
    cluster = bundle.cluster
    held = held_nodes(observed.slurm_nodes, observed.pods, observed.fleet)
    if configured is None or (
        isinstance(configured, Configured) and is_stale(configured.config, configured.held, held)
    ):
        configured = configure(observed)
    if isinstance(configured, Condition):
        return Plan(
            rendered=None,
            generate_keys=not observed.has_keys,
            issue_restapi_tls=_issues_restapi_tls(observed),
            conditions=(configured,),
        )
    config, rendered, accounting = configured.config, configured.rendered, configured.accounting
    overdue = overdue_nodes(observed.slurm_nodes, observed.not_responding_since, observed.now)
    scaling = _plan_scaling(observed, config.members, config.topology)
    hold: dict[str, str] = {}
    pod_nodes: dict[str, list[str]] = {}
    desired: dict[str, tuple[str, ...]] = {}
    for ns in bundle.node_sets:
        name = ns.metadata.name
        if name in scaling:
            pod_nodes[name] = list(scaling[name].pods)
            # Resuming nodes are on their way: Ready waits for the registered ones only.
            views = observed.slurm_nodes or {}
            desired[name] = tuple(n for n in pod_nodes[name] if _power(views.get(n)) != RESUMING)
        else:
            pod_nodes[name] = desired_slurmd_nodes(ns, config.members[name], observed.unavailable)
            desired[name] = tuple(pod_nodes[name])
            if scaling:
                hold |= hold_undeployed(config.members[name], pod_nodes[name], observed.slurm_nodes)
    upgrade = plan_upgrade(upgrade_input(observed, pod_nodes, config.topology, scaling))
    images = upgrade.images
    objects: list[Manifest] = [
        controller_service(cluster),
        controller_statefulset(cluster, images.of(SLURMCTLD)),
    ]
    if cluster.spec.rest_api.replicas:
        image = images.of(SLURMRESTD)
        objects += [
            restapi_deployment(cluster, image, observed.restapi_tls),
            restapi_service(cluster),
        ]
        if tls_secret_name(cluster):
            objects.append(restapi_proxy_config_map(cluster))
    # Always there, at zero replicas while login is off: switching it off is a
    # scale-down, never an orphan to find and delete.
    objects.append(login_deployment(cluster, images.of(LOGIN)))
    if accounting and images.of(SLURMDBD) != cluster.spec.image:
        accounting = tuple(accounting_objects(cluster, observed.database, images.of(SLURMDBD)))
    objects += accounting
    names = names_of(cluster)
    prune: tuple[tuple[str, str, str], ...] = (
        ()
        if accounting
        else (
            ("apps/v1", "Deployment", names.slurmdbd),
            ("v1", "Service", names.slurmdbd),
            ("v1", "Secret", names.slurmdbd_config),
        )
    )
    if ldap := cluster.spec.login.ldap:
        # The ConfigMap stays when LDAP is turned off (no delete verb on ConfigMaps):
        # nothing mounts it then, and it goes with the SlurmCluster.
        objects += [sssd_config_map(cluster, ldap), login_service(cluster)]
    else:
        prune += (("v1", "Service", names.login),)
    # slurmctld's own OpenMetrics (render: MetricsType) exist from 25.11 on.
    if config.slurm_version.serves_openmetrics:
        objects.append(metrics_service(cluster))
    else:
        prune += (("v1", "Service", names.controller_metrics),)

    problems = gpu_problems(observed.slurm_nodes, observed.fleet)
    problems |= {p.node: p for p in config.problems}
    wanted_pods: dict[str, Manifest] = {}
    rollouts: list[Rollout] = []
    for ns in bundle.node_sets:
        name = ns.metadata.name
        wanted_here = {}
        for node in pod_nodes[name]:
            resources = _resources(config, node, ns)
            pod = slurmd_pod(
                cluster, ns, node, resources, rendered.hash, image=images.of_node(node)
            )
            wanted_here[pod["metadata"]["name"]] = pod
        wanted_pods |= wanted_here
        if name not in scaling:
            # Autoscaled pods are replaced as Slurm suspends and resumes their nodes.
            pods_here = [p for p in observed.pods if p.node_set == name]
            rollouts.append(plan_rollout(ns, pods_here, wanted_here, observed.slurm_nodes, overdue))

    existing = {p.name: p for p in observed.pods}
    create = tuple(m for name, m in sorted(wanted_pods.items()) if name not in existing)
    removal = plan_removal(observed.pods, wanted_pods, observed.slurm_nodes, scaling, overdue)
    drain = list(removal.drain)
    delete = list(removal.delete_pods)
    for rollout in rollouts:
        drain += rollout.drain
        delete += rollout.delete_pods
    # Held nodes whose change waits: drained first, kept drained until it lands.
    reasons = change_drains(config, observed.slurm_nodes, problems)
    reasons |= {n: upgrade.reason for n in upgrade.drain if n not in reasons}
    drain += [n for n in reasons if n not in drain]
    conditions = (*topology_conditions(config.topology), nodes_valid(problems))
    return Plan(
        rendered=rendered,
        config=config,
        generate_keys=not observed.has_keys,
        issue_restapi_tls=_issues_restapi_tls(observed),
        config_map=configured.config_map,
        objects=tuple(objects),
        prune=prune,
        create_pods=create,
        drain=tuple(drain),
        delete_pods=tuple(delete),
        delete_once_drained=removal.delete_once_drained,
        drain_reasons=reasons,
        rolling=frozenset(config.held).union(upgrade.holding, *(r.holding for r in rollouts)),
        look_again_seconds=STARTING_LOOK_SECONDS if any(r.starting for r in rollouts) else None,
        pods_go_when_idle=removal.go_when_idle.union(*(r.go_when_idle for r in rollouts)),
        awaited=_awaited(desired, scaling, observed.slurm_nodes),
        desired=desired,
        members={ns: tuple(nodes) for ns, nodes in config.members.items()},
        conditions=conditions if upgrade.condition is None else (*conditions, upgrade.condition),
        node_problems=tuple(problems[n] for n in sorted(problems)),
        kueue_objects=kueue_objects(bundle),
        disruption_budgets=tuple(slurmd_disruption_budget(cluster, ns) for ns in bundle.node_sets),
        topology_summary=topology_summary(config, rendered),
        slurm_version=str(config.slurm_version),
        scaling=scaling,
        hold=hold,
        busy_labels=busy_labels(observed.pods, observed.slurm_nodes),
        down_lost=lost_while_busy(
            (m["metadata"]["labels"][wk.LABEL_NODE] for m in create), observed.slurm_nodes
        ),
        ready_node_share=cluster.spec.ready_node_share,
        upgrade=upgrade.status,
        maintenance=upgrade.reservations,
        maintenance_release=upgrade.release,
    )


def _resources(config: SlurmConfig, node: str, node_set: NodeSet) -> SlurmdResources:
    """What the slurmd pod requests: the GPUs of its slurm.conf line, and with
    podQoS Guaranteed its CPUs and memory too."""
    shape = config.shape_of[node]
    gpus = int(shape.gres.rsplit(":", 1)[1]) if shape.gres else 0
    if node_set.spec.pod_qos != "Guaranteed":
        return SlurmdResources(gpus=gpus)
    return SlurmdResources(cpus=shape.cpus, memory_mib=shape.real_memory, gpus=gpus)


def nodes_valid(problems: Mapping[str, NodeProblem]) -> Condition:
    """One condition for every per-node problem; the list is status.nodeProblems."""
    if not problems:
        return Condition("NodesValid", True, "AllValid", "no node left out or held")
    sample = ", ".join(f"{n} ({problems[n].reason})" for n in sorted(problems)[:10])
    return Condition("NodesValid", False, "NodeProblems", f"{len(problems)} nodes: {sample}")


def _awaited(
    desired: Mapping[str, tuple[str, ...]],
    scaling: Mapping[str, Scaling],
    slurm_nodes: Mapping[str, SlurmNodeView] | None,
) -> frozenset[str]:
    """Desired nodes of NodeSets that do not autoscale whose slurmd Slurm does not
    hear (yet): a new pod's registration is no Kubernetes event. Autoscaled ones
    are polled anyway; without Slurm's answer the poll's own flip reconciles."""
    if slurm_nodes is None:
        return frozenset()
    return frozenset(
        node
        for name, nodes in desired.items()
        if name not in scaling
        for node in nodes
        if node not in slurm_nodes or not slurm_nodes[node].responding
    )


def _power(view: SlurmNodeView | None) -> str:
    return "" if view is None else view.power


def _plan_scaling(
    observed: Observed, members: Mapping[str, Sequence[str]], topology: FleetTopology
) -> dict[str, Scaling]:
    blocks: dict[str, str] = {n: b.name for b in topology.blocks for n in b.nodes}
    with_pod = {p.node for p in observed.pods if not p.deleting}
    return {
        ns.metadata.name: plan_scaling(
            ns.spec.autoscaling,
            members[ns.metadata.name],
            observed.slurm_nodes,
            observed.unavailable,
            blocks=blocks,
            with_pod=with_pod,
        )
        for ns in observed.bundle.node_sets
        if ns.spec.autoscaling.enabled
    }


def undrain_candidates(
    desired: Mapping[str, tuple[str, ...]], slurm_nodes: Mapping[str, SlurmNodeView]
) -> list[str]:
    """Nodes we drained that are wanted again (scale-in undone): resume them.

    Not health's drains: a sick node comes back only through plan.health."""
    wanted = {n for nodes in desired.values() for n in nodes}
    return sorted(
        n
        for n, s in slurm_nodes.items()
        if n in wanted and s.drained_by_us and not wk.is_health_drain(s.reason)
    )


def desired_slurmd_nodes(
    node_set: NodeSet, members: Sequence[str], unavailable: Mapping[str, str]
) -> list[str]:
    """Which member nodes run slurmd: the first `replicas` available ones, in node order.

    `unavailable` maps a node to why it cannot (cordoned, lent to Kueue); such
    nodes are skipped, not counted.
    """
    eligible = [n for n in members if n not in unavailable]
    replicas = node_set.spec.replicas
    return eligible if replicas is None else eligible[:replicas]


# Kinds a pod mounts: applied before the workloads that mount them. A real kubelet
# that finds a ConfigMap or Secret volume missing retries with a back-off of up
# to two minutes, so a pod made a moment before its config waits that long.
MOUNTED_KINDS = frozenset({"ConfigMap", "Secret"})


def mounted_first(objects: Sequence[Manifest]) -> tuple[Manifest, ...]:
    """`objects` in apply order: ConfigMaps and Secrets first, each group in its order."""
    return tuple(sorted(objects, key=lambda o: o.get("kind") not in MOUNTED_KINDS))
