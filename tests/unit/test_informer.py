"""The Node reflector against a real HTTP server: stop ends a watch at once,
even one whose server sends nothing (the operator's Lease is released after it)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client as k8s

from slurmkube.kube.informer import node_reflector

NODE = {"metadata": {"name": "gpu-0001", "resourceVersion": "2"}}


class QuietWatch(BaseHTTPRequestHandler):
    """Lists no Node; a watch gets one event, then nothing until the test ends."""

    protocol_version = "HTTP/1.1"
    hold: threading.Event

    def do_GET(self) -> None:
        if "watch=true" not in self.path:
            body = json.dumps({"metadata": {"resourceVersion": "1"}, "items": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        line = json.dumps({"type": "ADDED", "object": NODE}).encode() + b"\n"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
        self.wfile.flush()
        self.hold.wait(30)

    def log_message(self, *_: Any) -> None:
        pass


class Sink:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.watching = threading.Event()

    def listed_page(self, items: list[dict[str, Any]]) -> None:
        pass

    def listed(self, names: frozenset[str]) -> None:
        pass

    def event(self, event_type: str, obj: dict[str, Any]) -> None:
        self.events.append(event_type)
        self.watching.set()


@pytest.fixture
def api() -> Iterator[k8s.ApiClient]:
    hold = threading.Event()
    handler = type("Handler", (QuietWatch,), {"hold": hold})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = k8s.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    try:
        yield k8s.ApiClient(config)
    finally:
        hold.set()
        server.shutdown()
        server.server_close()


def test_stop_ends_a_watch_the_server_keeps_quiet(api: k8s.ApiClient) -> None:
    sink = Sink()
    reflector = node_reflector(api, sink)
    reflector.start()
    assert sink.watching.wait(10), "the watch never delivered its event"
    stopping = threading.Thread(target=reflector.stop, daemon=True)
    stopping.start()
    # A close would wait for the blocked read, here until the server's hold ends.
    stopping.join(5)
    assert not stopping.is_alive(), "stop waited for the watch's next event"
    reflector._thread.join(5)
    assert not reflector._thread.is_alive()
    assert sink.events == ["ADDED"]
