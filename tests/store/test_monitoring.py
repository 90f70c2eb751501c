"""Monitoring read models: the scrape snapshot and the per-job-name run aggregates.

The aggregates are written by the ack script (one hash per name and minute, and per
name and clock hour); the numbers read back must equal the runs the test made.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from store import Claimed, Complete, EnqueueRequest, Fail, FakeClock, RedisJobStore, Retry
from store.errors import InvalidRequestError
from store.monitoring import (
    HOUR_MS,
    MINUTE_MS,
    bucket_upper_ms,
    job_name_metrics,
    metrics_snapshot,
)
from store.records import ScheduleRecord

HOUR0 = 100 * HOUR_MS  # a clock-hour boundary well after 0


def run_one(
    store: RedisJobStore, clock: FakeClock, name: str, ms: int, outcome: Any, queue: str = "q"
) -> str:
    """Enqueue, claim, let ``ms`` pass on the fake clock, ack with ``outcome``."""
    job_id = store.enqueue(EnqueueRequest(name=name, queue=queue, attempts_max=3)).id
    claimed = store.claim(queue=queue, names=[name], token="w:1", lock_duration_ms=600_000)
    assert isinstance(claimed, Claimed) and claimed.job.id == job_id
    clock.advance(ms)
    store.ack(job_id, "w:1", outcome)
    return job_id


def test_runs_failures_and_run_times_per_name_and_period(
    store: RedisJobStore, clock: FakeClock
) -> None:
    clock.set(HOUR0 + 5 * MINUTE_MS)
    durations = [10, 20, 30, 40, 50, 60, 70, 80, 90, 1000]
    for ms in durations:
        run_one(store, clock, "Resize", ms, Complete(None))
    run_one(store, clock, "Resize", 5, Fail({"message": "boom"}))
    run_one(store, clock, "Resize", 7, Retry(0, {"message": "again"}))
    run_one(store, clock, "Mail", 3, Complete(None))

    by_name = {m.name: m for m in job_name_metrics(store, "1h")}
    resize = by_name["Resize"]
    assert resize.runs == 12
    assert resize.failures == 2
    assert resize.failure_rate == pytest.approx(2 / 12)
    assert resize.max_ms == 1000
    assert sum(resize.buckets.values()) == 12
    # Sorted: 5 7 10 20 30 40 | 50 ... ; p50 is the 6th run (40 ms), p95 the 12th (1000 ms).
    assert 40 <= resize.p50_ms <= 40 * 1.19 + 1
    assert resize.p95_ms == 1000
    assert by_name["Mail"].runs == 1 and by_name["Mail"].failures == 0
    assert by_name["Mail"].p50_ms == by_name["Mail"].max_ms == 3
    # The minute series has 60 slots ending at the current minute; all runs sit in one.
    assert len(resize.series) == 60
    assert resize.series[-1].start == (clock() // MINUTE_MS) * MINUTE_MS
    assert sum(s.runs for s in resize.series) == 12
    assert sum(s.failures for s in resize.series) == 2

    # The 24 h and 72 h periods read hour aggregates: the same totals.
    for period, slots in (("24h", 24), ("72h", 72)):
        m = {x.name: x for x in job_name_metrics(store, period)}["Resize"]
        assert (m.runs, m.failures, m.max_ms, len(m.series)) == (12, 2, 1000, slots)


def test_a_batch_of_acks_adds_each_run_once(
    store: RedisJobStore, clock: FakeClock, redis_client: Any
) -> None:
    """One ack_and_claim_many call sums its runs per aggregate hash (lib/tally.lua) and writes
    them when it ends: the hash holds every run's bucket, the failures, the longest run, its
    expiry -- and the counters and finished totals move by exactly the batch."""
    clock.set(HOUR0 + 7 * MINUTE_MS)
    ids = [
        store.enqueue(EnqueueRequest(name="Batch", queue="q", attempts_max=1)).id for _ in range(6)
    ]
    # Run times on the fake clock: claimed at different times, acked together.
    started = clock()
    held = []
    for k, job_id in enumerate(ids):
        claimed = store.claim(queue="q", names=["Batch"], token=f"t{k}", lock_duration_ms=600_000)
        assert isinstance(claimed, Claimed) and claimed.job.id == job_id
        held.append((job_id, f"t{k}"))
        clock.advance(100)
    clock.set(started + 1000)  # runs of 1000, 900, ..., 500 ms
    outcomes = [Complete(None)] * 4 + [Fail({"message": "boom"})] * 2
    batch = store.ack_and_claim_many(
        [(job_id, token, outcome) for (job_id, token), outcome in zip(held, outcomes, strict=True)],
        queue="q",
        names=["Batch"],
        tokens=["next"],
    )
    assert batch.ack_errors == [None] * 6
    minute_key = store.keys.job_metrics_minute(clock() // MINUTE_MS, "Batch")
    stored = redis_client.hgetall(minute_key)
    buckets = {f: int(v) for f, v in stored.items() if f.startswith("b")}
    assert sum(buckets.values()) == 6
    assert (stored["f"], stored["x"]) == ("2", "1000")
    assert 0 < redis_client.pttl(minute_key) <= 3 * HOUR_MS
    m = job_name_metrics(store, "1h", names=["Batch"])[0]
    assert (m.runs, m.failures, m.max_ms) == (6, 2, 1000)
    assert store.counts(queue="q")["completed"] == 4
    assert store.counts(queue="q")["failed"] == 2
    assert store.counts(queue="q")["active"] == 0
    # A second batch with a shorter run keeps the longest, adds to the buckets.
    job_id = store.enqueue(EnqueueRequest(name="Batch", queue="q")).id
    claimed = store.claim(queue="q", names=["Batch"], token="t9", lock_duration_ms=600_000)
    assert isinstance(claimed, Claimed) and claimed.job.id == job_id
    clock.advance(3)
    store.ack_and_claim_many(
        [(job_id, "t9", Complete(None))], queue="q", names=["Batch"], tokens=["next"]
    )
    m = job_name_metrics(store, "1h", names=["Batch"])[0]
    assert (m.runs, m.failures, m.max_ms) == (7, 2, 1000)


def test_periods_drop_runs_outside_their_window(store: RedisJobStore, clock: FakeClock) -> None:
    clock.set(HOUR0)
    run_one(store, clock, "Old", 100, Complete(None))
    clock.advance(2 * HOUR_MS)  # two hours later: outside 1 h, inside 24 h
    run_one(store, clock, "Old", 200, Fail(None))
    one_hour = job_name_metrics(store, "1h", names=["Old"])[0]
    day = job_name_metrics(store, "24h", names=["Old"])[0]
    assert (one_hour.runs, one_hour.failures, one_hour.max_ms) == (1, 1, 200)
    assert (day.runs, day.failures, day.max_ms) == (2, 1, 200)
    clock.advance(30 * HOUR_MS)  # 32 h after the first run: only 72 h still sees both
    assert job_name_metrics(store, "24h", names=["Old"])[0].runs == 0
    assert job_name_metrics(store, "72h", names=["Old"])[0].runs == 2


def test_aggregate_keys_expire_on_their_own(
    store: RedisJobStore, clock: FakeClock, redis_client: Any
) -> None:
    clock.set(HOUR0)
    run_one(store, clock, "Ttl", 1, Complete(None))
    minute_key = store.keys.job_metrics_minute(clock() // MINUTE_MS, "Ttl")
    hour_key = store.keys.job_metrics_hour(clock() // HOUR_MS, "Ttl")
    assert 0 < redis_client.pttl(minute_key) <= 3 * HOUR_MS
    assert 72 * HOUR_MS < redis_client.pttl(hour_key) <= 75 * HOUR_MS
    assert set(redis_client.hgetall(minute_key)) == {"b0", "x"}  # 1 ms: bucket 0, no failure


def test_buckets_are_quarter_doublings() -> None:
    assert bucket_upper_ms(0) == 1
    assert bucket_upper_ms(4) == 2
    assert bucket_upper_ms(40) == 1024
    assert bucket_upper_ms(41) == 1217


def test_unknown_period_is_refused(store: RedisJobStore) -> None:
    with pytest.raises(InvalidRequestError, match="period"):
        job_name_metrics(store, "7d")


def test_snapshot_counts_finished_totals_workers_outbox_schedules_indexes(
    store: RedisJobStore, clock: FakeClock, redis_client: Any
) -> None:
    clock.set(HOUR0)
    store.enqueue(EnqueueRequest(name="A", queue="alpha"))
    clock.advance(5_000)
    store.enqueue(EnqueueRequest(name="A", queue="alpha"))
    store.enqueue(EnqueueRequest(name="B", queue="beta", delay_ms=60_000))
    run_one(store, clock, "C", 1, Complete(None), queue="gamma")
    run_one(store, clock, "C", 1, Fail(None), queue="gamma")
    # A finished job removed later still counts in the lifetime total.
    removed = run_one(store, clock, "C", 1, Complete(None), queue="gamma")
    assert store.remove(removed)
    store.register_worker("w-live", queues={"alpha": ["A"]}, routes=[], started_at=clock())
    redis_client.hset(
        store.keys.workers, "w-gone", json.dumps({"last_seen": clock() - 120_000, "host": "x"})
    )
    store.upsert_schedule(
        ScheduleRecord(
            key="late", job_name="A", queue="alpha", every_ms=60_000, next_run_at=clock() - 60_000
        )
    )
    store.upsert_schedule(
        ScheduleRecord(
            key="soon", job_name="A", queue="alpha", every_ms=60_000, next_run_at=clock() + 60_000
        )
    )
    clock.advance(10_000)

    snap = metrics_snapshot(store)

    assert snap.counts["alpha"]["waiting"] == 2
    assert snap.counts["beta"]["delayed"] == 1
    assert snap.counts["gamma"]["completed"] == 1  # the removed one is gone from counts
    assert snap.finished["gamma"] == {"completed": 2, "failed": 1, "cancelled": 0}
    assert "alpha" not in snap.finished
    assert snap.oldest_waiting_ms["alpha"] == 10_000 + 3 + 5_000  # the first alpha job
    assert snap.oldest_waiting_ms["beta"] == 0
    assert snap.live_workers == 1
    assert snap.outbox_entries == redis_client.zcard(store.keys.outbox)
    assert snap.schedules_overdue == 1
    assert snap.index_ready == {"name": True, "queue": True}
