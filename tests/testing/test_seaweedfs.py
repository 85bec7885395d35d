"""The SeaweedFS fixture server: a port taken between choosing it and weed binding it (a parallel test worker's
server) makes it start again on other ports instead of waiting out its timeout."""

from __future__ import annotations

import socket

import pytest

from energon_arrow.testing import seaweedfs

pytestmark = pytest.mark.s3


def test_a_taken_port_is_given_up_and_others_tried(monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    real, calls = seaweedfs.free_ports, []

    def first_with_a_taken_s3_port(n: int) -> list[int]:
        ports = real(n)
        calls.append(ports)
        if len(calls) == 1:
            ports[3] = taken.getsockname()[1]  # the S3 port
        return ports

    monkeypatch.setattr(seaweedfs, "free_ports", first_with_a_taken_s3_port)
    try:
        server = seaweedfs.start_seaweedfs(timeout=30)
        try:
            assert len(calls) == 2 and server.s3_port != taken.getsockname()[1]
            server.client().create_bucket(Bucket="after-a-taken-port")
        finally:
            server.stop()
    finally:
        taken.close()
