"""Which listening sockets block a control-plane port: the real nodes' API server
relay listens on the bridge with the API server's port, and must not count."""

from __future__ import annotations

import socket

import pytest

from slurmkube_e2e.processes import _bound_to, listening_ports


@pytest.mark.parametrize(
    ("address", "host", "bound"),
    [
        ("0100007F", "127.0.0.1", True),  # 127.0.0.1, little-endian words
        ("00000000", "127.0.0.1", True),  # 0.0.0.0 takes every address
        ("0109FA0A", "127.0.0.1", False),  # 10.250.9.1: the relay
        ("00000000000000000000000000000000", "127.0.0.1", True),  # [::]
        ("0000000000000000FFFF00000100007F", "127.0.0.1", True),  # ::ffff:127.0.0.1
    ],
)
def test_a_socket_counts_only_on_the_address_asked(address: str, host: str, bound: bool) -> None:
    assert _bound_to(address, host) is bound


def test_a_listener_on_loopback_is_found_and_one_elsewhere_is_not() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.2", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert listening_ports([port]) == [port]
        assert listening_ports([port], "127.0.0.2") == [port]
        assert listening_ports([port], "127.0.0.1") == []
