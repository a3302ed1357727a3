"""A reflector for one cluster-scoped kind, as client-go's: list it in pages,
watch from the list's resourceVersion, list again when that version expired.

It runs in a thread of its own and hands each page and each watch event to a
`Sink` as plain dicts, each decoded once with `json.loads`. kopf, by contrast,
takes every object through its per-object machinery and runs no handler
before its initial list is through: at 25,000 Nodes a restarted operator
served nothing for minutes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from slurmkube.kube.client import Manifest

log = logging.getLogger(__name__)

GONE = 410  # the resourceVersion a watch or a page's `continue` asked for is compacted away


class Sink(Protocol):
    def listed_page(self, items: list[Manifest]) -> None:
        """Objects of the list under way (the first, or one after the watch lost its place)."""

    def listed(self, names: frozenset[str]) -> None:
        """The list is through: `names` is every object there is; the rest are gone."""

    def event(self, event_type: str, obj: Manifest) -> None:
        """A watch event: ADDED, MODIFIED or DELETED."""


class Expired(Exception):
    """The watch's resourceVersion is too old: list again."""


class Reflector:
    """`list_call` is the kind's list function of the `kubernetes` package (for
    Nodes, `CoreV1Api.list_node`); it lists and, with `watch=True`, watches."""

    def __init__(
        self,
        list_call: Callable[..., Any],
        sink: Sink,
        *,
        name: str,
        page_size: int = 500,
        watch_seconds: int = 300,
        retry_seconds: float = 1.0,
        max_retry_seconds: float = 30.0,
    ) -> None:
        self._call = list_call
        self._sink = sink
        self.name = name
        self._page_size = page_size
        self._watch_seconds = watch_seconds
        self._retry = (retry_seconds, max_retry_seconds)
        self._stop = threading.Event()
        self._response: Any = None
        # The last resourceVersion seen: a watch that broke resumes there.
        self._version: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"reflector-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            # A shutdown ends the watch's blocked read at once. A close would wait
            # for that read to return (the response's buffer lock it holds): until
            # the next Node event, and kopf's cleanup, the Lease's release with it,
            # waits on this call.
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                response.shutdown()  # raises once the thread released the connection

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                if self._version is None:
                    self._version = self._list()
                self._watch(self._version)
                failures = 0
            except Expired:
                self._version = None
            except ApiException as err:
                if err.status == GONE:
                    self._version = None
                    continue
                failures += 1
                self._wait(failures, err)
            except Exception as err:  # a connection reset, a timeout: watch again from here
                if self._stop.is_set():
                    return
                failures += 1
                self._wait(failures, err)

    def _wait(self, failures: int, err: Exception) -> None:
        first, most = self._retry
        delay = min(first * 2 ** (failures - 1), most)
        log.warning(
            "reflector=%s failed=%d retry_in=%.1f error=%s", self.name, failures, delay, err
        )
        self._stop.wait(delay)

    def _list(self) -> str:
        """Every object, a page at a time; returns the list's resourceVersion."""
        names: set[str] = set()
        token: str | None = None
        while True:
            response = self._call(
                limit=self._page_size,
                _continue=token,
                _preload_content=False,
                _request_timeout=60,
            )
            try:
                page = json.loads(response.data)
            finally:
                response.release_conn()
            items: list[Manifest] = page.get("items") or []
            names.update(item["metadata"]["name"] for item in items)
            self._sink.listed_page(items)
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                self._sink.listed(frozenset(names))
                return str(meta["resourceVersion"])

    def _watch(self, version: str) -> None:
        """Events from `version` until the server ends the watch; each version seen
        (bookmarks too) is where the next watch starts."""
        response = self._call(
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_seconds,
            _preload_content=False,
            # A connection that went quiet past the server's own timeout is dead.
            _request_timeout=(10, self._watch_seconds + 30),
        )
        self._response = response
        try:
            for line in _lines(response):
                if not line.strip():
                    continue
                event = json.loads(line)
                event_type, obj = event["type"], event["object"]
                if event_type == "ERROR":
                    if obj.get("code") == GONE:
                        raise Expired(obj.get("message", ""))
                    raise RuntimeError(f"watch error: {obj.get('message', obj)}")
                self._version = str(obj["metadata"]["resourceVersion"])
                if event_type != "BOOKMARK":
                    self._sink.event(event_type, obj)
                if self._stop.is_set():
                    break
        finally:
            self._response = None
            response.release_conn()


def _lines(response: Any) -> Iterator[bytes]:
    """A watch's lines, one event each, as the chunks of its response split them."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=False):
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        yield from lines
    if pending:
        yield pending


def node_reflector(api: k8s.ApiClient, sink: Sink) -> Reflector:
    return Reflector(k8s.CoreV1Api(api).list_node, sink, name="nodes")
