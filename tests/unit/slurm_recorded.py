"""Slurm's answers recorded from live daemons (tests/fixtures/slurm/), by release.

24.11.5's were recorded from a host build (tests/fixtures/slurm/README.md), 26.05.5's
from its image by tests/images/record_rest.py. Each file is
`{"status": <HTTP status>, "body": <JSON>}` for one request on one data_parser version.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from slurmkube.slurm.models import ReservationFlag, ReservationRequest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
# Release -> the directory holding one directory of answers per data_parser version.
RELEASES = {"24.11": FIXTURES / "rest", "26.05": FIXTURES / "rest-26.05"}
# What every data_parser version slurmkube supports must have been recorded answering.
REQUIRED = (
    "jobs",
    "node-unknown",
    "node-update-bad-state",
    "node-update-unknown",
    "nodes",
    "nodes-bad-token",
    "ping",
    "reservation-unknown",
    "reservations",
)
# 26.05: the reservation every version reads, and the one each version that can
# creates, updates and deletes (IGNORE_JOBS: n1 runs a job) (tests/images/record_rest.py).
READ_RESERVATION = ReservationRequest(
    name="test_res",
    nodes=("n2",),
    users=("root",),
    duration=timedelta(hours=1),
    flags=frozenset({ReservationFlag.IGNORE_JOBS}),
)
WRITTEN_RESERVATION = ReservationRequest(
    name="recorded_res",
    nodes=("n1",),
    users=("root",),
    duration=timedelta(minutes=30),
    flags=frozenset({ReservationFlag.IGNORE_JOBS, ReservationFlag.NO_HOLD_JOBS_AFTER}),
)


def recorded(release: str, version: str, name: str) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads((RELEASES[release] / version / f"{name}.json").read_text())
    return answer


def body(release: str, version: str, name: str) -> dict[str, Any]:
    answer: dict[str, Any] = recorded(release, version, name)["body"]
    return answer


def response(release: str, version: str, name: str) -> httpx.Response:
    answer = recorded(release, version, name)
    return httpx.Response(answer["status"], json=answer["body"])


def versions(release: str) -> list[str]:
    """The data_parser versions recorded for `release`, oldest first."""
    found = [d.name for d in RELEASES[release].iterdir() if d.is_dir()]
    return sorted(found, key=lambda v: tuple(int(x) for x in v.lstrip("v").split(".")))


def openapi(release: str) -> dict[str, Any]:
    """The paths (and their methods) of the release's `/openapi/v3`."""
    doc: dict[str, Any] = json.loads((FIXTURES / f"openapi-{release}-paths.json").read_text())
    return doc
