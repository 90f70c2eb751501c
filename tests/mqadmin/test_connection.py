"""connect() and mask_url(): URLs to clients, failures to JobStoreError."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.cluster

from store.connection import connect, mask_url
from store.embedded import EmbeddedRedis, redis_server_binary
from store.errors import (
    InvalidRequestError,
    JobStoreError,
    ValueTooLargeError,
    is_unreachable,
    store_error,
)

CLUSTER_SLOTS = 16384


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://:s3cret@host:6379/0", "redis://:***@host:6379/0"),
        ("redis://user:s3cret@host:6379/0", "redis://user:***@host:6379/0"),
        ("rediss://user:p%40ss@host:6380", "rediss://user:***@host:6380"),
        ("redis://host:6379/0", "redis://host:6379/0"),
        ("redis://user@host", "redis://user@host"),
        ("unix:///tmp/redis.sock", "unix:///tmp/redis.sock"),
        ("unix://:s3cret@/tmp/redis.sock?db=2", "unix://:***@/tmp/redis.sock?db=2"),
        ("redis://host/0?password=s3cret&db=1", "redis://host/0?password=***&db=1"),
        ("redis+cluster://:s3cret@a:7000,b:7001", "redis+cluster://:***@a:7000,b:7001"),
    ],
)
def test_mask_url_hides_passwords_only(url: str, masked: str) -> None:
    assert mask_url(url) == masked
    assert "s3cret" not in mask_url(url)


def test_unreachable_url_raises_job_store_error_with_the_cause_chained() -> None:
    with pytest.raises(JobStoreError) as caught:
        connect("redis://:hunter2@127.0.0.1:1/0")

    error = caught.value
    assert isinstance(error.__cause__, redis.ConnectionError)
    assert error.cause is error.__cause__
    assert "redis://:***@127.0.0.1:1/0" in str(error)
    assert "hunter2" not in str(error)


def test_unreachable_cluster_raises_job_store_error() -> None:
    with pytest.raises(JobStoreError) as caught:
        connect("redis+cluster://:hunter2@127.0.0.1:1")

    assert caught.value.__cause__ is not None
    assert "hunter2" not in str(caught.value)
    assert is_unreachable(caught.value)


def test_is_unreachable_tells_a_missing_redis_from_one_that_answered() -> None:
    with pytest.raises(JobStoreError) as refused:
        connect("redis://127.0.0.1:1/0")
    assert is_unreachable(refused.value)
    assert is_unreachable(store_error("get_job", redis.TimeoutError("Timeout reading")))
    # A server that answered, and the store's own refusals, are not "down".
    assert not is_unreachable(store_error("get_job", redis.ResponseError("WRONGTYPE")))
    assert not is_unreachable(
        store_error("enqueue", redis.exceptions.NoPermissionError("NOPERM no permissions"))
    )
    assert not is_unreachable(ValueTooLargeError("payload", 2 << 20, 1 << 20))
    assert not is_unreachable(JobStoreError("job id space exhausted"))


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com",
        "memcached://127.0.0.1:11211",
        "redis+cluster://:pw@",
        "redis://:pw@host:notaport/0",
        "redis+cluster://host:notaport",
    ],
)
def test_unsupported_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        connect(url)
    assert ":pw@" not in str(caught.value)


def test_cluster_flag_needs_a_tcp_url() -> None:
    with pytest.raises(InvalidRequestError):
        connect("unix:///tmp/redis.sock", cluster=True)


def test_unix_socket_url_gives_a_decoding_client(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "redis", appendonly=False)
    url = server.ensure_running()
    try:
        client = connect(url)
        try:
            assert isinstance(client, redis.Redis)
            key = f"t-{uuid.uuid4().hex}"
            client.set(key, b"caf\xc3\xa9")
            assert client.get(key) == "café"
        finally:
            client.close()
    finally:
        server.stop()


def test_no_url_and_no_environment_starts_the_embedded_redis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "default-data"
    monkeypatch.delenv("MQ_REDIS_URL", raising=False)
    monkeypatch.setenv("MQ_DATA_DIR", str(data_dir))
    server = EmbeddedRedis(data_dir)
    try:
        client = connect()
        try:
            assert client.ping() is True
            assert server.is_running()
            path = client.connection_pool.connection_kwargs["path"]
            assert path == str(server.socket_path)
        finally:
            client.close()
    finally:
        server.stop()


def test_no_url_reads_mq_redis_url(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MQ_REDIS_URL", redis_url)
    # Were the environment ignored, the embedded Redis would start here.
    monkeypatch.setenv("MQ_DATA_DIR", str(tmp_path / "unused"))

    client = connect()
    try:
        assert client.ping() is True
    finally:
        client.close()
    assert not (tmp_path / "unused").exists()


def test_tcp_url_from_mq_test_redis_url() -> None:
    url = os.environ.get("MQ_TEST_REDIS_URL")
    if not url:
        pytest.skip("MQ_TEST_REDIS_URL is not set")
    client = connect(url)
    key = f"mqadmin-test-{uuid.uuid4().hex}"
    try:
        assert isinstance(client, redis.Redis)
        client.set(key, "1", px=60_000)
        assert client.get(key) == "1"
    finally:
        client.delete(key)
        client.close()


# -- a real three-node Redis Cluster (private servers on free ports) --------------------


def _free_port() -> int:
    # The cluster bus listens on port + 10000, so both must be free.
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port + 10000 > 65535:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return int(port)
    raise RuntimeError("no free port pair for a cluster node")


@pytest.fixture(scope="module")
def cluster_ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[int]]:
    binary = redis_server_binary()
    ports: list[int] = []
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for index in range(3):
            port = _free_port()
            node_dir = tmp_path_factory.mktemp(f"cluster-node-{index}")
            processes.append(
                subprocess.Popen(
                    [
                        binary,
                        "--port",
                        str(port),
                        "--bind",
                        "127.0.0.1",
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        str(node_dir / "nodes.conf"),
                        "--dir",
                        str(node_dir),
                        "--appendonly",
                        "no",
                        "--save",
                        "",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            ports.append(port)
        nodes = [redis.Redis(port=port, decode_responses=True) for port in ports]
        deadline = time.monotonic() + 10
        for node in nodes:
            while True:
                try:
                    node.ping()
                    break
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        share = CLUSTER_SLOTS // len(nodes)
        for index, node in enumerate(nodes):
            last = CLUSTER_SLOTS if index == len(nodes) - 1 else (index + 1) * share
            node.execute_command("CLUSTER ADDSLOTS", *range(index * share, last))
        for node in nodes[1:]:
            node.execute_command("CLUSTER MEET", "127.0.0.1", ports[0])
        while not all(node.cluster("INFO")["cluster_state"] == "ok" for node in nodes):
            if time.monotonic() > deadline + 20:
                raise RuntimeError("the test cluster did not converge")
            time.sleep(0.1)
        for node in nodes:
            node.close()
        yield ports
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)


def test_cluster_url_gives_a_cluster_client(cluster_ports: list[int]) -> None:
    hosts = ",".join(f"127.0.0.1:{port}" for port in cluster_ports[:2])
    client = connect(f"redis+cluster://{hosts}")
    try:
        assert isinstance(client, redis.cluster.RedisCluster)
        # Keys in many slots, so more than one node serves them.
        keys = [f"t-{uuid.uuid4().hex}-{n}" for n in range(20)]
        for key in keys:
            client.set(key, "é")
        assert {client.get(key) for key in keys} == {"é"}
        owners = {client.get_node_from_key(key).port for key in keys}
        assert len(owners) > 1
        client.delete(*keys)
    finally:
        client.close()


def test_cluster_flag_turns_a_redis_url_into_a_cluster_client(cluster_ports: list[int]) -> None:
    client = connect(f"redis://127.0.0.1:{cluster_ports[0]}", cluster=True)
    try:
        assert isinstance(client, redis.cluster.RedisCluster)
        assert len(client.get_nodes()) == 3
    finally:
        client.close()
