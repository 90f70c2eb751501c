"""Queue limits with real worker processes (issue 26): a queue's concurrency and rate limits
hold for all workers of all processes together, and a limited queue drains on wake-ups.

Two child processes run ``Worker.run()`` with 4 takers each on the wall clock.  What the
limits allowed is read afterwards: how many ran at once from the store's event stream (each
run spans its ``active`` event to its ``completed`` one, in the exact order the scripts ran),
the rate from the attempts ledger (each claim's time as the claim script saw it).
"""

from __future__ import annotations

import bisect
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from store import EnqueueRequest, Rate, system_clock
from tests.runtime.harness import eventually

REPO = Path(__file__).resolve().parents[2]
QUEUE = "limited"
LIMIT = 3
JOBS = 40

CHILD = r"""
import asyncio, sys
from store import Job, RedisJobStore, StoreRegistry, Worker, connect

url, prefix = sys.argv[1:3]
store = RedisJobStore(connect(url), prefix=prefix)
registry = StoreRegistry()
registry.register(store)

async def handler(payload):
    await asyncio.sleep(30 if payload == "hang" else 0.02)

job = Job("Limited", queue="limited", handler=handler, registry=registry)
# Polling is off in practice (60 s): a waiting taker claims again when an ack wakes it.
# Stall recovery is off in practice too (60 s): only a lock's expiry frees a crashed slot.
Worker(
    store, [job], concurrency=4, poll_interval_ms=60_000, registry=registry,
    lock_duration_ms=1_500, stalled_interval_ms=60_000,
).run()
"""


