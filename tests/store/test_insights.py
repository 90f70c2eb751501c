"""Operator read models: throughput, names, oldest waiting job, workers, locks, dedupe owners."""

from __future__ import annotations

from typing import Any

import pytest

from store import (
    Claimed,
    Complete,
    EnqueueRequest,
    Fail,
    JobNotFoundError,
    RedisJobStore,
    ScheduleRecord,
)
from store.insights import MINUTE_MS, STATS_RETENTION_MS


def req(**kwargs: Any) -> EnqueueRequest:
    kwargs.setdefault("name", "TestJob")
    return EnqueueRequest(**kwargs)


def finish(store: RedisJobStore, queue: str, outcome: Any) -> str:
    claimed = store.claim(queue=queue, names=["A", "B", "TestJob"], token="t")
    assert isinstance(claimed, Claimed)
    store.ack(claimed.job.id, "t", outcome)
    return claimed.job.id


def test_throughput_counts_terminal_transitions_per_minute(store, clock):
    clock.set(10 * MINUTE_MS)
    store.enqueue_many([req() for _ in range(3)])
    finish(store, "default", Complete(1))
    finish(store, "default", Fail({"error": {}}))
    clock.advance(MINUTE_MS)
    finish(store, "default", Complete(2))
    series = store.throughput(minutes=3)
    assert [t for t, _ in series["completed"]] == [9 * MINUTE_MS, 10 * MINUTE_MS, 11 * MINUTE_MS]
    assert [n for _, n in series["completed"]] == [0, 1, 1]
    assert [n for _, n in series["failed"]] == [0, 1, 0]
    assert [n for _, n in series["cancelled"]] == [0, 0, 0]


def test_stats_older_than_the_retention_window_are_pruned(store, clock, redis_client, prefix):
    clock.set(STATS_RETENTION_MS + 10 * MINUTE_MS)
    store.enqueue(req())
    finish(store, "default", Complete(None))  # a minute inside the window
    old_minute = 5  # a minute far outside the window
    redis_client.hset("{" + prefix + "}:stats:completed", str(old_minute), 7)
    redis_client.set("{" + prefix + "}:stats:pruned", str(old_minute))
    while store.prune_stats():
        pass
    kept = redis_client.hkeys("{" + prefix + "}:stats:completed")
    assert str(old_minute) not in kept
    assert kept == [str(clock() // MINUTE_MS)]


def test_queue_and_job_names_come_from_inserts(store):
    store.enqueue(req(name="A", queue="q1"))
    store.enqueue_many([req(name="B", queue="q2"), req(name="A", queue="q2")])
    assert store.queue_names() == ["q1", "q2"]
    assert store.job_names() == ["A", "B"]
    assert store.job_names("q1") == ["A"]


def test_oldest_waiting_is_the_longest_runnable_job(store, clock):
    assert store.oldest_waiting("default") is None
    first = store.enqueue(req(name="A", priority=0)).id
    clock.advance(1000)
    store.enqueue(req(name="B", priority=9))
    assert store.oldest_waiting("default").id == first


def test_get_jobs_reads_many_records_in_order_with_gaps(store):
    ids = [r.id for r in store.enqueue_many([req(payload={"i": i}) for i in range(1201)])]
    found = store.get_jobs([ids[0], "ghost", *ids[600:1201]])
    assert found[0] == store.get_job(ids[0])
    assert found[1] is None
    assert [r.payload["i"] for r in found[2:]] == list(range(600, 1201))


def test_lock_info_and_dedupe_owner(store):
    job_id = store.enqueue(req(dedupe={"key": "emp-1", "ttl_ms": 60_000})).id
    assert store.lock_info(job_id).token is None
    owner = store.dedupe_owner("TestJob", "emp-1")
    assert owner is not None and owner.job_id == job_id and owner.expires_at == 60_000
    assert store.dedupe_owner("TestJob", "nobody") is None
    store.claim(names=["TestJob"], token="w-1:1", lock_duration_ms=5000)
    info = store.lock_info(job_id)
    assert (info.token, info.expires_at) == ("w-1:1", 5000)


def test_live_workers_age_out(store, clock, redis_client, prefix):
    store.register_worker("w-1", queues={"default": ["A"]}, routes=["default"], started_at=0)
    [worker] = store.live_workers()
    assert (worker.worker_id, worker.routes, worker.queues) == (
        "w-1",
        ["default"],
        {"default": ["A"]},
    )
    clock.advance(61_000)
    assert store.live_workers(max_age_ms=60_000) == []
    assert redis_client.hlen("{" + prefix + "}:workers") == 0


def test_trigger_schedule_enqueues_one_occurrence_without_moving_the_cadence(store, clock):
    store.upsert_schedule(
        ScheduleRecord(
            key="A/x", job_name="A", every_ms=60_000, payload={"p": 1}, next_run_at=60_000
        )
    )
    clock.set(1234)
    job_id = store.trigger_schedule("A/x")
    assert job_id == "sched/A/x/manual/1234"
    assert store.get_job(job_id).payload == {"p": 1}
    assert store.list_schedules()[0].next_run_at == 60_000
    with pytest.raises(JobNotFoundError):
        store.trigger_schedule("nope")


def test_oldest_runnable_sees_past_higher_priorities(store, clock):
    from store import EnqueueRequest

    starved = store.enqueue(EnqueueRequest(name="Low", queue="q", payload=0, priority=0)).id
    clock.advance(12 * 60_000)
    for i in range(20):
        store.enqueue(EnqueueRequest(name="Low", queue="q", payload=i, priority=5 + i % 3))
        store.enqueue(EnqueueRequest(name="High", queue="q", payload=i, priority=9))
        clock.advance(100)
    # The head of each waiting set is a high-priority job enqueued seconds ago...
    head = store.list_by_state(["waiting"], queue="q", order="asc", limit=1).items[0]
    assert head.priority == 9
    # ...but the job runnable longest is the starved low-priority one.
    oldest = store.oldest_runnable("q")
    assert oldest.record is not None and oldest.record.id == starved
    assert oldest.complete and oldest.examined <= 2 * 16 * 4
    assert store.oldest_waiting("q").id == starved


def test_oldest_runnable_is_bounded_by_priority_levels(store, clock, monkeypatch):
    import store.insights as insights
    from store import EnqueueRequest

    monkeypatch.setattr(insights, "OLDEST_LEVELS", 3)
    oldest = store.enqueue(EnqueueRequest(name="A", queue="q", priority=0)).id
    for priority in range(1, 6):
        clock.advance(1000)
        store.enqueue(EnqueueRequest(name="A", queue="q", priority=priority))
    found = store.oldest_runnable("q")
    # Only the three highest levels were read: the answer says it is not complete.
    assert not found.complete and found.record is not None and found.record.id != oldest
    assert found.examined == 3
    assert store.oldest_runnable("empty").record is None
