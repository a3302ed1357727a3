"""Rendering: expected lines, determinism, and no unvalidated value ever reaching a file."""

from __future__ import annotations

import random
import re
import string

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmkube.api import grammar
from slurmkube.api.documents import DocumentError, parse_cluster
from slurmkube.api.grammar import InvalidValue
from slurmkube.render import plan_config, render_files
from slurmkube.render.files import render_topology_yaml
from slurmkube_local.builders import NodeBuilder, bundle, cluster_docs, nvl_fleet

# Every non-comment line of every file we render has this shape: directives of
# `Key=Value` separated by single spaces, values free of `#` and whitespace.
SLURM_LINE = re.compile(r"[A-Za-z]+=[^\s#]+( [A-Za-z]+=[^\s#]+)*")


def assert_well_formed(files: dict[str, str]) -> None:
    for name, text in files.items():
        for line in text.splitlines():
            if line and not line.startswith("#"):
                assert SLURM_LINE.fullmatch(line), f"{name}: malformed line {line!r}"


def test_sample_fleet_renders_block_topology_and_partitions() -> None:
    nodes = nvl_fleet(domains=2, per_domain=18)
    files = render_files(plan_config(bundle(block_size=16), nodes)).files
    assert_well_formed(dict(files))
    slurm = files["slurm.conf"]
    assert (
        "NodeName=gpu-[0001-0036] CPUs=64 RealMemory=261120 Gres=gpu:gb200:4 "
        "Features=gb200 Weight=1 State=CLOUD" in slurm
    )
    assert (
        "PartitionName=gpu Nodes=gpu-[0001-0036] Default=YES DefMemPerCPU=4080 PriorityTier=1 "
        "State=UP" in slurm
    )
    assert "TopologyPlugin=topology/block" in slurm
    topo = files["topology.conf"].splitlines()[1:]
    assert topo == [
        "BlockName=3c9d6e2a-4b7f-4f3e-9a51-2d8c0e7b1f64.1 Nodes=gpu-[0001-0018]",
        "BlockName=3c9d6e2a-4b7f-4f3e-9a51-2d8c0e7b1f64.2 Nodes=gpu-[0019-0036]",
        "BlockSizes=16,32",
    ]
    assert "File=/dev/nvidia[0-3]" in files["gres.conf"]


def test_tree_topology_from_tier_labels() -> None:
    nodes = nvl_fleet(domains=4, per_domain=2)
    topo = render_files(plan_config(bundle(plugin="tree"), nodes)).files["topology.conf"]
    assert topo.splitlines()[1:] == [
        "SwitchName=leaf-01 Nodes=gpu-[0001-0004]",
        "SwitchName=leaf-02 Nodes=gpu-[0005-0008]",
        "SwitchName=spine-01 Switches=leaf-[01-02]",
    ]


def test_deep_queue_defaults_reach_the_end_of_the_queue() -> None:
    files = render_files(plan_config(bundle(), nvl_fleet(1, 2))).files
    assert (
        "SchedulerParameters=bf_continue,bf_max_job_test=50000,bf_window=2880,"
        "bf_resolution=600,bf_interval=30,bf_max_time=60,bf_yield_interval=300000,"
        "bf_yield_sleep=100000,max_rpc_cnt=150" in files["slurm.conf"]
    )
    assert "MaxJobCount=40000" in files["slurm.conf"]


