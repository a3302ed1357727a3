"""topology.yaml for Slurm 25.05+: named topologies, partitions' Topology=, 24.11 unchanged."""

from __future__ import annotations

import os
import stat
import string
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmkube.api.documents import ClusterBundle
from slurmkube.api.grammar import InvalidValue
from slurmkube.api.models import KubeNode
from slurmkube.controllers.reconfigure import topology_in_force
from slurmkube.plan.reconfigure import topologies_shown
from slurmkube.plan.topology_status import topology_summary
from slurmkube.render import plan_config, render_files
from slurmkube.render.config import SlurmConfig
from slurmkube.slurm import CliClient
from slurmkube.slurm.topology_text import TopologyRecord, parse_topology_yaml
from slurmkube_e2e.topology import rendered_blocks, topology_file
from slurmkube_local.builders import NodeBuilder, bundle, nvl_fleet

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
CLIQUE = "3c9d6e2a-4b7f-4f3e-9a51-2d8c0e7b1f64"


def cluster(
    version: str = "26.05", plugin: str = "block", partitions: list[dict[str, Any]] | None = None
) -> ClusterBundle:
    extra: dict[str, Any] = {"slurm": {"version": version}}
    if partitions is not None:
        extra["partitions"] = partitions
    return bundle(block_size=2, plugin=plugin, extra=extra)


def rendered(b: ClusterBundle, nodes: list[KubeNode]) -> tuple[SlurmConfig, dict[str, str]]:
    config = plan_config(b, nodes)
    return config, dict(render_files(config).files)


def topologies(files: dict[str, str]) -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = yaml.safe_load(files["topology.yaml"])
    return loaded


def partition_lines(files: dict[str, str]) -> list[str]:
    return [line for line in files["slurm.conf"].splitlines() if line.startswith("PartitionName=")]


# Two NVLink domains of two nodes on one leaf; a third domain on a second leaf.
BLOCKS = {
    "block": {
        "block_sizes": [2, 4],
        "blocks": [
            {"block": f"{CLIQUE}.1", "nodes": "gpu-[0001-0002]"},
            {"block": f"{CLIQUE}.2", "nodes": "gpu-[0003-0004]"},
            {"block": f"{CLIQUE}.3", "nodes": "gpu-[0005-0006]"},
        ],
    }
}
TREE = {
    "tree": {
        "switches": [
            {"switch": "leaf-01", "nodes": "gpu-[0001-0004]"},
            {"switch": "leaf-02", "nodes": "gpu-[0005-0006]"},
            {"switch": "spine-01", "children": "leaf-[01-02]"},
        ]
    }
}


def relabel(node: KubeNode, clique: str | int | None, leaf: str | None) -> KubeNode:
    builder = NodeBuilder(node.metadata.name, labels=dict(node.metadata.labels))
    return builder.clique(clique).tiers(leaf, "spine-01" if leaf else None).obj()


