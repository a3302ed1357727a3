"""The validated configuration model -> the text of each Slurm file."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from slurmkube.api.grammar import SlurmToken
from slurmkube.render.config import SlurmConfig
from slurmkube.render.hostlist import hostlist
from slurmkube.render.live_topology import frame
from slurmkube.render.templating import render_template
from slurmkube.render.topologies import NETWORK, NVLINK

TOPOLOGY_CONF = "topology.conf"
TOPOLOGY_YAML = "topology.yaml"


@dataclass(frozen=True, slots=True)
class RenderedConfig:
    files: Mapping[str, str]
    # Where nodes move live (render/live_topology.py): the topology file's frame,
    # which the reconfigure hash covers instead of the file.
    topology_frame: str | None = None

    @property
    def hash(self) -> str:
        """What decides when to `scontrol reconfigure`: every file, the topology
        file by its frame where nodes move between its units live."""
        if self.topology_frame is None:
            return self.content_hash
        return _digest({**self.files, _FRAME: self.topology_frame}, leave_out=_TOPOLOGY_FILES)

    @property
    def content_hash(self) -> str:
        """Every byte of every file: whether the ConfigMap must be written."""
        return _digest(self.files)


_FRAME = "topology frame"
_TOPOLOGY_FILES = frozenset((TOPOLOGY_CONF, TOPOLOGY_YAML))


def _digest(files: Mapping[str, str], leave_out: frozenset[str] = frozenset()) -> str:
    digest = hashlib.sha256()
    for name in sorted(files):
        if name in leave_out:
            continue
        digest.update(name.encode())
        digest.update(b"\0")
        digest.update(files[name].encode())
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
    named topologies in one file (render/topologies.py), the spec's plugin the
    cluster default, so a partition can pick either (`Topology=`).

    Every name and node passed the grammar (SlurmToken), and the YAML is dumped,
    never templated, so no value can add a key, a topology or a line.
    """
    named = config.topologies
    topologies = [
        {"topology": str(name), "cluster_default": name == named.default, **_layout(config, name)}
        for name in named.names
    ]
    header = f"# Rendered by slurmkube {config.version}; see topology.yaml(5).\n"
    dumped = yaml.dump(topologies, Dumper=_DUMPER, sort_keys=False, default_flow_style=False)
    return header + dumped


# libyaml's emitter where PyYAML has it: the same text (unit-tested), five times
# faster than the Python one at 10,000 nodes.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _layout(config: SlurmConfig, name: str) -> dict[str, Any]:
    """The plugin key of one named topology: `block`, `tree` or `flat`."""
    topo = config.topology
    if name == NVLINK:
        blocks = [{"block": str(b.name), "nodes": str(hostlist(b.nodes))} for b in topo.blocks]
        return {"block": {"block_sizes": list(topo.block_sizes), "blocks": blocks}}
    if name == NETWORK:
        switches: list[dict[str, str]] = []
        for s in topo.switches:
            entry = {"switch": str(s.name)}
            if s.switches:
                entry["children"] = str(hostlist(s.switches))
            if s.nodes:
                entry["nodes"] = str(hostlist(s.nodes))
            switches.append(entry)
        return {"tree": {"switches": switches}}
    return {"flat": True}


def render_files(config: SlurmConfig) -> RenderedConfig:
    return RenderedConfig(
        files={
            "slurm.conf": render_slurm_conf(config),
            "gres.conf": render_gres_conf(config),
            "cgroup.conf": render_cgroup_conf(config),
            topology_file_name(config): render_topology(config),
        },
        topology_frame=frame(config) if config.slurm_version.moves_nodes_live else None,
    )


def render_topology(config: SlurmConfig) -> str:
    """The topology file of the cluster's release (`topology_file_name`)."""
    return _TOPOLOGY_RENDERERS[topology_file_name(config)](config)


_TOPOLOGY_RENDERERS: Mapping[str, Callable[[SlurmConfig], str]] = {
    TOPOLOGY_CONF: render_topology_conf,
    TOPOLOGY_YAML: render_topology_yaml,
}


def topology_file_name(config: SlurmConfig) -> str:
    """The topology file the cluster's release reads: topology.yaml on 25.05+
    (with it slurmctld ignores topology.conf), topology.conf on 24.11."""
    return TOPOLOGY_YAML if config.slurm_version.reads_topology_yaml else TOPOLOGY_CONF
