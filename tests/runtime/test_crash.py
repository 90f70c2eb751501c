"""Real processes: a worker killed with SIGKILL mid-job, and a worker stopped with SIGTERM.

The child is a separate Python process running ``Worker.run()`` on the test's prefix with the
wall clock (real timers, real lock expiry); the test process plays the surviving worker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from store import Job, StoreRegistry, Worker, current_job, system_clock
from tests.runtime.harness import eventually, outcomes, running, state_of

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import asyncio, sys, time
from store import Job, RedisJobStore, StoreRegistry, Worker, connect, current_job

url, prefix, marker, mode = sys.argv[1:5]
store = RedisJobStore(connect(url), prefix=prefix)
registry = StoreRegistry()
registry.register(store)

def touch():
    with open(marker, "w") as f:
        f.write(current_job().job_id)

if mode == "kill":
    def handler(payload):
        touch()
        time.sleep(600)  # "a long time": the process is killed before it ends
else:
    async def handler(payload):
        touch()
        await asyncio.Event().wait()  # blocks until the worker interrupts it

job = Job("Crashy", handler=handler, registry=registry)
Worker(store, [job], lock_duration_ms=1000, stalled_interval_ms=500, poll_interval_ms=200, registry=registry).run()
"""


def spawn(redis_url: str, prefix: str, marker: Path, mode: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, redis_url, prefix, str(marker), mode],
        env=env,
        cwd=str(REPO),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def wait_for_marker(child: subprocess.Popen[bytes], marker: Path, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if marker.exists() and marker.read_text():
            return marker.read_text()
        if child.poll() is not None:
            pytest.fail(
                f"child exited early ({child.returncode}): {child.stderr.read().decode()[-2000:]}"
            )
        time.sleep(0.02)
    pytest.fail("the child never started the job")


@pytest.fixture
def live(make_store: Any) -> tuple[Any, StoreRegistry]:
    store = make_store(clock=system_clock)
    registry = StoreRegistry()
    registry.register(store)
    return store, registry


def test_crash_sigkilled_worker_job_is_recovered_as_stalled(
    live, redis_url, prefix, tmp_path, children
):
    store, registry = live
    ran: list[str] = []

    def handler(payload: Any) -> str:
        ran.append(current_job().job_id)
        return "recovered"

    job = Job("Crashy", handler=handler, registry=registry)
    ids = [job.enqueue({"n": n}) for n in range(3)]
    marker = tmp_path / "started"
    child = spawn(redis_url, prefix, marker, "kill")
    children.append(child)
    victim = wait_for_marker(child, marker)
    assert victim == ids[0]
    assert state_of(store, victim) == "active"
    child.send_signal(signal.SIGKILL)
    assert child.wait(10) == -signal.SIGKILL

    with running(
        Worker(
            store,
            [job],
            stalled_interval_ms=300,
            lock_duration_ms=1000,
            poll_interval_ms=200,
            registry=registry,
        )
    ):
        eventually(lambda: store.counts()["completed"] == 3, timeout=10)
    record = store.get_job(victim)
    assert (record.state, record.stalled_count, record.attempts_made) == ("completed", 1, 1)
    assert outcomes(store, victim) == ["stalled", "completed"]
    assert sorted(ran) == sorted(ids)
    counts = store.counts()
    assert counts["completed"] == 3
    assert sum(counts.values()) == 3  # nothing lost, nothing stuck
    for other in ids[1:]:
        assert outcomes(store, other) == ["completed"]


def test_crash_sigterm_releases_the_in_flight_job(live, redis_url, prefix, tmp_path, children):
    store, registry = live
    job = Job("Crashy", registry=registry)
    job_id = job.enqueue({})
    marker = tmp_path / "started"
    child = spawn(redis_url, prefix, marker, "term")
    children.append(child)
    assert wait_for_marker(child, marker) == job_id
    assert state_of(store, job_id) == "active"
    child.send_signal(signal.SIGTERM)
    try:
        code = child.wait(5)
    except subprocess.TimeoutExpired:
        pytest.fail("the worker did not exit within 5 s of SIGTERM")
    assert code == 0, child.stderr.read().decode()[-2000:]
    record = store.get_job(job_id)
    assert (record.state, record.attempts_made) == ("waiting", 0)
    assert outcomes(store, job_id) == []
