"""The validated configuration model -> the text of each Slurm file."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from slurmkube.api.grammar import SlurmToken
from slurmkube.render.config import SlurmConfig, hostlist
from slurmkube.render.templating import render_template


@dataclass(frozen=True, slots=True)
class RenderedConfig:
    files: Mapping[str, str]

    @property
    def hash(self) -> str:
        """Content hash of every file: decides when to `scontrol reconfigure`."""
        digest = hashlib.sha256()
        for name in sorted(self.files):
            digest.update(name.encode())
            digest.update(b"\0")
            digest.update(self.files[name].encode())
            digest.update(b"\0")
        return digest.hexdigest()


def render_slurm_conf(config: SlurmConfig) -> str:
    return render_template("slurm.conf.j2", c=config)


def render_gres_conf(config: SlurmConfig) -> str:
    return render_template("gres.conf.j2", c=config)


def render_cgroup_conf(config: SlurmConfig) -> str:
    return render_template("cgroup.conf.j2", c=config)


def render_topology_conf(config: SlurmConfig) -> str:
    topo = config.topology
    return render_template(
        "topology.conf.j2",
        c=config,
        plugin=config.topology_plugin,
        t=topo,
        hostlist=hostlist,
        block_sizes=SlurmToken(",".join(str(s) for s in topo.block_sizes)),
    )


def render_files(config: SlurmConfig) -> RenderedConfig:
    return RenderedConfig(
        files={
            "slurm.conf": render_slurm_conf(config),
            "gres.conf": render_gres_conf(config),
            "cgroup.conf": render_cgroup_conf(config),
            "topology.conf": render_topology_conf(config),
        }
    )
