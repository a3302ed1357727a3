"""The validated configuration model -> the text of each Slurm file."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from slurmkube.api.grammar import SlurmToken
from slurmkube.render.config import SlurmConfig
from slurmkube.render.hostlist import hostlist
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


def render_topology_yaml(config: SlurmConfig) -> str:
    """topology.yaml(5), Slurm 25.05+: the NVLink blocks and the network tree as two
    named topologies in one file, so a partition can pick either (`Topology=`);
    the spec's plugin is the cluster default. 24.11 reads topology.conf only.

    Every name and node passed the grammar (SlurmToken), and the YAML is dumped,
    never templated, so no value can add a key or a line.
    """
    topo = config.topology
    default = str(config.topology_plugin)
    topologies: list[dict[str, Any]] = []
    if topo.blocks:
        topologies.append(
            {
                "topology": "nvlink",
                "cluster_default": default == "topology/block",
                "block": {
                    "block_sizes": list(topo.block_sizes),
                    "blocks": [
                        {"block": str(b.name), "nodes": str(hostlist(b.nodes))} for b in topo.blocks
                    ],
                },
            }
        )
    if topo.switches:
        switches: list[dict[str, str]] = []
        for s in topo.switches:
            entry = {"switch": str(s.name)}
            if s.switches:
                entry["children"] = str(hostlist(s.switches))
            if s.nodes:
                entry["nodes"] = str(hostlist(s.nodes))
            switches.append(entry)
        topologies.append(
            {
                "topology": "network",
                "cluster_default": default == "topology/tree",
                "tree": {"switches": switches},
            }
        )
    if not any(t["cluster_default"] for t in topologies):
        topologies.append({"topology": "flat", "cluster_default": True, "flat": True})
    header = f"# Rendered by slurmkube {config.version}; see topology.yaml(5).\n"
    return header + yaml.safe_dump(topologies, sort_keys=False, default_flow_style=False)


def render_files(config: SlurmConfig) -> RenderedConfig:
    return RenderedConfig(
        files={
            "slurm.conf": render_slurm_conf(config),
            "gres.conf": render_gres_conf(config),
            "cgroup.conf": render_cgroup_conf(config),
            "topology.conf": render_topology_conf(config),
        }
    )