def spawn(children: list[subprocess.Popen[bytes]], redis_url: str, prefix: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    children.append(
        subprocess.Popen(
            [sys.executable, "-c", CHILD, redis_url, prefix],
            env=env,
            cwd=str(REPO),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
    )


def most_at_once(intervals: list[tuple[int, int]]) -> int:
    """The largest number of [claim, ack) intervals covering one point of the stream."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    best = now = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


def drain_in_two_processes(
    store: Any,
    redis_url: str,
    prefix: str,
    children: list[subprocess.Popen[bytes]],
    jobs: int,
    group_of: Callable[[int], str | None] = lambda n: None,
) -> list[tuple[int, int]]:
    """Enqueue ``jobs`` jobs, drain them with two worker processes; each run's (claim, ack)."""
    ids = [
        store.enqueue(EnqueueRequest(name="Limited", queue=QUEUE, payload=n, group=group_of(n))).id
        for n in range(jobs)
    ]
    for _ in range(2):
        spawn(children, redis_url, prefix)

    def drained() -> bool:
        for child in children:
            if child.poll() is not None:
                assert child.stderr is not None
                pytest.fail(f"a worker exited: {child.stderr.read().decode()[-2000:]}")
        return store.counts(QUEUE)["completed"] == jobs

    eventually(drained, timeout=40, message="the limited queue did not drain")
    intervals = []
    for job_id in ids:
        (attempt,) = store.get_attempts(job_id)
        assert attempt.outcome == "completed" and attempt.started_at is not None
        intervals.append((attempt.started_at, attempt.finished_at))
    return intervals


def enqueued(store: Any) -> list[str]:
    """The job ids in the order they were enqueued."""
    return [e.job_id for e in store.events("0", count=1000) if e.type == "enqueued"]


def stream_runs(store: Any, ids: list[str]) -> list[tuple[int, int]]:
    """Each job's run as (position of its ``active`` event, of its ``completed`` one) in the
    event stream: the order the scripts ran in, whatever the processes' clocks said."""
    events = store.events("0", count=1000)
    at = {(e.job_id, e.type): n for n, e in enumerate(events)}
    return [(at[job_id, "active"], at[job_id, "completed"]) for job_id in ids]


def test_two_processes_never_exceed_the_queue_concurrency(
    make_store: Any, redis_url: str, prefix: str, children: list[subprocess.Popen[bytes]]
) -> None:
    store = make_store(clock=system_clock)
    store.set_queue_limits(QUEUE, concurrency=LIMIT)
    drain_in_two_processes(store, redis_url, prefix, children, JOBS)
    intervals = stream_runs(store, enqueued(store))
    assert most_at_once(intervals) == LIMIT
    assert store.queue_limits(QUEUE).active == 0


def test_two_processes_never_exceed_the_queue_rate(
    make_store: Any, redis_url: str, prefix: str, children: list[subprocess.Popen[bytes]]
) -> None:
    """No window of the period, wherever it starts, holds more claims than the rate allows."""
    limit, per_ms = 10, 500
    store = make_store(clock=system_clock)
    store.set_queue_limits(QUEUE, rate=Rate(limit, per_ms=per_ms))
    claims = sorted(
        start for start, _ in drain_in_two_processes(store, redis_url, prefix, children, 25)
    )
    for i, start in enumerate(claims):
        assert bisect.bisect_left(claims, start + per_ms) - i <= limit, claims


def test_two_processes_keep_the_group_and_queue_concurrency(
    make_store: Any, redis_url: str, prefix: str, children: list[subprocess.Popen[bytes]]
) -> None:
    """Four groups, at most one running job per group and three in the queue."""
    store = make_store(clock=system_clock)
    store.set_queue_limits(QUEUE, concurrency=LIMIT, group_concurrency=1)
    drain_in_two_processes(store, redis_url, prefix, children, JOBS, group_of=lambda n: f"g{n % 4}")
    intervals = stream_runs(store, enqueued(store))
    assert most_at_once(intervals) == LIMIT
    for g in range(4):
        assert most_at_once(intervals[g::4]) == 1, f"group g{g}"


def test_a_sigkilled_workers_slot_frees_when_its_lock_expires(
    make_store: Any, redis_url: str, prefix: str, children: list[subprocess.Popen[bytes]]
) -> None:
    """A worker killed mid-run holds the queue's only slot until its lock expires, then the
    next job runs elsewhere: no stall recovery needed (it would come 60 s later)."""
    store = make_store(clock=system_clock)
    store.set_queue_limits(QUEUE, concurrency=1)
    hung = store.enqueue(EnqueueRequest(name="Limited", queue=QUEUE, payload="hang")).id
    spawn(children, redis_url, prefix)
    eventually(lambda: store.get_job(hung).state == "active", timeout=20, message="never ran")
    lock_expires = int(store.client.hget(store.keys.job(hung), "lock_expires_at"))
    children[0].send_signal(signal.SIGKILL)
    children[0].wait(10)
    after = store.enqueue(EnqueueRequest(name="Limited", queue=QUEUE, payload=1)).id
    spawn(children, redis_url, prefix)
    eventually(
        lambda: store.get_job(after).state == "completed", timeout=20, message="slot stayed taken"
    )
    (attempt,) = store.get_attempts(after)
    assert attempt.started_at is not None and attempt.started_at >= lock_expires
    # The killed run was never recovered: its expired lock alone freed the slot.
    assert store.get_job(hung).state == "active"


def test_two_processes_let_groups_take_turns(
    make_store: Any, redis_url: str, prefix: str, children: list[subprocess.Popen[bytes]]
) -> None:
    """A small group enqueued behind a big one is served in turn, not after it."""
    store = make_store(clock=system_clock)
    store.set_queue_limits(QUEUE, concurrency=1)
    intervals = drain_in_two_processes(
        store, redis_url, prefix, children, 24, group_of=lambda n: "big" if n < 20 else "small"
    )
    big, small = sorted(intervals[:20]), sorted(intervals[20:])
    # One job at a time: the claims alternate while both groups wait, so the small group's
    # three jobs start before the big group's fifth (FIFO would put them after all twenty).
    assert max(start for start, _ in small) < big[4][0], (big, small)