def fleet(blocks: bool = True, tiers: bool = True) -> list[KubeNode]:
    """Three NVLink domains of two nodes: two on leaf-01, one on leaf-02."""
    nodes = nvl_fleet(domains=3, per_domain=2)
    return [
        relabel(n, i // 2 + 1 if blocks else None, f"leaf-0{i // 4 + 1}" if tiers else None)
        for i, n in enumerate(nodes)
    ]


@pytest.mark.parametrize(
    ("plugin", "blocks", "tiers", "expected"),
    [
        (
            "block",
            True,
            True,
            [
                {"topology": "nvlink", "cluster_default": True, **BLOCKS},
                {"topology": "network", "cluster_default": False, **TREE},
            ],
        ),
        (
            "tree",
            True,
            True,
            [
                {"topology": "nvlink", "cluster_default": False, **BLOCKS},
                {"topology": "network", "cluster_default": True, **TREE},
            ],
        ),
        (
            "block",
            True,
            False,
            [{"topology": "nvlink", "cluster_default": True, **BLOCKS}],
        ),
        (
            "tree",
            False,
            True,
            [{"topology": "network", "cluster_default": True, **TREE}],
        ),
        # The spec's topology is not filled: flat is the default, the other stays.
        (
            "block",
            False,
            True,
            [
                {"topology": "network", "cluster_default": False, **TREE},
                {"topology": "flat", "cluster_default": True, "flat": True},
            ],
        ),
        (
            "none",
            True,
            True,
            [
                {"topology": "nvlink", "cluster_default": False, **BLOCKS},
                {"topology": "network", "cluster_default": False, **TREE},
                {"topology": "flat", "cluster_default": True, "flat": True},
            ],
        ),
    ],
    ids=[
        "both-block-default",
        "both-tree-default",
        "blocks-only",
        "tree-only",
        "no-blocks",
        "none",
    ],
)
def test_topology_yaml_holds_what_the_labels_give_with_the_plugins_topology_as_default(
    plugin: str, blocks: bool, tiers: bool, expected: list[dict[str, Any]]
) -> None:
    _, files = rendered(cluster(plugin=plugin), fleet(blocks, tiers))
    assert "topology.conf" not in files
    assert files["topology.yaml"].startswith("# Rendered by slurmkube ")
    assert topologies(files) == expected
    # topology.yaml(5): `topology` is the first attribute of each.
    assert all(next(iter(t)) == "topology" for t in topologies(files))


def test_nodes_without_tier_labels_hang_under_unknown_in_the_network_tree() -> None:
    nodes = [*fleet(), NodeBuilder("gpu-0007").clique(None).tiers(None, None).obj()]
    _, files = rendered(cluster(), nodes)
    network = next(t for t in topologies(files) if t["topology"] == "network")
    # "unknown" on both tiers: the tier's short name keeps the names apart.
    assert {"switch": "leaf-unknown", "nodes": "gpu-0007"} in network["tree"]["switches"]
    assert {"switch": "root", "children": "spine-01,spine-unknown"} in network["tree"]["switches"]


def test_24_11_keeps_topology_conf_and_the_topology_plugin() -> None:
    _, old = rendered(cluster(version="24.11"), fleet())
    assert "topology.yaml" not in old
    assert "TopologyPlugin=topology/block" in old["slurm.conf"].splitlines()
    assert old["topology.conf"].splitlines()[1:] == [
        f"BlockName={CLIQUE}.1 Nodes=gpu-[0001-0002]",
        f"BlockName={CLIQUE}.2 Nodes=gpu-[0003-0004]",
        f"BlockName={CLIQUE}.3 Nodes=gpu-[0005-0006]",
        "BlockSizes=2,4",
    ]


def test_26_05_slurm_conf_drops_the_topology_plugin_and_serves_openmetrics_nothing_else() -> None:
    _, old = rendered(cluster(version="24.11"), fleet())
    _, new = rendered(cluster(version="26.05"), fleet())
    removed = set(old["slurm.conf"].splitlines()) - set(new["slurm.conf"].splitlines())
    added = set(new["slurm.conf"].splitlines()) - set(old["slurm.conf"].splitlines())
    assert removed == {"TopologyPlugin=topology/block"}
    assert {line for line in added if not line.startswith("#")} == {
        "MetricsType=metrics/openmetrics"
    }
    assert (old["gres.conf"], old["cgroup.conf"]) == (new["gres.conf"], new["cgroup.conf"])


@pytest.mark.parametrize(
    ("asked", "blocks", "line", "names"),
    [
        (None, True, "PartitionName=p Nodes=", ["nvlink", "network"]),
        ("network", True, "PartitionName=p Topology=network Nodes=", ["nvlink", "network"]),
        ("nvlink", True, "PartitionName=p Topology=nvlink Nodes=", ["nvlink", "network"]),
        ("flat", True, "PartitionName=p Topology=flat Nodes=", ["nvlink", "network", "flat"]),
        # No NVLink labels: a partition that asks for nvlink falls back to flat.
        ("nvlink", False, "PartitionName=p Topology=flat Nodes=", ["network", "flat"]),
    ],
)
def test_a_partition_chooses_a_topology_the_file_holds(
    asked: str | None, blocks: bool, line: str, names: list[str]
) -> None:
    part: dict[str, Any] = {"name": "p", "nodeSets": ["gpu"]}
    if asked:
        part["topology"] = asked
    _, files = rendered(cluster(partitions=[part]), fleet(blocks=blocks))
    (partition,) = partition_lines(files)
    assert partition.startswith(line)
    assert [t["topology"] for t in topologies(files)] == names


def test_the_topology_file_counts_in_the_config_hash() -> None:
    a = render_files(plan_config(cluster(), fleet()))
    moved = [*fleet()[:-1], relabel(fleet()[-1], 1, "leaf-02")]
    b = render_files(plan_config(cluster(), moved))
    assert a.files["slurm.conf"] == b.files["slurm.conf"]
    assert a.files["topology.yaml"] != b.files["topology.yaml"]
    assert a.hash != b.hash


def test_the_summary_names_topology_yaml_and_its_topologies_default_first() -> None:
    config = plan_config(cluster(plugin="tree"), fleet())
    summary = topology_summary(config, render_files(config))
    assert summary.startswith("topology.yaml ")
    assert summary.endswith("(default network: 3 switches, nvlink: 3 blocks)")


# --- parsing what was rendered and what Slurm shows -----------------------------------

# `scontrol show topoconf` of slurmctld 26.05.5 over a topology.yaml with a
# network tree (the default), one NVLink block and flat.
TOPOCONF_26_05 = (FIXTURES / "cli" / "show-topoconf-26.05.yaml").read_text()


def record(nodes: str = "", switches: str = "") -> TopologyRecord:
    return TopologyRecord(
        frozenset(filter(None, nodes.split(","))), frozenset(filter(None, switches.split(",")))
    )


def test_scontrol_topoconf_parses_per_topology() -> None:
    assert parse_topology_yaml(TOPOCONF_26_05) == {
        "network": {
            "leaf-01": record("gpu-0001,gpu-0002"),
            "leaf-02": record("gpu-0003,gpu-0004"),
            "spine-01": record(switches="leaf-01,leaf-02"),
        },
        "nvlink": {"b1": record("gpu-0001,gpu-0002")},
        "flat": {},
    }


@pytest.mark.parametrize(
    "text",
    [
        "{}",
        "- [1, 2]",
        "- {cluster_default: true}",
        "- topology: t\n  tree: {switches: [{nodes: a}]}",
        "a: [",
    ],
)
def test_unreadable_topologies_raise_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_topology_yaml(text)


def shown(**topologies: dict[str, TopologyRecord]) -> dict[str, dict[str, TopologyRecord]]:
    return dict(topologies)


WANT = shown(
    nvlink={"b1": record("a,b")},
    network={"leaf": record("a,b"), "spine": record(switches="leaf")},
    flat={},
)


@pytest.mark.parametrize(
    ("got", "in_force"),
    [
        (WANT, True),
        # An upper switch also lists the nodes below it; extra aggregated blocks.
        (
            shown(
                nvlink={"b1": record("a,b"), "b1-agg": record("a,b,c,d")},
                network={"leaf": record("a,b"), "spine": record("a,b", "leaf")},
                flat={},
            ),
            True,
        ),
        (shown(nvlink=WANT["nvlink"], network=WANT["network"]), False),  # flat missing
        (shown(nvlink={"b1": record("a")}, network=WANT["network"], flat={}), False),
        (shown(nvlink=WANT["nvlink"], network={"leaf": record("a,b")}, flat={}), False),
        # The same names, in the other topology.
        (shown(nvlink=WANT["network"], network=WANT["nvlink"], flat={}), False),
        (shown(), False),
    ],
)
def test_topologies_are_in_force_when_each_shows_every_rendered_unit(
    got: dict[str, dict[str, TopologyRecord]], in_force: bool
) -> None:
    assert topologies_shown(WANT, got) is in_force


def test_the_rendered_file_parses_back_to_its_blocks_and_switches() -> None:
    config, files = rendered(
        cluster(partitions=[{"name": "p", "nodeSets": ["gpu"], "topology": "flat"}]), fleet()
    )
    parsed = parse_topology_yaml(files["topology.yaml"])
    assert set(parsed) == {"nvlink", "network", "flat"}
    assert {name: set(r.nodes) for name, r in parsed["nvlink"].items()} == {
        str(b.name): set(b.nodes) for b in config.topology.blocks
    }
    assert parsed["network"]["spine-01"].switches == {"leaf-01", "leaf-02"}
    assert topologies_shown(parsed, parsed)


# --- no label value can add a key, a topology or a line -------------------------------

label_value = st.text(alphabet=string.printable + "ünï€:-#{}[]&*!|>'\"%@`", max_size=60)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(clique=label_value, leaf=label_value, spine=label_value, name=label_value)
def test_no_label_value_can_add_a_key_or_a_topology_to_topology_yaml(
    clique: str, leaf: str, spine: str, name: str
) -> None:
    nodes = [
        NodeBuilder("gpu-1").clique(clique).tiers(leaf, spine).obj(),
        NodeBuilder("gpu-2").clique(clique).tiers(leaf, spine).obj(),
        NodeBuilder(name or "x").clique(clique).obj(),
    ]
    try:
        config, files = rendered(cluster(), nodes)
    except InvalidValue as err:
        assert "Node " in str(err)  # names the object and the field
        return
    loaded = topologies(files)
    assert [t["topology"] for t in loaded] == [str(n) for n in config.topologies.names]
    for t in loaded:
        assert set(t) <= {"topology", "cluster_default", "block", "tree", "flat"}
        for entry in [
            *t.get("block", {}).get("blocks", []),
            *t.get("tree", {}).get("switches", []),
        ]:
            assert set(entry) <= {"block", "switch", "children", "nodes"}
            assert all(isinstance(v, str) and "\n" not in v for v in entry.values())
    for line in files["slurm.conf"].splitlines():
        assert not line.startswith("TopologyPlugin=")
    # Dumped YAML, parsed back, is exactly what was rendered (no value changed meaning).
    parsed = parse_topology_yaml(files["topology.yaml"])
    assert set(parsed.get("nvlink", {})) == {str(b.name) for b in config.topology.blocks}
    switches = {str(s.name) for s in config.topology.switches}
    assert set(parsed.get("network", {})) == (switches if "network" in parsed else set())


def test_the_e2e_suite_reads_the_same_blocks_from_either_topology_file() -> None:
    old = render_files(plan_config(cluster(version="24.11"), fleet())).files
    new = render_files(plan_config(cluster(version="26.05"), fleet())).files
    assert rendered_blocks(old) == rendered_blocks(new)
    assert len(rendered_blocks(new)) == 3
    assert (topology_file(old), topology_file(new)) == (old["topology.conf"], new["topology.yaml"])


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_the_controller_asks_slurm_for_what_the_release_reads(version: str, tmp_path: Path) -> None:
    """topology.conf against `show topology`, topology.yaml against `show topoconf`:
    a stand-in scontrol prints what `shown` config Slurm would have in force."""
    wanted = render_files(plan_config(cluster(version=version), fleet())).files
    moved = [*fleet()[:-1], relabel(fleet()[-1], 1, "leaf-02")]
    stale = render_files(plan_config(cluster(version=version), moved)).files
    name = "topology.yaml" if version == "26.05" else "topology.conf"
    for shown, in_force in ((wanted, True), (stale, False)):
        (tmp_path / "shown").write_text(shown[name])
        script = tmp_path / "scontrol"
        script.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/argv\ncat {tmp_path}/shown\n')
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        scontrol = CliClient(bin_dir=tmp_path, env=dict(os.environ))
        assert topology_in_force(wanted, scontrol) is in_force
    asked = "show topoconf" if version == "26.05" else "show topology"
    assert set((tmp_path / "argv").read_text().splitlines()) == {asked}


@pytest.mark.parametrize("value", ["true", "null", "yes", "on", "1.10", "0x1F", "1e3", "010", "~"])
def test_label_values_yaml_would_retype_stay_names(value: str) -> None:
    """slurmctld 26.05.5 reads such names quoted as dumped (checked with the image:
    BlockName=null, SwitchName=1e3, ...); `~` is no topology name and is reported."""
    nodes = [
        relabel(n, value if i < 2 else 2, value if i < 2 else "leaf-02")
        for i, n in enumerate(fleet())
    ]
    config, files = rendered(cluster(), nodes)
    parsed = parse_topology_yaml(files["topology.yaml"])
    if value == "~":
        assert config.topology.problems
        return
    assert set(parsed["nvlink"][value].nodes) == {"gpu-0001", "gpu-0002"}
    assert set(parsed["network"][value].nodes) == {"gpu-0001", "gpu-0002"}


token = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,30}", fullmatch=True)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    cliques=st.lists(token, min_size=1, max_size=4),
    leaves=st.lists(token, min_size=1, max_size=4),
    names=st.lists(token, min_size=1, max_size=60, unique=True),
)
def test_libyaml_and_pythons_emitter_write_the_same_topology_yaml(
    cliques: list[str], leaves: list[str], names: list[str]
) -> None:
    # render/files.py dumps with libyaml's emitter where PyYAML has it; a file
    # that differed by emitter would reconfigure slurmctld on an operator upgrade.
    # Names that do not compress make node lists longer than a line.
    fleet = [
        NodeBuilder(name)
        .clique(cliques[i % len(cliques)])
        .tiers(leaves[i % len(leaves)], "s1")
        .obj()
        for i, name in enumerate(names)
    ]
    try:
        _, files = rendered(cluster(), fleet)
    except InvalidValue:
        return
    _, _, body = files["topology.yaml"].partition("\n")
    python = yaml.dump(
        yaml.safe_load(body), Dumper=yaml.SafeDumper, sort_keys=False, default_flow_style=False
    )
    assert body == python
    # The reader: libyaml's parser and Python's build the same records.
    assert yaml.load(body, Loader=yaml.CSafeLoader) == yaml.safe_load(body)
