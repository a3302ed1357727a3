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
