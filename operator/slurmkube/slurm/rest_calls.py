"""One call to slurmrestd: the JWT it carries, TLS to the cluster's CA, retries
on transient failures, and the answer turned into a document or a typed error.

What every operation shares, apart from what each means (`slurm/rest.py`).
Transient failures (connection errors, 502/503/504, which slurmrestd returns
when slurmctld is down) are retried with backoff; nothing else is, and never a
4xx (`slurm/responses.py` types the answer).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from typing import Any

import httpx
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from slurmkube.slurm.decode import Converters
from slurmkube.slurm.errors import SlurmUnreachable
from slurmkube.slurm.responses import check_response


def http_client(
    url: str,
    *,
    timeout: float,
    transport: httpx.BaseTransport | None,
    ca_pem: bytes | None,
) -> httpx.Client:
    """https: the certificate must chain to `ca_pem` (else the system's CAs)."""
    verify = ssl.create_default_context(cadata=ca_pem.decode() if ca_pem else None)
    return httpx.Client(base_url=url, timeout=timeout, transport=transport, verify=verify)


class RestCalls:
    """Requests over `http` with a token from `token` in `X-SLURM-USER-TOKEN`.

    `server_name` is the name the certificate must carry when a client dials a
    pod's IP (SNI, not the URL's host).
    """

    def __init__(
        self,
        http: httpx.Client,
        token: Callable[[], str],
        *,
        attempts: int,
        max_backoff: float,
        server_name: str | None,
    ) -> None:
        self._http = http
        self._token = token
        self._extensions = {"sni_hostname": server_name} if server_name else {}
        self._retrying = Retrying(
            retry=retry_if_exception_type(SlurmUnreachable),
            stop=stop_after_attempt(max(attempts, 1)),
            wait=wait_exponential(multiplier=0.1, max=max_backoff),
            reraise=True,
        )

    def send(
        self,
        method: str,
        path: str,
        operation: str,
        body: Mapping[str, Any] | None = None,
        convert: Converters | None = None,
        *,
        timeout: float | None = None,
    ) -> Mapping[str, Any]:
        def attempt() -> Mapping[str, Any]:
            try:
                response = self._http.request(
                    method,
                    path,
                    json=body,
                    headers={"X-SLURM-USER-TOKEN": self._token()},
                    timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout,
                    extensions=self._extensions,
                )
            except httpx.TransportError as err:
                raise SlurmUnreachable(
                    f"slurmrestd at {self._http.base_url}: {type(err).__name__}: {err}",
                    operation=operation,
                ) from err
            status, text = response.status_code, response.text
            del response  # its bytes (~20 MB for 10,000 nodes) need not outlive the text
            return check_response(status, text, operation, convert)

        result: Mapping[str, Any] = self._retrying(attempt)
        return result
