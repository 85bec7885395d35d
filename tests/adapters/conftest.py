"""Adapter-only fixtures: a fault-injecting proxy in front of SeaweedFS."""

from __future__ import annotations

import uuid

import pytest

from energon_arrow.testing.faultproxy import FaultProxy


@pytest.fixture(scope="session")
def _session_fault_proxy(s3_server):
    with FaultProxy(s3_server.endpoint_url) as proxy:
        yield proxy


@pytest.fixture
def fault_proxy(_session_fault_proxy):
    """A FaultProxy in front of the shared SeaweedFS, with no faults queued and zero counts."""
    _session_fault_proxy.reset_counts()
    yield _session_fault_proxy
    _session_fault_proxy.reset_counts()


@pytest.fixture
def s3_object(s3_server):
    """(bucket, key, data): one object written straight to SeaweedFS (not through any proxy)."""
    bucket = s3_server.create_bucket("ea-tests")
    key = f"faults/{uuid.uuid4().hex[:12]}/obj.bin"
    data = bytes(range(256)) * 64
    s3_server.client().put_object(Bucket=bucket, Key=key, Body=data)
    return bucket, key, data
