"""The checked-in kind cluster config is what the fleet generator makes (no cluster needed)."""

from __future__ import annotations

from pathlib import Path

import yaml

from slurmkube_e2e import fleet

KIND_CONFIG = Path(__file__).resolve().parents[1] / "kind" / "cluster.yaml"
KIND_SPEC = fleet.FleetSpec(nvl_domains=2, nodes_per_domain=2)


def test_kind_config_matches_the_generator() -> None:
    checked_in = yaml.safe_load(KIND_CONFIG.read_text())
    assert checked_in == fleet.kind_cluster_config(KIND_SPEC, "slurmkube-e2e"), (
        "e2e/kind/cluster.yaml is stale: regenerate it with the command in its header"
    )


def test_kind_workers_carry_the_simulated_nodes_labels() -> None:
    workers = [n for n in yaml.safe_load(KIND_CONFIG.read_text())["nodes"] if n["role"] == "worker"]
    assert len(workers) == 4
    for worker in workers:
        for key in (
            fleet.CLIQUE_LABEL,
            fleet.PRODUCT_LABEL,
            fleet.COUNT_LABEL,
            fleet.RACK_LABEL,
            fleet.LEAF_LABEL,
            fleet.SPINE_LABEL,
        ):
            assert key in worker["labels"]
