"""Reading a live source over real HTTP on loopback: ETags, ColdFront's token,
and errors that name the field (the controller then changes nothing)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

import pytest

from slurmkube.controllers.policy_sources import SourceError, SourceReader
from slurmkube.kube.client import Kube
from slurmkube.plan.policy.sources import load_allocation_source
from tests.unit.policy_builders import TeamBuilder, recorded_coldfront


@dataclass
class Served:
    """What the loopback server answers, and what it was asked."""

    routes: dict[str, tuple[int, Any, str]] = field(
        default_factory=dict
    )  # path -> status, body, etag
    asked: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    url: str = ""


@pytest.fixture
def served() -> Iterator[Served]:
    state = Served()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.asked.append((self.path, dict(self.headers)))
            status, body, etag = state.routes.get(self.path, (404, {"detail": "nope"}, ""))
            if etag and self.headers.get("If-None-Match") == etag:
                self.send_response(304)
                self.end_headers()
                return
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            if etag:
                self.send_header("ETag", etag)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


class SecretsOnly:
    """The one Kube call a source reader makes."""

    def __init__(self, secrets: dict[tuple[str, str], bytes]) -> None:
        self.secrets = secrets

    def secret_value(self, namespace: str, name: str, key: str) -> bytes | None:
        return self.secrets.get((name, key))


def source_of(**spec: Any) -> Any:
    return load_allocation_source(
        {
            "apiVersion": "slurmkube.io/v1alpha1",
            "kind": "AllocationSource",
            "metadata": {"name": "fleet", "namespace": "slurmkube"},
            "spec": spec,
        },
        "test",
    )


def kube(secrets: dict[tuple[str, str], bytes] | None = None) -> Kube:
    return cast(Kube, SecretsOnly(secrets or {}))


def test_an_unchanged_document_is_asked_with_its_etag_and_not_sent_again(served: Served) -> None:
    served.routes["/teams.json"] = (200, {"teams": [TeamBuilder("team-a").gpus(8).obj()]}, '"v1"')
    reader, source = SourceReader(), source_of(http={"url": f"{served.url}/teams.json"})
    first = reader.read(kube(), source)
    second = reader.read(kube(), source)
    assert [t.name for t in second.teams] == [t.name for t in first.teams] == ["team-a"]
    assert second.etag == '"v1"'
    assert served.asked[1][1].get("If-None-Match") == '"v1"'


COLDFRONT = {
    "tokenSecretRef": {"name": "cf", "key": "token"},
    "resourceName": "slurmkube fleet",
    "defaultQuota": {"gpus": 1},
}


def test_coldfront_pages_are_followed_on_the_same_server(served: Served) -> None:
    """A site that sets DRF's PageNumberPagination answers pages with `next` links."""
    allocations, projects = recorded_coldfront()
    base = f"{served.url}/api"
    served.routes["/api/allocations/?allocation_attributes=true"] = (
        200,
        {
            "count": 3,
            "next": f"{base}/allocations/?allocation_attributes=true&page=2",
            "previous": None,
            "results": allocations[:1],
        },
        "",
    )
    served.routes["/api/allocations/?allocation_attributes=true&page=2"] = (
        200,
        {"count": 3, "next": None, "previous": None, "results": allocations[1:]},
        "",
    )
    served.routes["/api/projects/?project_users=true"] = (200, projects, "")
    source = source_of(coldfront={"url": base, **COLDFRONT})
    fetched = SourceReader().read(kube({("cf", "token"): b"t"}), source)
    assert sorted(t.name for t in fetched.teams) == ["speech-models", "team-a"]


def test_a_next_page_on_another_server_is_not_asked(served: Served) -> None:
    served.routes["/api/allocations/?allocation_attributes=true"] = (
        200,
        {"next": "http://192.0.2.1/api/allocations/?page=2", "results": []},
        "",
    )
    source = source_of(coldfront={"url": f"{served.url}/api", **COLDFRONT})
    with pytest.raises(SourceError) as err:
        SourceReader().read(kube({("cf", "token"): b"t"}), source)
    assert (err.value.reason, "is elsewhere") == ("InvalidDocument", "is elsewhere")
    assert "spec.coldfront.url" in err.value.message
    assert len(served.asked) == 1


def test_coldfront_is_asked_with_the_token_from_its_secret(served: Served) -> None:
    served.routes["/api/allocations/?allocation_attributes=true"] = (
        200,
        [{"id": 1, "project": "Vision Lab", "resource": "fleet-a", "status": "Active"}],
        "",
    )
    served.routes["/api/projects/?project_users=true"] = (
        200,
        [
            {
                "id": 7,
                "title": "Vision Lab",
                "status": "Active",
                "project_users": [{"user": "alice", "status": "Active"}],
            }
        ],
        "",
    )
    source = source_of(
        coldfront={
            "url": f"{served.url}/api",
            "tokenSecretRef": {"name": "cf", "key": "token"},
            "resourceName": "fleet-a",
            "defaultQuota": {"gpus": 4},
        }
    )
    fetched = SourceReader().read(kube({("cf", "token"): b"s3cret\n"}), source)
    assert [(t.name, t.members.slurm_users) for t in fetched.teams] == [("vision-lab", ["alice"])]
    assert all(headers.get("Authorization") == "Token s3cret" for _, headers in served.asked)


@pytest.mark.parametrize(
    ("routes", "spec_of", "secrets", "expected"),
    [
        pytest.param(
            {},
            lambda url: {"http": {"url": "http://127.0.0.1:9/teams.json"}},
            {},
            ("Unreachable", "spec.http.url"),
            id="nothing listens",
        ),
        pytest.param(
            {"/teams.json": (500, "oops", "")},
            lambda url: {"http": {"url": f"{url}/teams.json"}},
            {},
            ("HTTPError", "spec.http.url"),
            id="server error",
        ),
        pytest.param(
            {"/teams.json": (200, "not json", "")},
            lambda url: {"http": {"url": f"{url}/teams.json"}},
            {},
            ("InvalidDocument", "spec.http.url"),
            id="not json",
        ),
        pytest.param(
            {"/teams.json": (200, {"teams": [{"name": "Bad Name", "gpus": 1}]}, "")},
            lambda url: {"http": {"url": f"{url}/teams.json"}},
            {},
            ("InvalidDocument", "teams.0.name"),
            id="a team name that is not an account",
        ),
        pytest.param(
            {},
            lambda url: {
                "http": {
                    "url": f"{url}/teams.json",
                    "caSecretRef": {"name": "ca", "key": "ca.crt"},
                }
            },
            {},
            ("SecretMissing", "spec.http.caSecretRef"),
            id="no CA secret",
        ),
        pytest.param(
            {},
            lambda url: {
                "coldfront": {
                    "url": f"{url}/api",
                    "tokenSecretRef": {"name": "cf", "key": "token"},
                    "resourceName": "fleet-a",
                    "defaultQuota": {"gpus": 4},
                }
            },
            {},
            ("SecretMissing", "spec.coldfront.tokenSecretRef"),
            id="no token",
        ),
    ],
)
def test_a_source_that_cannot_be_read_says_why_naming_the_field(
    served: Served,
    routes: dict[str, tuple[int, Any, str]],
    spec_of: Any,
    secrets: dict[tuple[str, str], bytes],
    expected: tuple[str, str],
) -> None:
    reason, field = expected
    served.routes.update(routes)
    with pytest.raises(SourceError) as err:
        SourceReader().read(kube(secrets), source_of(**spec_of(served.url)))
    assert err.value.reason == reason
    assert field in err.value.message
