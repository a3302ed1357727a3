"""Where the daemons run: paths, hosts and ports the operator (or a test) decides.

None of this is user input; it describes the deployment (pod conventions in
Kubernetes, a temporary directory in tests). It is still validated, because
it is still written into Slurm files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from slurmkube.api import well_known as wk

# slurm.conf SlurmdTimeout (slurm.conf(5)): how long slurmctld waits for a silent
# slurmd before it sets the node DOWN and fails its jobs. A managed key: the
# planner waits this long before a busy node Slurm does not reach loses its pod.
SLURMD_TIMEOUT_SECONDS = 120


@dataclass(frozen=True, slots=True)
class RenderContext:
    controller_host: str = "slurmctld-0"
    controller_addr: str | None = None
    slurmctld_port: int = 6817
    slurmd_port: int = 6818
    # One port per node when many slurmd share a host (--enable-multiple-slurmd).
    node_ports: Mapping[str, int] = field(default_factory=dict)
    node_addr: str | None = None
    config_dir: str = "/etc/slurm"
    state_save_location: str = "/var/spool/slurmctld"
    slurmd_spool_dir: str = "/var/spool/slurmd/%n"
    log_dir: str = "/var/log/slurm"
    run_dir: str = "/run/slurm"
    slurm_user: str = "slurm"
    gpu_device_dir: str = "/dev"
    # proctrack/cgroup + task/cgroup in pods; linuxproc for unprivileged tests.
    cgroups: bool = True
    # SlurmdParameters=config_overrides: trust slurm.conf over what slurmd
    # detects. Only for tests where many fake nodes share one small host.
    config_overrides: bool = False
    # slurmdbd's address (AccountingStorageHost); None: no accounting.
    accounting_host: str | None = None
    accounting_port: int = wk.SLURMDBD_PORT
    # ResumeProgram/SuspendProgram of autoscaled NodeSets: the operator follows
    # Slurm's node states (plan.autoscale), so the programs only have to exit 0.
    power_program: str = "/bin/true"
    # HealthCheckProgram with spec.health.nodeCheck: the path in the Slurm image.
    health_check_program: str = "/usr/local/bin/slurmkube-gpu-check"
    # AuthInfo=use_client_ids: login pods resolve users from LDAP, slurmd pods do not.
    client_ids: bool = False
