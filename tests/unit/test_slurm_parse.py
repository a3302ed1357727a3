"""slurmkube.slurm.parse against JSON recorded from Slurm 24.11.5 (tests/fixtures/slurm/)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmkube.render.hostlist import compress
from slurmkube.slurm.errors import SlurmError
from slurmkube.slurm.gres import gres_gpu_type, gres_gpus
from slurmkube.slurm.hostlist import HostlistError, expand
from slurmkube.slurm.parse import (
    choose_data_parser,
    jobs_from,
    messages_from,
    nodes_from,
    partition_members,
    pings_from,
    reservations_from,
    tres_gpus,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
VERSIONS = ["v0.0.40", "v0.0.41", "v0.0.42"]


def rest(version: str, name: str) -> dict[str, Any]:
    recorded: dict[str, Any] = json.loads(
        (FIXTURES / "rest" / version / f"{name}.json").read_text()
    )
    return recorded["body"]  # type: ignore[no-any-return]


def cli(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / "cli" / f"{name}.json").read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_data_parser_version_parses_to_the_same_models(version: str) -> None:
    assert nodes_from(rest(version, "nodes")) == nodes_from(rest("v0.0.42", "nodes"))
    assert jobs_from(rest(version, "jobs")) == jobs_from(rest("v0.0.42", "jobs"))
    assert reservations_from(rest(version, "reservations")) == reservations_from(
        rest("v0.0.42", "reservations")
    )


def test_scontrol_json_parses_like_slurmrestd() -> None:
    assert {n.name: n.state for n in nodes_from(cli("show-node"))} == {
        n.name: n.state for n in nodes_from(rest("v0.0.42", "nodes"))
    }
    assert reservations_from(cli("show-reservation")) == reservations_from(
        rest("v0.0.42", "reservations")
    )


def test_nodes_carry_state_drain_reason_gpus_and_partitions() -> None:
    nodes = {n.name: n for n in nodes_from(rest("v0.0.42", "nodes"))}

    draining = nodes["gb200-001"]
    assert draining.state == {"MIXED", "CLOUD", "DRAIN"}
    assert draining.base_state == "MIXED"
    assert (draining.draining, draining.drained) == (True, False)
    assert draining.reason == "slurmkube: test"
    assert (nodes["gb200-022"].drained, nodes["gb200-022"].reason) == (True, "admin: bad gpu")
    assert not nodes["gb200-004"].drain
    assert (nodes["hgx-01"].gpus, nodes["hgx-01"].gpus_allocated) == (8, 2)
    assert nodes["hgx-01"].gres == "gpu:h100-80gb-hbm3:8"
    assert nodes["hgx-01"].partitions == ("hgx", "all-gpu")
    assert nodes["gb200-002"].features == ("gb200", "nvl72")
    assert nodes["gb200-021"].reservation == "test_res"
    assert "RESERVED" in nodes["gb200-021"].state
    assert nodes["cpu-01"].gpus == 0


def test_jobs_carry_gpu_requests_however_they_were_spelled() -> None:
    jobs = {j.name: j for j in jobs_from(rest("v0.0.42", "jobs"))}
    table = {
        # name: (pending, node_count, nodes, gpus_requested, gpus_allocated)
        "run2": (False, 2, ("gb200-001", "gb200-002"), 8, 8),  # --gres=gpu:4 -N2
        "pend8": (True, 8, (), 32, 0),  # pending, 8 x gres/gpu:4
        "perjob": (False, 1, ("gb200-019",), 2, 2),  # --gpus=2
        "pertask": (False, 1, ("gb200-004",), 2, 2),  # -n2 --gpus-per-task=1
        "inres": (False, 1, ("gb200-020",), 1, 1),
        "cpuonly": (False, 1, ("cpu-01",), 0, 0),
    }
    for name, (pending, count, nodes, requested, allocated) in table.items():
        job = jobs[name]
        assert (job.pending, job.node_count, job.nodes) == (pending, count, nodes), name
        assert (job.gpus_requested, job.gpus_allocated) == (requested, allocated), name
    assert jobs["inres"].reservation == "test_res"
    assert jobs["pend8"].reason == "Resources"
    assert jobs["pend8"].priority > jobs["run2"].priority > 0
    assert jobs["run2"].time_limit == timedelta(days=2)
    assert jobs["run2"].start_time is not None and jobs["pend8"].start_time is None
    # sbatch jobs under slurm.conf's default JobRequeue=1: `scontrol requeue` takes them.
    assert jobs["run2"].requeueable and jobs["run2"].restarts == 0


def test_reservations_carry_nodes_times_flags_and_users() -> None:
    (res,) = reservations_from(rest("v0.0.42", "reservations"))

    assert res.name == "test_res"
    assert res.nodes == ("gb200-020", "gb200-021")
    assert res.duration == timedelta(hours=1)
    assert res.flags == {"IGNORE_JOBS", "SPEC_NODES"}
    assert (res.users, res.accounts, res.partition) == (("root",), (), "")
    assert res.start is not None and res.start.tzinfo is not None


def test_ping_and_error_messages() -> None:
    (ping,) = pings_from(rest("v0.0.40", "ping"))
    assert ping.responding and ping.mode == "primary"
    (error,) = messages_from(rest("v0.0.42", "node-update-bad-state"))[1:]
    assert error.error_number == 2028
    assert "Invalid node state specified" in str(error)
    assert nodes_from(rest("v0.0.42", "node-unknown")) == ()


def test_unknown_fields_and_plain_numbers_are_accepted() -> None:
    doc = {
        "nodes": [
            {
                "name": "n1",
                "state": ["IDLE"],
                "cpus": {"set": True, "number": 8},
                "alloc_cpus": 2,
                "field_from_25_11": {"x": 1},
                "reason": None,
            }
        ]
    }
    (node,) = nodes_from(doc)
    assert (node.cpus, node.cpus_allocated, node.reason) == (8, 2, "")


def test_a_malformed_response_is_a_slurm_error() -> None:
    with pytest.raises(SlurmError):
        nodes_from({"nodes": {"name": "n1"}})
    with pytest.raises(SlurmError):
        jobs_from({"jobs": [{"name": "no id"}]})


def test_partition_members() -> None:
    doc = {
        "partitions": [
            {"name": "a", "nodes": {"configured": "n[1-2]"}},
            {"name": "b", "nodes": {"configured": "ALL"}},
        ]
    }
    assert partition_members(doc) == {"a": frozenset({"n1", "n2"}), "b": None}


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("gpu:gb200:4", 4),
        ("gpu:4", 4),
        ("gpu:h100:8(S:0-1)", 8),
        ("gpu:h100:2(IDX:0-1)", 2),
        ("gpu:a:2(IDX:0,2),gpu:b:1(IDX:3)", 3),
        ("gpu:gb200:0(IDX:N/A)", 0),
        ("shard:8,gpu:a:1", 1),
        ("", 0),
        ("(null)", 0),
    ],
)
def test_gres_gpus(gres: str, gpus: int) -> None:
    assert gres_gpus(gres) == gpus


@pytest.mark.parametrize(
    ("tres", "gpus"),
    [
        ("gres/gpu:4", 4),
        ("gres/gpu:gb200:4", 4),
        ("gres/gpu=1", 1),
        ("gres/gpu", 1),
        ("gres/shard:2,gres/gpu:2", 2),
        ("cpu=4", 0),
        ("", 0),
    ],
)
def test_tres_gpus(tres: str, gpus: int) -> None:
    assert tres_gpus(tres) == gpus


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("gb200-[001-003,019]", ("gb200-001", "gb200-002", "gb200-003", "gb200-019")),
        ("hgx-01", ("hgx-01",)),
        ("a[1-2],b", ("a1", "a2", "b")),
        ("r[1-2]-n[01-02]", ("r1-n01", "r1-n02", "r2-n01", "r2-n02")),
        ("n[8-10]", ("n8", "n9", "n10")),
        ("", ()),
        ("(null)", ()),
    ],
)
def test_hostlists_expand(expression: str, names: tuple[str, ...]) -> None:
    assert expand(expression) == names


@pytest.mark.parametrize("bad", ["a[1-", "a]", "a[3-1]", "a[x]", "a[0-99999999]"])
def test_bad_hostlists_are_refused(bad: str) -> None:
    with pytest.raises(HostlistError):
        expand(bad)


@given(
    st.sets(
        st.builds(
            "{}-{:0{}d}".format,
            st.sampled_from(["gb200", "hgx", "cpu"]),
            st.integers(0, 300),
            st.sampled_from([2, 3, 4]),
        ),
        min_size=1,
        max_size=60,
    )
)
def test_expand_inverts_the_renderers_compress(names: set[str]) -> None:
    assert sorted(expand(compress(names))) == sorted(names)


def test_data_parser_is_the_newest_both_sides_know() -> None:
    recorded = json.loads((FIXTURES / "openapi-24.11-paths.json").read_text())
    assert choose_data_parser(recorded) == "v0.0.42"
    paths: dict[str, object] = {
        f"/slurm/{v}/nodes/": {} for v in ["v0.0.41", "v0.0.43", "v0.0.45", "v0.0.46"]
    }
    assert choose_data_parser({"paths": paths}) == "v0.0.45"
    with pytest.raises(SlurmError, match=r"v0\.0\.39"):
        choose_data_parser({"paths": {"/slurm/v0.0.39/nodes/": {}, "/slurmdb/v0.0.42/": {}}})


@pytest.mark.parametrize(
    ("gres", "gpu_type"),
    [
        ("gpu:gb200:4", "gb200"),
        ("gpu:h100:8(S:0-1)", "h100"),
        ("gpu:4", ""),
        ("shard:8,gpu:a:1", "a"),
        ("", ""),
        ("(null)", ""),
    ],
)
def test_gres_gpu_type_is_the_registered_type(gres: str, gpu_type: str) -> None:
    assert gres_gpu_type(gres) == gpu_type
