"""Every data_parser version slurmkube supports, against answers recorded from the
live daemons of each Slurm release (tests/unit/slurm_recorded.py)."""

from __future__ import annotations

import json

import pytest

from slurmkube.slurm import SlurmAuthError, SlurmError, SlurmNotFound, SlurmRejected
from slurmkube.slurm.parse import (
    SUPPORTED_DATA_PARSERS,
    choose_data_parser,
    config_loaded_from,
    jobs_from,
    nodes_from,
    partition_members,
    pings_from,
    reservations_from,
)
from slurmkube.slurm.responses import check_response
from slurmkube.slurm.rest_bodies import abilities

from .slurm_recorded import RELEASES, REQUIRED, body, openapi, recorded, versions

NODES = ("n1", "n2")
RECORDED = [(release, version) for release in RELEASES for version in versions(release)]


@pytest.mark.parametrize("version", SUPPORTED_DATA_PARSERS)
def test_every_supported_version_has_answers_recorded_from_a_live_daemon(version: str) -> None:
    complete = [
        release
        for release, directory in RELEASES.items()
        if all((directory / version / f"{name}.json").is_file() for name in REQUIRED)
    ]
    assert complete, f"{version} is supported but no release has its {REQUIRED} recorded"


@pytest.mark.parametrize(("release", "version"), RECORDED)
def test_every_recorded_version_is_supported(release: str, version: str) -> None:
    assert version in SUPPORTED_DATA_PARSERS


@pytest.mark.parametrize(("release", "newest"), [("24.11", "v0.0.42"), ("26.05", "v0.0.45")])
def test_the_newest_version_a_release_serves_is_chosen(release: str, newest: str) -> None:
    assert choose_data_parser(openapi(release)) == newest


@pytest.mark.parametrize(("release", "version"), RECORDED)
def test_every_version_of_a_release_parses_to_the_same_models(release: str, version: str) -> None:
    newest = versions(release)[-1]
    for parse, name in [
        (nodes_from, "nodes"),
        (jobs_from, "jobs"),
        (reservations_from, "reservations"),
    ]:
        assert parse(body(release, version, name)) == parse(body(release, newest, name)), name
    pings = pings_from(body(release, version, "ping"))
    assert [(p.responding, p.mode) for p in pings] == [(True, "primary")]


@pytest.mark.parametrize("version", versions("26.05"))
def test_26_05_answers_carry_drains_reservations_and_jobs(version: str) -> None:
    nodes = {n.name: n for n in nodes_from(body("26.05", version, "nodes"))}
    assert (nodes["n1"].draining, nodes["n1"].reason) == (True, "slurmkube: test")
    assert nodes["n1"].drained_by_us
    assert (nodes["n2"].reservation, "RESERVED" in nodes["n2"].state) == ("test_res", True)
    assert {n.cpus for n in nodes.values()} == {64}

    jobs = {j.name: j for j in jobs_from(body("26.05", version, "jobs"))}
    assert {name: (j.running, j.nodes) for name, j in jobs.items()} == {
        "run1": (True, ("n1",)),
        "inres": (True, ("n2",)),
        "pend2": (False, ()),
    }
    # Resources until slurmctld's next pass sees n1 draining and n2 reserved.
    assert jobs["pend2"].pending and jobs["pend2"].reason in ("Resources", "ReqNodeNotAvail")
    assert jobs["inres"].reservation == "test_res"
    assert jobs["run1"].requeueable

    (res,) = reservations_from(body("26.05", version, "reservations"))
    assert (res.name, res.nodes, res.users, res.accounts) == ("test_res", ("n2",), ("root",), ())
    assert res.flags == {"IGNORE_JOBS", "SPEC_NODES"}
    assert res.duration is not None and res.duration.total_seconds() == 3600
    assert partition_members(body("26.05", version, "partitions")) == {"gpu": frozenset(NODES)}


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_rest_abilities_are_what_the_daemons_openapi_offers(release: str) -> None:
    paths = openapi(release)["paths"]
    for version in sorted({p.split("/")[2] for p in paths if p.startswith("/slurm/v")}):
        can = abilities(version)
        writes = paths.get(f"/slurm/{version}/reservation", {})
        deletes = paths.get(f"/slurm/{version}/reservation/{{reservation_name}}", {})
        requeues = paths.get(f"/slurm/{version}/job/{{job_id}}/requeue", {})
        assert can.writes_reservations == ("post" in writes), version
        if can.writes_reservations:
            assert "delete" in deletes, version
        assert can.requeues_jobs == ("get" in requeues), version
        assert can.reads_config == ("get" in paths.get(f"/slurm/{version}/conf", {})), version


@pytest.mark.parametrize(
    ("version", "name", "error", "words"),
    [
        (v, name, error, words)
        for v in versions("26.05")
        for name, error, words in [
            ("nodes-bad-token", SlurmAuthError, "Protocol authentication error"),
            ("node-update-unknown", SlurmNotFound, "Invalid node name specified"),
            ("node-update-bad-state", SlurmRejected, "Invalid node state transition"),
            ("reservation-unknown", SlurmRejected, "Unable to find reservation nosuch"),
        ]
    ]
    + [
        (v, "reservation-delete-unknown", SlurmRejected, "Requested reservation is invalid")
        for v in versions("26.05")
        if abilities(v).writes_reservations
    ]
    + [
        ("v0.0.45", "job-requeue-unknown", SlurmNotFound, "Invalid job id specified"),
        ("v0.0.45", "job-requeue-pending", SlurmRejected, "Job is pending execution"),
    ],
)
def test_26_05_failures_map_to_typed_errors_with_slurms_words(
    version: str, name: str, error: type[SlurmError], words: str
) -> None:
    answer = recorded("26.05", version, name)
    text = json.dumps(answer["body"])
    with pytest.raises(error, match=words):
        check_response(answer["status"], text, "op")


@pytest.mark.parametrize(
    "version", [v for v in versions("26.05") if abilities(v).writes_reservations]
)
def test_26_05_accepted_the_reservation_bodies_slurmkube_sends(version: str) -> None:
    for name in ("reservation-create", "reservation-update", "reservation-delete"):
        answer = recorded("26.05", version, name)
        assert (answer["status"], answer["body"]["errors"]) == (200, []), name
    (updated,) = [
        r
        for r in reservations_from(body("26.05", version, "reservation-updated"))
        if r.name == "recorded_res"
    ]
    assert (updated.nodes, updated.users) == (("n1",), ("root", "slurm"))
    assert updated.flags >= {"IGNORE_JOBS", "NO_HOLD_JOBS_AFTER_END"}
    assert updated.duration is not None and updated.duration.total_seconds() == 30 * 60


@pytest.mark.parametrize("version", [v for v in versions("26.05") if abilities(v).reads_config])
def test_26_05_config_read_says_when_slurmctld_last_read_its_files(version: str) -> None:
    doc = body("26.05", version, "conf")
    loaded = config_loaded_from(doc)
    # What scontrol prints as `Configuration data as of`: after slurmctld's boot.
    assert loaded.timestamp() == doc["slurm_conf_meta"]["LastUpdate"]
    assert loaded.timestamp() >= doc["slurm_conf_meta"]["BOOT_TIME"]


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"slurm_conf_meta": {}},
        {"slurm_conf_meta": {"LastUpdate": "soon"}},
        {"slurm_conf_meta": 3},
    ],
)
def test_a_config_read_without_its_load_time_is_an_error(doc: dict[str, object]) -> None:
    with pytest.raises(SlurmError, match="LastUpdate"):
        config_loaded_from(doc)
