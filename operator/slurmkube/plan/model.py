"""What the cluster plan reads and returns: the observed state (`Observed`, with
the views of Slurm nodes and slurmd pods the controller converts) and the
`Plan` its apply carries out (plan/cluster.py makes it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurmkube.api import well_known as wk
from slurmkube.api.documents import ClusterBundle
from slurmkube.build.names import Manifest
from slurmkube.plan.autoscale import Scaling
from slurmkube.plan.upgrade_model import (
    ComponentView,
    MaintenanceReservation,
    ReservationView,
    UpgradeMemory,
    UpgradeStatus,
)
from slurmkube.render.config import SlurmConfig
from slurmkube.render.files import RenderedConfig
from slurmkube.render.membership import NodeProblem
from slurmkube.render.slurmdbd import DatabaseCredentials
from slurmkube.topology.fleet import FleetNode


@dataclass(frozen=True, slots=True)
class SlurmNodeView:
    """What the plan needs of a Slurm node (the controller converts the adapter's Node)."""

    name: str
    busy: bool  # ALLOCATED, MIXED or COMPLETING: a job runs there
    drain: bool
    reason: str = ""
    responding: bool = True
    # sinfo's state, folded: idle, allocated, mixed, drain, down or cloud (powered down).
    state: str = "idle"
    gpus: int = 0
    gpus_allocated: int = 0
    # Where Slurm's power saving has the node (plan.autoscale.POWER_STATES).
    power: str = "up"
    down: bool = False  # DOWN or FAIL: Slurm will not schedule there
    # The shape slurmctld has for the node (slurmrestd's cpus, real_memory and the
    # GRES type of `gres`; `gpus` is its count): what a running job was placed on.
    # cpus 0: not known (the config then holds only the node's membership).
    cpus: int = 0
    real_memory: int = 0
    gpu_type: str = ""
    # When a job last ran there (epoch seconds; 0: unknown): SuspendTime counts from it.
    last_busy: float = 0.0
    # The `Topology=` slurmctld holds over the files (a live move); "" for none.
    topology: str = ""

    @property
    def drained_by_us(self) -> bool:
        return self.drain and wk.is_ours(self.reason)


@dataclass(frozen=True, slots=True)
class PodView:
    name: str
    node: str
    node_set: str
    deleting: bool = False
    ready: bool = False
    # Annotation slurmkube.io/pod-template-hash ("" on pods made before it existed).
    template_hash: str = ""
    # The pod's slurmkube.io/SlurmNode condition as (status, reason, message), if set.
    slurm_condition: tuple[bool, str, str] | None = None
    # Its label slurmkube.io/busy is "true" (the PodDisruptionBudget guards it).
    busy_label: bool = False
    # The slurmd container's image ("": not known, taken as spec.image).
    image: str = ""


@dataclass(frozen=True, slots=True)
class Observed:
    bundle: ClusterBundle
    fleet: Sequence[FleetNode]
    pods: Sequence[PodView]
    # None: Slurm could not be asked this time.
    slurm_nodes: Mapping[str, SlurmNodeView] | None
    # Nodes that may not run slurmd and why (lent to Kueue, cordoned).
    unavailable: Mapping[str, str] = field(default_factory=dict)
    # The external database's login (spec.accounting.database.secretName);
    # None when accounting is off or the Secret lacks a key.
    database: DatabaseCredentials | None = None
    # The cluster's slurm.key and jwt.key exist (its own Secret, or those the spec names).
    has_keys: bool = True
    # A digest of slurmrestd's certificate (spec.restApi.tls); None: TLS is off or
    # its Secret holds no certificate yet.
    restapi_tls: str | None = None
    # When that certificate expires (epoch seconds; None: no certificate or unreadable).
    restapi_tls_expires: float | None = None
    # Epoch seconds of this observation, and since when each node Slurm shows not
    # responding has been seen so (the controller remembers it across reconciles).
    # Unknown: a busy node Slurm does not reach keeps its pod (plan/holds.py).
    now: float = 0.0
    not_responding_since: Mapping[str, float] = field(default_factory=dict)
    # The control plane's objects as they run (plan/upgrade_model.py; absent: not
    # made yet), the status.upgrade last written, and our maintenance reservations
    # in Slurm (None: not read, no NodeSet has an update window).
    components: Mapping[str, ComponentView] = field(default_factory=dict)
    upgrade_memory: UpgradeMemory | None = None
    reservations: Mapping[str, ReservationView] | None = None


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Plan:
    rendered: RenderedConfig | None
    # What `rendered` was made from: the controller keeps the config in force, so
    # that the next reconcile may write a config early only when no line shrinks.
    config: SlurmConfig | None = None
    # Generate the cluster's keys into its auth Secret (apply makes them, once).
    generate_keys: bool = False
    # Issue slurmrestd's certificate into `<cluster>-restapi-tls`: none yet, or the
    # operator's own ends within RENEW_BEFORE_S (a renewal).
    issue_restapi_tls: bool = False
    # The rendered config's ConfigMap (None with `rendered`), apart from `objects`:
    # written before the rest of the plan is even made (controllers/apply.py).
    config_map: Manifest | None = None
    objects: tuple[Manifest, ...] = ()
    # (apiVersion, kind, name) of objects that must not exist (accounting off).
    prune: tuple[tuple[str, str, str], ...] = ()
    create_pods: tuple[Manifest, ...] = ()
    drain: tuple[str, ...] = ()  # Slurm nodes to drain before their pod goes
    # node -> drain reason where it is not DRAIN_REASON (a change or a health event).
    drain_reasons: Mapping[str, str] = field(default_factory=dict)
    delete_pods: tuple[str, ...] = ()
    # node -> slurmd pod, of the nodes drained now whose pod goes once drained: apply
    # deletes it in the same pass if Slurm, asked again after the drain, shows the
    # node drained with no job (an idle node then costs one reconcile, not two).
    delete_once_drained: Mapping[str, str] = field(default_factory=dict)
    # Nodes drained for a change under way (a pod replacement, a held config
    # change, a GPU health event): not to be resumed yet.
    rolling: frozenset[str] = frozenset()
    # Seconds until the reconcile should look again although no event may come
    # (a rollout waiting on a replacement to start: plan/rollout.py); None: the resync.
    look_again_seconds: float | None = None
    # Drained nodes whose slurmd pod goes once their job ends (a scale-in, a
    # rollout): the poll reconciles when Slurm shows one idle (plan/slurm_poll.py).
    pods_go_when_idle: frozenset[str] = frozenset()
    # Nodes that should run slurmd (not autoscaled) whose slurmd Slurm does not
    # hear yet: the poll reconciles when one registers (plan/slurm_poll.py).
    awaited: frozenset[str] = frozenset()
    # Nodes the config leaves out or holds, one problem each (status.nodeProblems).
    node_problems: tuple[NodeProblem, ...] = ()
    # Ready needs this share of `desired` to respond (spec.readyNodeShare).
    ready_node_share: float = 1.0
    # slurmd pod -> the value its slurmkube.io/busy label must take (changes only).
    busy_labels: Mapping[str, bool] = field(default_factory=dict)
    # Nodes set DOWN before their slurmd pod is made again: Slurm shows a job the
    # lost pod took with it (plan/lost_pods.py).
    down_lost: tuple[str, ...] = ()
    conditions: tuple[Condition, ...] = ()
    # Per NodeSet: the nodes that should run slurmd, and every node it selects
    # (the rest of `members` is State=CLOUD in slurm.conf).
    desired: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    members: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Per NodeSet, the PodDisruptionBudget of its busy slurmd pods (build/slurmd.py).
    disruption_budgets: tuple[Manifest, ...] = ()
    # Kueue Topology and ResourceFlavors (cluster-scoped, so not owned: see controllers).
    kueue_objects: tuple[Manifest, ...] = ()
    # "topology.conf <hash> (topology/block, N blocks)" or, for topology.yaml, its
    # named topologies, for the TopologyApplied condition.
    topology_summary: str = ""
    # The Slurm release the config is rendered for (status.slurmVersion).
    slurm_version: str = ""
    # Autoscaled NodeSets (plan.autoscale): what Slurm is asked to do, per NodeSet.
    scaling: Mapping[str, Scaling] = field(default_factory=dict)
    # Powered-down nodes of NodeSets driven by `replicas`, held while power saving is on.
    hold: Mapping[str, str] = field(default_factory=dict)
    # A Slurm upgrade (plan/upgrade.py): status.upgrade, and the MAINT reservations
    # of update windows to create or update, and to delete.
    upgrade: UpgradeStatus | None = None
    maintenance: tuple[MaintenanceReservation, ...] = ()
    maintenance_release: tuple[str, ...] = ()
