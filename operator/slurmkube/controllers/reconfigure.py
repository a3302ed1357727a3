"""Is the delivered config in force in slurmctld? The controller's side of
`plan/reconfigure.py`: Slurm's evidence read, and `scontrol reconfigure` only
as a backstop once the window has passed.

The ConfigMap is written by `apply.deliver_config`; the reloader in the
slurmctld pod normally reconfigures within a second or two of the files
landing. Here the operator looks for the config in Slurm (the load time, and
with an `scontrol` of slurmctld's release the topology shown) and says so in
`ConfigApplied`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from slurmkube import metrics
from slurmkube.api.slurm_version import SlurmVersion
from slurmkube.controllers.observe import Snapshot
from slurmkube.kube.client import Kube
from slurmkube.plan.model import Condition, Plan
from slurmkube.plan.reconfigure import (
    ConfigClock,
    asks_scontrol,
    loaded_since,
    seconds_left,
    topologies_shown,
    topology_shown,
)
from slurmkube.render.files import TOPOLOGY_CONF, TOPOLOGY_YAML
from slurmkube.slurm.cli import CliClient
from slurmkube.slurm.errors import SlurmError
from slurmkube.slurm.rest import RestClient
from slurmkube.slurm.topology_text import parse_topology, parse_topology_yaml

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ConfigDelivery:
    """What confirming a delivered config needs: its clock (`apply.deliver_config`), the
    cluster's scontrol, and the window after which the operator reconfigures
    itself (`Settings.propagation_seconds`: the pod's reloader normally applies a
    change within a second or two; once, because each reconfigure re-executes
    slurmctld's internals, and a job ending meanwhile was seen stuck in COMPLETING)."""

    clock: ConfigClock | None
    scontrol: Callable[[], CliClient | None]
    window: float


def config_in_force(
    plan: Plan, clock: ConfigClock, rest: RestClient, scontrol: CliClient | None
) -> bool:
    """Evidence that slurmctld has the config in force (plan/reconfigure.py): from
    scontrol when it is of slurmctld's release, else the load time over REST."""
    assert plan.rendered is not None
    cli = scontrol if asks_scontrol(_release(scontrol), plan.slurm_version) else None
    try:
        loaded_at = (cli or rest).config_loaded_at()
        if not loaded_since(clock, loaded_at):
            log.info(
                "config not in force yet hash=%s loaded_at=%s written_at=%s",
                clock.hash[:12],
                loaded_at.isoformat(),
                clock.written_at.isoformat(),
            )
            return False
        if cli is not None and not topology_in_force(plan.rendered.files, cli):
            log.info("config not in force yet hash=%s topology differs", clock.hash[:12])
            return False
        return True
    except SlurmError as err:
        log.info("config check failed error=%s", err)
        return False


def _release(scontrol: CliClient | None) -> SlurmVersion | None:
    """The operator's scontrol's release; None without one that answers `--version`."""
    if scontrol is None:
        return None
    try:
        return scontrol.release()
    except SlurmError as err:
        log.info("scontrol release unknown error=%s", err)
        return None


def topology_in_force(files: Mapping[str, str], scontrol: CliClient) -> bool:
    """The rendered topology file's blocks and switches, as Slurm shows them."""
    if TOPOLOGY_YAML in files:
        rendered = parse_topology_yaml(files[TOPOLOGY_YAML])
        return topologies_shown(rendered, scontrol.show_topologies())
    return topology_shown(parse_topology(files.get(TOPOLOGY_CONF, "")), scontrol.show_topology())


def confirm_config(
    kube: Kube, snap: Snapshot, plan: Plan, config: ConfigDelivery
) -> list[Condition]:
    """Deliver a changed config to slurmctld and confirm it took; reconfigure only as a backstop."""
    assert plan.rendered is not None
    meta = snap.cluster_obj["metadata"]
    status = snap.cluster_obj.get("status") or {}
    wanted = plan.rendered.hash
    now = time.monotonic()
    # deliver_config wrote the ConfigMap with `wanted`, and set this clock before.
    clock = config.clock
    if status.get("configHash") == wanted:
        return [Condition("ConfigApplied", True, "Applied", f"config {wanted[:12]} in force")]
    if clock is None or snap.slurm is None or snap.observed.slurm_nodes is None:
        return [
            Condition(
                "ConfigApplied", False, "Pending", f"config {wanted[:12]} waits for slurmctld"
            )
        ]
    if config_in_force(plan, clock, snap.slurm, config.scontrol()):
        # The same words as above: the next reconcile must not rewrite the status.
        return [Condition("ConfigApplied", True, "Applied", f"config {wanted[:12]} in force")]
    left = seconds_left(clock, now, config.window)
    if left > 0:
        return [
            Condition(
                "ConfigApplied",
                False,
                "Propagating",
                # No countdown: a message that changes each reconcile is a status
                # write, which is an event, which is another reconcile.
                f"config {wanted[:12]}: delivered to the slurmctld pod, whose reloader "
                "reconfigures when the files land; the operator reconfigures itself if "
                f"Slurm does not show it {config.window:.0f}s after the change",
            )
        ]
    cluster = meta["name"]
    try:
        snap.slurm.reconfigure()
    except SlurmError as err:
        metrics.RECONFIGURES.labels(meta["namespace"], cluster, "failed").inc()
        return [Condition("ConfigApplied", False, "ReconfigureFailed", str(err))]
    metrics.RECONFIGURES.labels(meta["namespace"], cluster, "ok").inc()
    kube.event(
        snap.cluster_obj,
        "Reconfigured",
        f"scontrol reconfigure for config {wanted[:12]}: Slurm did not show it "
        f"{config.window:.0f}s after the ConfigMap changed",
    )
    return [Condition("ConfigApplied", True, "Applied", f"config {wanted[:12]} in force")]
