"""The `slurmkube` command: files written, clear one-line errors, nothing half-written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from slurmkube.cli import main
from slurmkube_local.builders import NodeBuilder

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_render_writes_every_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "render",
        "--cluster",
        str(EXAMPLES / "cluster.yaml"),
        "--nodes",
        str(EXAMPLES / "fleet-nodes.yaml"),
        "--out",
        str(tmp_path),
    )
    assert code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "cgroup.conf",
        "gres.conf",
        "slurm.conf",
        "topology.conf",
    ]
    assert "config hash" in out


def test_bad_input_exits_2_with_the_object_and_field_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = list(yaml.safe_load_all((EXAMPLES / "cluster.yaml").read_text()))
    docs[0]["spec"]["extraConfig"] = ["KillWait=30\nInclude=/etc/shadow"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump_all(docs))
    out_dir = tmp_path / "out"
    code, _, err = run(
        capsys,
        "render",
        "--cluster",
        str(bad),
        "--nodes",
        str(EXAMPLES / "fleet-nodes.yaml"),
        "--out",
        str(out_dir),
    )
    assert code == 2
    assert "SlurmCluster fleet: spec.extraConfig" in err
    assert err.count("\n") == 1
    assert not out_dir.exists()


def test_missing_file_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(
        capsys, "render", "--cluster", "/nonexistent.yaml", "--nodes", "x", "--out", "/tmp/x"
    )
    assert code == 2
    assert "/nonexistent.yaml" in err


def test_topology_kueue_prints_topology_and_a_flavor_per_node_set(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(
        capsys,
        "topology",
        "--nodes",
        str(EXAMPLES / "fleet-nodes.yaml"),
        "--cluster",
        str(EXAMPLES / "cluster.yaml"),
        "--format",
        "kueue",
    )
    assert code == 0
    docs = list(yaml.safe_load_all(out))
    assert [d["kind"] for d in docs] == [
        "Topology",
        "ResourceFlavor",
        "ResourceFlavor",
        "ResourceFlavor",
    ]
    assert [lvl["nodeLabel"] for lvl in docs[0]["spec"]["levels"]] == [
        "topology.slurmkube.io/spine",
        "topology.slurmkube.io/leaf",
        "nvidia.com/gpu.clique",
        "kubernetes.io/hostname",
    ]
    assert {d["spec"]["topologyName"] for d in docs[1:]} == {"fleet"}


def test_topology_tree_without_a_cluster_uses_default_label_keys(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(
        capsys, "topology", "--nodes", str(EXAMPLES / "fleet-nodes.yaml"), "--format", "tree"
    )
    assert code == 0
    assert "SwitchName=spine-01 Switches=leaf-[01-02]" in out


def test_topology_yaml_holds_the_blocks_and_the_tree_with_the_plugin_as_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(
        capsys, "topology", "--nodes", str(EXAMPLES / "fleet-nodes.yaml"), "--format", "yaml"
    )
    assert code == 0
    assert out.startswith("# Rendered by slurmkube")
    nvlink, network = yaml.safe_load(out)
    # topology(5): `topology` must be the first attribute.
    assert list(nvlink)[:2] == ["topology", "cluster_default"]
    assert (nvlink["topology"], nvlink["cluster_default"]) == ("nvlink", True)
    assert nvlink["block"]["blocks"] and all(
        set(b) == {"block", "nodes"} for b in nvlink["block"]["blocks"]
    )
    assert (network["topology"], network["cluster_default"]) == ("network", False)
    assert {"switch": "spine-01", "children": "leaf-[01-02]"} in network["tree"]["switches"]


def cluster_of_release(tmp_path: Path, version: str) -> Path:
    """examples/cluster.yaml with `spec.slurm.version` set."""
    docs = list(yaml.safe_load_all((EXAMPLES / "cluster.yaml").read_text()))
    docs[0]["spec"]["slurm"] = {"version": version}
    path = tmp_path / f"cluster-{version}.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


@pytest.mark.parametrize(
    ("version", "topology_file", "first_line"),
    [("26.05", "topology.yaml", "- topology: nvlink"), ("24.11", "topology.conf", "BlockName=")],
)
def test_render_and_topology_give_the_file_the_clusters_release_reads(
    version: str,
    topology_file: str,
    first_line: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster = str(cluster_of_release(tmp_path, version))
    nodes = str(EXAMPLES / "fleet-nodes.yaml")
    code, _, _ = run(
        capsys, "render", "--cluster", cluster, "--nodes", nodes, "--out", str(tmp_path / "out")
    )
    assert code == 0
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["cgroup.conf", "gres.conf", "slurm.conf", topology_file]
    code, out, _ = run(capsys, "topology", "--cluster", cluster, "--nodes", nodes)
    assert code == 0
    assert out == (tmp_path / "out" / topology_file).read_text()
    assert out.splitlines()[1].startswith(first_line)


def test_topology_puts_a_full_and_a_degraded_nvl72_rack_both_in_blocks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One full 18-node NVL72 domain, one with two trays missing (16 nodes).
    full = [NodeBuilder(f"gb-{i:02d}").clique(1).gpus(4).dict() for i in range(1, 19)]
    degraded = [NodeBuilder(f"gb-{i:02d}").clique(2).gpus(4).dict() for i in range(19, 35)]
    fleet = tmp_path / "nodes.yaml"
    fleet.write_text(yaml.safe_dump({"kind": "List", "items": full + degraded}))
    code, out, err = run(capsys, "topology", "--nodes", str(fleet))
    assert code == 0
    blocks = [line for line in out.splitlines() if line.startswith("BlockName=")]
    assert [line.split()[1] for line in blocks] == ["Nodes=gb-[01-18]", "Nodes=gb-[19-34]"]
    assert "BlockSizes=16,32" in out.splitlines()
    assert "left out" not in err


def test_version_names_slurm(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "version")
    assert code == 0
    assert "slurm 24.11.5" in out


def test_committed_crds_are_what_the_models_generate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, _ = run(capsys, "crds", "--out", str(tmp_path))
    assert code == 0
    committed = EXAMPLES.parent / "crds"
    for generated in sorted(tmp_path.iterdir()):
        assert (committed / generated.name).read_text() == generated.read_text(), (
            f"crds/{generated.name} is stale: run `.venv/bin/slurmkube crds`"
        )


HEALTH_RULES = {
    "rules": [
        {"condition": {"type": "GpuXidError"}, "severity": "fatal"},
        {"taint": {"key": "nvidia.com/gpu-error"}, "severity": "drain"},
    ],
    "circuitBreaker": {"maxSickShare": 1},
}


def _health_files(tmp_path: Path, nodes: list[NodeBuilder], health: object) -> tuple[str, str]:
    nodes_file, cluster_file = tmp_path / "nodes.yaml", tmp_path / "cluster.yaml"
    nodes_file.write_text(yaml.safe_dump({"kind": "List", "items": [n.dict() for n in nodes]}))
    docs = list(yaml.safe_load_all((EXAMPLES / "cluster.yaml").read_text()))
    docs[0]["spec"]["health"] = health
    cluster_file.write_text(yaml.safe_dump_all(docs))
    return str(nodes_file), str(cluster_file)


def test_health_prints_each_nodes_verdict_and_the_action_it_would_get(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [
        NodeBuilder("gb-1").clique(1).condition("GpuXidError"),
        NodeBuilder("gb-2").clique(1).taint("nvidia.com/gpu-error", "xid-79"),
        NodeBuilder("gb-3").clique(1),
        NodeBuilder("gb-4").clique(1).condition("GpuXidError", "False"),
    ]
    nodes_file, cluster_file = _health_files(tmp_path, nodes, HEALTH_RULES)
    code, out, err = run(capsys, "health", "--nodes", nodes_file, "--cluster", cluster_file)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("gb-1  sick (fatal: condition GpuXidError True) -> drain (")
    assert "requeue its running jobs; taint slurmkube.io/unhealthy:NoSchedule" in lines[0]
    assert lines[1].startswith("gb-2  sick (drain: taint nvidia.com/gpu-error) -> drain (")
    assert "requeue" not in lines[1]
    assert lines[2:4] == ["gb-3  healthy -> nothing", "gb-4  healthy -> nothing"]
    assert lines[4].startswith("domain 3c9d6e2a-4b7f-4f3e-9a51-2d8c0e7b1f64.1: 2 of 4 nodes out")
    assert "assuming each node is in Slurm" in err


def test_health_says_when_the_circuit_breaker_holds_nodes_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [NodeBuilder(f"g-{i}").condition("GpuXidError") for i in range(4)]
    health = {**HEALTH_RULES, "circuitBreaker": {"maxSickShare": 0.5}}
    nodes_file, cluster_file = _health_files(tmp_path, nodes, health)
    code, out, _ = run(capsys, "health", "--nodes", nodes_file, "--cluster", cluster_file)
    assert code == 0
    assert "g-2  sick (fatal: condition GpuXidError True) [waits: circuit breaker open]" in out
    assert "circuit breaker open: 2 of at most 2 nodes acted on; waiting: g-2, g-3" in out


def test_health_without_a_cluster_has_no_rules_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes_file, _ = _health_files(tmp_path, [NodeBuilder("g-1").condition("GpuXidError")], {})
    code, out, err = run(capsys, "health", "--nodes", nodes_file)
    assert (code, out) == (0, "g-1  healthy -> nothing\n")
    assert "spec.health.rules is empty" in err


@pytest.mark.parametrize(
    ("node", "health", "field"),
    [
        pytest.param(
            {"metadata": {"name": "g-1"}, "spec": {"taints": [{"effect": "NoSchedule"}]}},
            HEALTH_RULES,
            "Node g-1: spec.taints.0.key",
            id="a-taint-without-key",
        ),
        pytest.param(
            {"metadata": {"name": "g-1"}, "status": {"conditions": [{"type": "X", "status": "y"}]}},
            HEALTH_RULES,
            "Node g-1 status.conditions[0].status",
            id="a-condition-status-no-api-server-writes",
        ),
        pytest.param(
            {"metadata": {"name": "G_1"}},
            HEALTH_RULES,
            "Node G_1 metadata.name",
            id="a-node-name-slurm-cannot-take",
        ),
        pytest.param(
            {"metadata": {"name": "g-1"}},
            {"rules": [{"condition": {"type": "X"}, "severity": "reboot"}]},
            "spec.health.rules.0.severity",
            id="an-unknown-severity",
        ),
    ],
)
def test_health_bad_input_exits_2_naming_the_field(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    node: dict[str, object],
    health: object,
    field: str,
) -> None:
    nodes_file, cluster_file = _health_files(tmp_path, [], health)
    Path(nodes_file).write_text(
        yaml.safe_dump({"kind": "List", "items": [{"kind": "Node", **node}]})
    )
    code, out, err = run(capsys, "health", "--nodes", nodes_file, "--cluster", cluster_file)
    assert code == 2
    assert field in err
    assert err.count("\n") == 1 and out == ""