@settings(max_examples=30, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_output_is_identical_for_any_node_order(rnd: random.Random) -> None:
    nodes = nvl_fleet(domains=3, per_domain=5) + [
        NodeBuilder(f"spare-{i}").gpus(8, "NVIDIA-H100").obj() for i in range(3)
    ]
    config = plan_config(bundle(block_size=4), nodes)
    expected = render_files(config).files
    shuffled = list(nodes)
    rnd.shuffle(shuffled)
    config_shuffled = plan_config(bundle(block_size=4), shuffled)
    assert render_files(config_shuffled).files == expected
    assert render_topology_yaml(config_shuffled) == render_topology_yaml(config)


label_value = st.text(alphabet=string.printable + "ünï€", min_size=0, max_size=80)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    clique=label_value,
    product=label_value,
    leaf=label_value,
    name=label_value | st.from_regex(r"[a-z][a-z0-9.-]{0,20}", fullmatch=True),
)
def test_no_label_or_name_can_inject_a_line(
    clique: str, product: str, leaf: str, name: str
) -> None:
    node = NodeBuilder("gpu-1").clique(clique).gpus(4, product).tiers(leaf, "spine").obj()
    other = NodeBuilder(name if name else "x").clique(clique).obj()
    try:
        config = plan_config(bundle(block_size=1), [node, other])
        files = render_files(config).files
    except InvalidValue as err:
        assert "Node " in str(err)  # names the object and the field
        return
    assert_well_formed(dict(files))
    # topology.yaml: dumped, so a value can never add a key, a topology or a line.
    topologies = yaml.safe_load(render_topology_yaml(config))
    for t in topologies:
        assert set(t) <= {"topology", "cluster_default", "block", "tree", "flat"}
        for entry in [
            *t.get("block", {}).get("blocks", []),
            *t.get("tree", {}).get("switches", []),
        ]:
            assert set(entry) <= {"block", "switch", "children", "nodes"}
            for value in entry.values():
                assert "\n" not in value
    # Every label-derived token re-validates: nothing unvalidated got through.
    for line in files["topology.conf"].splitlines():
        for key in ("BlockName", "SwitchName"):
            if line.startswith(f"{key}="):
                grammar.topology_name(line.split()[0].split("=", 1)[1], key)
    for line in files["slurm.conf"].splitlines():
        if line.startswith("NodeName=") and " Features=" in line:
            for feature in line.split(" Features=")[1].split()[0].split(","):
                grammar.feature(feature, "Features")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: d[0]["spec"]["partitions"][0].update(nodeSets=["nope"]),
            "SlurmCluster test spec.partitions[0].nodeSets[0]: 'nope' is not valid; "
            "expected one of",
        ),
        (
            lambda d: d[1]["spec"].update(clusterRef="other"),
            "NodeSet gpu spec.clusterRef: 'other'",
        ),
    ],
)
def test_bad_references_name_the_object_and_field(mutate: object, message: str) -> None:
    docs = cluster_docs()
    assert callable(mutate)
    mutate(docs)
    with pytest.raises(InvalidValue) as err:
        plan_config(parse_cluster(docs), nvl_fleet(1, 2))
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"extraConfig": ["KillWait=30\nInclude=/etc/x"]}, "spec.extraConfig: [0]:"),
        ({"extraConfig": ["SlurmctldHost=evil"]}, "SlurmctldHost is set from the spec"),
        ({"partitions": [{"name": "a b", "nodeSets": ["gpu"]}]}, "spec.partitions.0.name"),
        ({"partitions": [{"name": "a"}]}, "set nodeSets or nodeSelector"),
        ({"clusterName": "Fleet"}, "spec.clusterName"),
    ],
)
def test_invalid_cluster_documents_are_rejected_with_the_field(
    spec: dict[str, object], message: str
) -> None:
    docs = cluster_docs()
    docs[0]["spec"].update(spec)
    with pytest.raises(DocumentError) as err:
        parse_cluster(docs)
    assert "SlurmCluster test" in str(err.value)
    assert message in str(err.value)


def test_overlapping_node_sets_are_refused() -> None:
    docs = cluster_docs(pools=("gpu", "other"))
    docs[2]["spec"]["nodeSelector"] = {"matchLabels": {}}
    with pytest.raises(InvalidValue) as err:
        plan_config(parse_cluster(docs), nvl_fleet(1, 1))
    assert "node gpu-0001 is also in NodeSet gpu" in str(err.value)


def test_node_selector_partitions_pick_nodes_from_all_node_sets() -> None:
    docs = cluster_docs(pools=("gpu", "h100"))
    docs[0]["spec"]["partitions"].append(
        {
            "name": "big",
            "nodeSelector": {
                "matchExpressions": [
                    {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100"]}
                ]
            },
        }
    )
    nodes = [*nvl_fleet(1, 2), NodeBuilder("h-1").pool("h100").gpus(8, "NVIDIA-H100").obj()]
    slurm = render_files(plan_config(parse_cluster(docs), nodes)).files["slurm.conf"]
    assert "PartitionName=big Nodes=h-1 " in slurm


def test_config_hash_changes_only_with_content() -> None:
    a = render_files(plan_config(bundle(), nvl_fleet(1, 2)))
    b = render_files(plan_config(bundle(), list(reversed(nvl_fleet(1, 2)))))
    c = render_files(plan_config(bundle(), nvl_fleet(1, 3)))
    assert a.hash == b.hash != c.hash


def test_only_slurm_user_may_ask_slurmctld_for_a_token() -> None:
    # jwt.key is root-equivalent: users get no `scontrol token` (slurm.conf(5)
    # AuthAltParameters disable_token_creation); the operator mints its own.
    slurm = render_files(plan_config(bundle(), nvl_fleet(1, 2))).files["slurm.conf"]
    assert "AuthAltParameters=jwt_key=/etc/slurm/jwt.key,disable_token_creation\n" in slurm
