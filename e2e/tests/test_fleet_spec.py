"""The fleet generator's pure part: a spec always yields the same, well-labelled nodes.
(No cluster needed.)"""

from __future__ import annotations

import re

import pytest

from slurmkube_e2e import fleet


def _labels(spec: fleet.FleetSpec) -> list[dict[str, str]]:
    return [m["metadata"]["labels"] for m in fleet.manifests(spec)]


def test_same_spec_renders_identical_nodes() -> None:
    spec = fleet.FleetSpec(nvl_domains=3, nodes_per_domain=2)
    assert fleet.manifests(spec) == fleet.manifests(
        fleet.FleetSpec(nvl_domains=3, nodes_per_domain=2)
    )


def test_each_nvlink_domain_has_one_clique_of_uuid_dot_id() -> None:
    spec = fleet.FleetSpec(nvl_domains=3, nodes_per_domain=4)
    cliques = [lbl[fleet.CLIQUE_LABEL] for lbl in _labels(spec)]
    assert all(re.fullmatch(r"[0-9a-f-]{36}\.\d+", c) for c in cliques)
    assert len(set(cliques)) == 3
    for domain in range(3):
        assert len(set(cliques[domain * 4 : domain * 4 + 4])) == 1


@pytest.mark.parametrize(
    ("domains", "per_leaf", "per_spine", "leaves", "spines"),
    [(4, 2, 2, 2, 1), (5, 2, 2, 3, 2), (3, 1, 1, 3, 3)],
)
def test_racks_hang_off_leaves_and_leaves_off_spines(
    domains: int, per_leaf: int, per_spine: int, leaves: int, spines: int
) -> None:
    spec = fleet.FleetSpec(
        nvl_domains=domains,
        nodes_per_domain=1,
        domains_per_leaf=per_leaf,
        leaves_per_spine=per_spine,
    )
    labels = _labels(spec)
    assert len({lbl[fleet.RACK_LABEL] for lbl in labels}) == domains
    assert len({lbl[fleet.LEAF_LABEL] for lbl in labels}) == leaves
    assert len({lbl[fleet.SPINE_LABEL] for lbl in labels}) == spines


def test_gpu_count_label_matches_allocatable() -> None:
    for node in fleet.manifests(fleet.FleetSpec(gpus=8)):
        assert node["metadata"]["labels"][fleet.COUNT_LABEL] == "8"
        assert node["status"]["allocatable"][fleet.GPU_RESOURCE] == "8"
        assert node["metadata"]["annotations"][fleet.KWOK_ANNOTATION] == fleet.KWOK_ANNOTATION_VALUE


def test_node_names_are_valid_slurm_and_dns_names() -> None:
    for node in fleet.layout(fleet.FleetSpec(nvl_domains=12, nodes_per_domain=18)):
        assert re.fullmatch(r"[a-z][a-z0-9-]{0,62}", node.name), node.name


def test_rejects_an_empty_fleet() -> None:
    with pytest.raises(ValueError, match="nvl_domains must be >= 1"):
        fleet.FleetSpec(nvl_domains=0)
