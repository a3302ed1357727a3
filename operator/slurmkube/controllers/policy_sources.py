"""Reading an AllocationSource's teams: inline, an HTTP(S) document, ColdFront's REST API.

Only reads. An `http` source is asked with `If-None-Match` and the last ETag,
so an unchanged document costs a 304 and is not parsed again; the CA bundle
(`spec.http.caSecretRef`) and ColdFront's token (`spec.coldfront.tokenSecretRef`)
come from Secrets in the AllocationSource's namespace. Every failure is a
`SourceError` whose reason is a condition reason and whose message names the
field: the controller then applies nothing and keeps what is in force.
"""

from __future__ import annotations

import ssl
import threading
from dataclasses import dataclass
from typing import Any

import httpx

from slurmkube.api.allocation_source import AllocationSource, Team
from slurmkube.api.meta import SecretKeyRef
from slurmkube.controllers.queue import Key
from slurmkube.kube.client import Kube
from slurmkube.plan.policy.model import PolicyError
from slurmkube.plan.policy.sources import SourceAnswers, teams_from_answers

TIMEOUT_SECONDS = 10.0
MAX_PAGES = 1000


class SourceError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class Fetched:
    teams: list[Team]
    etag: str | None = None


@dataclass(frozen=True, slots=True)
class _Document:
    etag: str
    body: Any


class SourceReader:
    """Remembers each http source's last document and ETag, by AllocationSource."""

    def __init__(self) -> None:
        self._documents: dict[Key, _Document] = {}
        self._lock = threading.Lock()

    def forget(self, key: Key) -> None:
        with self._lock:
            self._documents.pop(key, None)

    def read(self, kube: Kube, source: AllocationSource) -> Fetched:
        spec = source.spec
        name = f"AllocationSource {source.metadata.name}"
        namespace = source.metadata.namespace or "default"
        if spec.inline is not None:
            return Fetched(list(spec.inline.teams))
        if spec.http is not None:
            key = (namespace, source.metadata.name)
            verify = _verify(kube, namespace, spec.http.ca_secret_ref, f"{name} spec.http")
            with self._lock:
                last = self._documents.get(key)
            headers = {"If-None-Match": last.etag} if last is not None else {}
            response = _get(spec.http.url, headers, verify, f"{name} spec.http.url")
            if response.status_code == 304 and last is not None:
                body, etag = last.body, last.etag
            else:
                body, etag = _json(response, f"{name} spec.http.url"), response.headers.get("ETag")
            teams = _teams(source, SourceAnswers(document=body))
            if etag:
                with self._lock:
                    self._documents[key] = _Document(etag, body)
            return Fetched(teams, etag)
        cf = spec.coldfront
        assert cf is not None, "the CRD and the model allow exactly one source"
        where = f"{name} spec.coldfront"
        token = secret_value(kube, namespace, cf.token_secret_ref, f"{where}.tokenSecretRef")
        headers = {"Authorization": f"Token {token.decode().strip()}"}
        base = cf.url.rstrip("/")
        # DRF's router wants the trailing slash (without it Django answers a redirect).
        answers = SourceAnswers(
            coldfront_allocations=_pages(
                f"{base}/allocations/?allocation_attributes=true", headers, f"{where}.url"
            ),
            coldfront_projects=_pages(
                f"{base}/projects/?project_users=true", headers, f"{where}.url"
            ),
        )
        return Fetched(_teams(source, answers))


def _teams(source: AllocationSource, answers: SourceAnswers) -> list[Team]:
    try:
        teams = teams_from_answers(source, answers)
    except PolicyError as err:
        raise SourceError("InvalidDocument", str(err)) from err
    assert teams is not None, "every answer was read"
    return teams


def secret_value(kube: Kube, namespace: str, ref: SecretKeyRef, where: str) -> bytes:
    value = kube.secret_value(namespace, ref.name, ref.key)
    if not value:
        raise SourceError(
            "SecretMissing", f"{where}: Secret {namespace}/{ref.name} has no key {ref.key!r}"
        )
    return value


def _verify(
    kube: Kube, namespace: str, ref: SecretKeyRef | None, where: str
) -> ssl.SSLContext | bool:
    if ref is None:
        return True
    return ca_context(secret_value(kube, namespace, ref, f"{where}.caSecretRef"), where)


def ca_context(pem: bytes, where: str) -> ssl.SSLContext:
    """A context trusting the PEM bundle a `caSecretRef` holds, or why it cannot."""
    try:
        return ssl.create_default_context(cadata=pem.decode())
    except (ssl.SSLError, ValueError) as err:
        raise SourceError("InvalidCA", f"{where}.caSecretRef: not a PEM bundle: {err}") from err


def _get(
    url: str, headers: dict[str, str], verify: ssl.SSLContext | bool, where: str
) -> httpx.Response:
    try:
        response = httpx.get(
            url, headers=headers, verify=verify, timeout=TIMEOUT_SECONDS, follow_redirects=True
        )
    except httpx.HTTPError as err:
        raise SourceError("Unreachable", f"{where}: {url}: {type(err).__name__}: {err}") from err
    if response.status_code == 304:
        return response
    if response.status_code >= 400:
        raise SourceError(
            "HTTPError", f"{where}: {url} answered {response.status_code} {response.reason_phrase}"
        )
    return response


def _pages(url: str, headers: dict[str, str], where: str) -> Any:
    """A list answer as it is; a DRF page (a site that sets a pagination class)
    followed through its `next` links into one `{"results": [...]}`."""
    answer = _json(_get(url, headers, True, where), where)
    if not (isinstance(answer, dict) and isinstance(answer.get("results"), list)):
        return answer
    results = list(answer["results"])
    for _ in range(MAX_PAGES):
        following = answer.get("next")
        if not isinstance(following, str) or not following:
            return {"results": results}
        if _origin(following) != _origin(url):  # the token goes along
            raise SourceError("InvalidDocument", f"{where}: next page {following} is elsewhere")
        answer = _json(_get(following, headers, True, where), where)
        if not isinstance(answer, dict) or not isinstance(answer.get("results"), list):
            raise SourceError("InvalidDocument", f"{where}: {following}: not a page of results")
        results.extend(answer["results"])
    raise SourceError("InvalidDocument", f"{where}: {url}: more than {MAX_PAGES} pages")


def _origin(url: str) -> tuple[str, str, int | None]:
    parsed = httpx.URL(url)
    return parsed.scheme, parsed.host, parsed.port


def _json(response: httpx.Response, where: str) -> Any:
    try:
        return response.json()
    except ValueError as err:
        raise SourceError("InvalidDocument", f"{where}: the answer is not JSON: {err}") from err
