"""The upgrade planner's input, from a reconcile's observation (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from slurmkube.api.documents import ClusterBundle
from slurmkube.api.slurm_version import image_series
from slurmkube.plan.autoscale import Scaling
from slurmkube.plan.model import Observed
from slurmkube.plan.upgrade import UpgradeInput
from slurmkube.plan.upgrade_model import SLURMCTLD, SLURMDBD, SLURMRESTD, ComponentView
from slurmkube.plan.upgrade_slurmd import NodeSetNodes
from slurmkube.topology.model import FleetTopology


def upgrade_input(
    observed: Observed,
    pod_nodes: Mapping[str, Sequence[str]],
    topology: FleetTopology,
    scaling: Mapping[str, Scaling],
) -> UpgradeInput:
    """`pod_nodes`: per NodeSet, the nodes that should run slurmd; `topology`: the
    config's (its blocks are the NVLink domains a slurmd upgrade keeps whole)."""
    cluster = observed.bundle.cluster
    return UpgradeInput(
        subject=f"SlurmCluster {cluster.metadata.name} spec.image",
        to=cluster.spec.image,
        components=_built(observed),
        pods=observed.pods,
        slurm_nodes=observed.slurm_nodes,
        node_sets=tuple(
            NodeSetNodes(
                ns.metadata.name,
                tuple(pod_nodes[ns.metadata.name]),
                ns.spec.update_strategy,
                autoscaled=ns.metadata.name in scaling,
            )
            for ns in observed.bundle.node_sets
        ),
        blocks={n: b.name for b in topology.blocks for n in b.nodes},
        memory=observed.upgrade_memory,
        reservations=observed.reservations,
        now=observed.now,
        state_kept=cluster.spec.controller.persistence.enabled,
    )


def _built(observed: Observed) -> dict[str, ComponentView]:
    """The observed objects the plan still builds: a slurmrestd scaled to nothing or
    a slurmdbd without accounting is not applied, so never rolls out."""
    spec = observed.bundle.cluster.spec
    dropped = {SLURMRESTD} if not spec.rest_api.replicas else set()
    dropped |= {SLURMDBD} if not spec.accounting.enabled else set()
    return {n: c for n, c in observed.components.items() if n not in dropped}


def config_image(observed: Observed) -> str:
    """The image whose Slurm the rendered config must suit: the oldest release that
    a daemon reading it runs. That is slurmctld's until it runs spec.image rolled
    out (a 24.11 slurmctld cannot read what only 26.05 reads), and after it the
    oldest slurmd pod's, slurmrestd's or a login pod's: a configless 24.11 slurmd
    or sackd fetches the file on every reconfigure and dies on a 26.05 key
    (`MetricsType`), its running job with it. slurmdbd reads its own file.
    `configure` renders for it (`rendered_bundle`)."""
    wanted = observed.bundle.cluster.spec.image
    chosen = _slurmctld_config_image(observed, wanted)
    readers = [c.image for n, c in observed.components.items() if n != SLURMDBD and c.image]
    readers += [p.image or wanted for p in observed.pods]
    # The file's keys differ by series, not patch; a tag naming no version is skipped.
    ceiling = image_series(chosen)
    older = [
        (series, image)
        for image in readers
        if ceiling is not None and (series := image_series(image)) is not None and series < ceiling
    ]
    return min(older)[1] if older else chosen


def _slurmctld_config_image(observed: Observed, wanted: str) -> str:
    ctld = observed.components.get(SLURMCTLD)
    if ctld is None or not ctld.image or (ctld.image == wanted and ctld.rolled_out):
        return wanted
    memory = observed.upgrade_memory
    if ctld.image == wanted and memory is not None and memory.to_image == wanted:
        return memory.from_image  # replaced right now: its old pod may still read it
    return ctld.image


def rendered_bundle(observed: Observed) -> ClusterBundle:
    """The bundle the config is rendered from: during an upgrade, for the release of
    the image slurmctld still runs (its tag's series, else spec.slurm.version)."""
    bundle = observed.bundle
    spec = bundle.cluster.spec
    image = config_image(observed)
    if image == spec.image:
        return bundle
    series = image_series(image)
    slurm = spec.slurm.model_copy(update={"version": str(series)}) if series else spec.slurm
    older = spec.model_copy(update={"image": image, "slurm": slurm})
    return replace(bundle, cluster=bundle.cluster.model_copy(update={"spec": older}))
