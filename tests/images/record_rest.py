"""Record slurmrestd's answers from a live Slurm 26.05 as the unit tests' fixtures.

Starts the Slurm image's daemons under podman on loopback (slurm_stack.py, two
CPU nodes), puts jobs, a drain and a reservation in place, then sends the
requests RestClient sends on every data_parser version the daemon serves and
writes each answer to `<out>/rest-<series>/<version>/<name>.json` as
`{"status": <HTTP status>, "body": <JSON>}`, and the paths of `/openapi/v3` to
`<out>/openapi-<series>-paths.json`. Reservation writes use the bodies
RestClient builds (slurmkube.slurm.rest_bodies). Run as root (the daemons'
files are chowned), with the image built:

    .venv/bin/python -m tests.images.record_rest [--image REF] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from images import build as image_build
from slurmkube.slurm.models import NodeStateChange, ReservationUpdate
from slurmkube.slurm.parse import version_key
from slurmkube.slurm.rest_bodies import (
    abilities,
    node_state_body,
    reservation_body,
    reservation_update_body,
)
from slurmkube.slurm.tokens import JwtMinter
from tests.unit.slurm_recorded import READ_RESERVATION, WRITTEN_RESERVATION

from .conftest import Podman
from .slurm_stack import SlurmStack, start_slurm_stack, wait_until

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
NODES = ("n1", "n2")
MISSING_JOB = 999999


class Recorder:
    """Sends requests to slurmrestd and keeps each answer under a name."""

    def __init__(self, stack: SlurmStack) -> None:
        self._http = httpx.Client(base_url=stack.rest_url, timeout=30)
        self._token = JwtMinter(stack.jwt_key, "slurm")
        self._bad_token = JwtMinter(b"x" * 32, "slurm")
        self.answers: dict[str, dict[str, Any]] = {}

    def send(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        bad_token: bool = False,
    ) -> dict[str, Any]:
        token = (self._bad_token if bad_token else self._token)()
        response = self._http.request(
            method, path, json=body, headers={"X-SLURM-USER-TOKEN": token}
        )
        answer = {"status": response.status_code, "body": response.json()}
        return answer

    def record(self, name: str, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        answer = self.send(method, path, **kwargs)
        self.answers[name] = answer
        return answer

    def ok(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> None:
        answer = self.send(method, path, body)
        errors = answer["body"].get("errors")
        if answer["status"] != 200 or errors:
            raise AssertionError(f"{method} {path}: {answer['status']} {errors}")


def offered_versions(openapi: Mapping[str, Any]) -> list[str]:
    found = {p.split("/")[2] for p in openapi["paths"] if p.startswith("/slurm/v")}
    return sorted(found, key=version_key)


def paths_only(openapi: Mapping[str, Any]) -> dict[str, Any]:
    """What the unit tests read of `/openapi/v3`: its paths and their methods."""
    return {
        "info": openapi["info"],
        "openapi": openapi["openapi"],
        "paths": {p: {m: {} for m in ops} for p, ops in sorted(openapi["paths"].items())},
    }


def put_work_in_place(podman: Podman, stack: SlurmStack, rest: Recorder, newest: str) -> None:
    """Jobs running, pending and inside a reservation; n1 draining by slurmkube."""

    def sbatch(*args: str) -> None:
        podman("exec", stack.sackd, "sbatch", "--output=/dev/null", *args, timeout=60)

    sbatch("-J", "run1", "-N1", "-w", "n1", "-t", "60", "--wrap", "sleep 3600")
    rest.ok("POST", f"/slurm/{newest}/reservation", reservation_body(READ_RESERVATION, newest))
    sbatch("-J", "inres", "--reservation=test_res", "-N1", "-t", "60", "--wrap", "sleep 3600")
    sbatch("-J", "pend2", "-N2", "--exclusive", "-t", "30", "--wrap", "true")
    wait_until(
        lambda: job_states(podman, stack) == {"run1": "R", "inres": "R", "pend2": "PD"},
        "run1 and inres running, pend2 pending",
        podman,
    )
    body = node_state_body(NodeStateChange.DRAIN, "slurmkube: test")
    rest.ok("POST", f"/slurm/{newest}/node/n1", body)
    # slurmctld marks a reservation's nodes RESERVED on its next pass, not at once.
    wait_until(
        lambda: "RESERVED" in node_state(rest, newest, "n2"), "n2 RESERVED by test_res", podman
    )


def node_state(rest: Recorder, version: str, node: str) -> list[str]:
    nodes = rest.send("GET", f"/slurm/{version}/node/{node}")["body"]["nodes"]
    return [flag for n in nodes for flag in n["state"]]


def job_states(podman: Podman, stack: SlurmStack) -> dict[str, str]:
    out = podman("exec", stack.controller, "squeue", "-h", "-o", "%j %t", check=False)
    return dict(line.split() for line in out.splitlines() if line.strip())


def record_reads(rest: Recorder, version: str) -> None:
    base = f"/slurm/{version}"
    rest.record("ping", "GET", f"{base}/ping/")
    rest.record("nodes", "GET", f"{base}/nodes/")
    rest.record("node-n1", "GET", f"{base}/node/n1")
    rest.record("node-unknown", "GET", f"{base}/node/nosuch")
    rest.record("partitions", "GET", f"{base}/partitions/")
    rest.record("jobs", "GET", f"{base}/jobs/")
    rest.record("reservations", "GET", f"{base}/reservations/")
    rest.record("reservation-unknown", "GET", f"{base}/reservation/nosuch")
    rest.record("nodes-bad-token", "GET", f"{base}/nodes/", bad_token=True)
    if abilities(version).reads_config:
        rest.record("conf", "GET", f"{base}/conf")
    drain = {"state": ["DRAIN"], "reason": "slurmkube: test"}
    rest.record("node-update-unknown", "POST", f"{base}/node/nosuch", body=drain)
    rest.record("node-update-bad-state", "POST", f"{base}/node/n2", body={"state": ["BOGUS"]})


def record_writes(rest: Recorder, version: str, pending_job: int) -> None:
    """The writes this version does over REST; each leaves the cluster as it was."""
    base = f"/slurm/{version}"
    can = abilities(version)
    if can.writes_reservations:
        created = reservation_body(WRITTEN_RESERVATION, version)
        assert created is not None, version
        rest.record("reservation-create", "POST", f"{base}/reservation", body=created)
        update = ReservationUpdate(name=WRITTEN_RESERVATION.name, users=("root", "slurm"))
        body = reservation_update_body(update)
        rest.record("reservation-update", "POST", f"{base}/reservation", body=body)
        rest.record("reservation-updated", "GET", f"{base}/reservations/")
        name = WRITTEN_RESERVATION.name
        rest.record("reservation-delete", "DELETE", f"{base}/reservation/{name}")
        rest.record("reservation-delete-unknown", "DELETE", f"{base}/reservation/nosuch")
    if can.requeues_jobs:
        rest.record("job-requeue-unknown", "GET", f"{base}/job/{MISSING_JOB}/requeue")
        rest.record("job-requeue-pending", "GET", f"{base}/job/{pending_job}/requeue")


def write_answers(directory: Path, answers: Mapping[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, answer in answers.items():
        text = json.dumps(answer, indent=1, sort_keys=True) + "\n"
        (directory / f"{name}.json").write_text(text)


def record(
    image: str, series: str, out: Path, log: Callable[[str], None] = print
) -> dict[str, list[str]]:
    """Record every version's answers; version -> the names recorded."""
    podman = Podman(image_build.podman_env(image_build.cache_dir()))
    prefix = f"slurmkube-record-{os.getpid()}"
    recorded: dict[str, list[str]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="record-rest-") as work:
            stack = start_slurm_stack(podman, image, Path(work), prefix, NODES)
            rest = Recorder(stack)
            openapi = rest.send("GET", "/openapi/v3")["body"]
            versions = offered_versions(openapi)
            log(f"slurmrestd serves {versions}")
            put_work_in_place(podman, stack, rest, versions[-1])
            jobs = rest.send("GET", f"/slurm/{versions[-1]}/jobs/")["body"]["jobs"]
            pending = next(j["job_id"] for j in jobs if j["name"] == "pend2")
            for version in versions:
                rest.answers = {}
                record_reads(rest, version)
                record_writes(rest, version, pending)
                write_answers(out / f"rest-{series}" / version, rest.answers)
                recorded[version] = sorted(rest.answers)
                log(f"{version}: {', '.join(recorded[version])}")
            paths = out / f"openapi-{series}-paths.json"
            paths.write_text(json.dumps(paths_only(openapi), indent=1, sort_keys=True) + "\n")
    finally:
        for name in podman.started:
            podman("rm", "--force", "--ignore", "--time", "0", name, check=False)
    return recorded


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="record_rest", description=__doc__.split("\n")[0])
    parser.add_argument("--image", default="localhost/slurmkube/slurm:26.05")
    parser.add_argument("--series", default="26.05")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    args = parser.parse_args(argv)
    start = time.monotonic()
    record(args.image, args.series, args.out)
    print(f"recorded in {time.monotonic() - start:.0f} s under {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
