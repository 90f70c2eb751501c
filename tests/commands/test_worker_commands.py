"""runworker / runsweepers / mqstats as real processes against a test prefix."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from store import EnqueueRequest, RedisJobStore

ROOT = Path(__file__).resolve().parents[2]


def manage(args: list[str], env: dict[str, str], **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


@pytest.fixture
def env(redis_url: str, prefix: str) -> dict[str, str]:
    return {
        **os.environ,
        "MQ_REDIS_URL": redis_url,
        "MQ_STORES": json.dumps({"default": {"prefix": prefix}}),
        "MQ_JOB_MODULES": "tests.commands.sample_jobs",
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "mqadmin.settings",
    }


def wait_for(predicate: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def test_runworker_burst_drains_the_queue_and_exits(
    redis_client: Any, prefix: str, env: dict[str, str]
) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)
    try:
        ids = [
            r.id
            for r in store.enqueue_many(
                [EnqueueRequest(name="Echo", payload={"n": i}) for i in range(25)]
            )
        ]
        proc = manage(["runworker", "--burst", "--queues", "default"], env)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        assert "queues={'default': ['Echo']}" in out
        assert store.counts()["completed"] == 25
        assert store.get_job(ids[3]).exit == {"echo": {"n": 3}, "attempt": 1}
    finally:
        store.close()


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--prefetch", "0", "must be at least 1, not 0"),
        ("--prefetch", "lots", "expected a whole number, not 'lots'"),
        ("--prefetch-wait-ms", "-5", "must be at least 1, not -5"),
    ],
)
def test_runworker_refuses_a_bad_prefetch(
    env: dict[str, str], flag: str, value: str, message: str
) -> None:
    proc = manage(["runworker", "--burst", flag, value], env)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert message in out and "Traceback" not in out


@pytest.mark.parametrize("prefetch", ["auto", "4"])
def test_runworker_processes_drain_with_a_prefetch(
    redis_client: Any, prefix: str, env: dict[str, str], prefetch: str
) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)
    try:
        store.enqueue_many([EnqueueRequest(name="Echo", payload={"n": i}) for i in range(200)])
        proc = manage(
            ["runworker", "--burst", "--queues", "default", "--processes", "2",
             "--prefetch", prefetch, "--prefetch-wait-ms", "50"],
            env,
        )  # fmt: skip
        out, _ = proc.communicate(timeout=90)
        assert proc.returncode == 0, out
        assert "supervising 2 worker processes" in out
        assert store.counts()["completed"] == 200
    finally:
        store.close()


def test_runworker_sigterm_releases_the_running_job_without_an_attempt(
    redis_client: Any, prefix: str, env: dict[str, str], tmp_path: Path
) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)
    marker = tmp_path / "started"
    try:
        job_id = store.enqueue(
            EnqueueRequest(name="Blocker", queue="slow", payload={"marker": str(marker)})
        ).id
        proc = manage(["runworker", "--queues", "slow", "--poll-interval-ms", "200"], env)
        wait_for(marker.exists)
        assert store.get_job(job_id).state == "active"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
        assert proc.returncode == 0, out
        job = store.get_job(job_id)
        assert job.state == "waiting"
        assert job.attempts_made == 0
        assert store.get_attempts(job_id) == []
        assert "stopped" in out
    finally:
        store.close()


def test_mqstats_json_reports_counts_per_queue(
    redis_client: Any, prefix: str, env: dict[str, str]
) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)
    try:
        store.enqueue_many([EnqueueRequest(name="Echo", queue="a") for _ in range(3)])
        store.enqueue(EnqueueRequest(name="Echo", queue="b", delay_ms=60_000))
        store.pause("b")
        proc = manage(["mqstats", "--json"], env)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out
        stats = json.loads(out.strip().splitlines()[-1])["default"]
        assert stats["prefix"] == prefix
        assert stats["totals"]["waiting"] == 3 and stats["totals"]["delayed"] == 1
        assert stats["queues"]["a"]["waiting"] == 3
        assert stats["queues"]["b"]["delayed"] == 1
        assert stats["paused"] == ["b"]
    finally:
        store.close()


def test_runsweepers_recovers_a_stalled_job_and_stops_on_sigterm(
    redis_client: Any, prefix: str, env: dict[str, str]
) -> None:
    store = RedisJobStore(redis_client, prefix=prefix)
    try:
        job_id = store.enqueue(EnqueueRequest(name="Echo")).id
        store.claim(names=["Echo"], token="dead-worker:1", lock_duration_ms=100)
        proc = manage(["runsweepers", "--stalled-interval-ms", "200"], env)
        wait_for(lambda: store.get_job(job_id).state == "waiting")
        assert store.get_job(job_id).stalled_count == 1
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
        assert proc.returncode == 0, out
        assert "sweeping store default" in out
    finally:
        store.close()
