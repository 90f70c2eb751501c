"""Worker presence: a running worker announces itself (host, pid, queues with concurrency,
jobs in flight, totals, start time) in the store's workers hash, refreshes it every
interval, and removes it when it stops; a killed worker's record expires and is pruned."""

from __future__ import annotations

import os
import socket
import threading

from store import Job, Worker
from store.insights import PRESENCE_MAX_IN_FLIGHT, InFlightJob
from store.worker import PRESENCE_INTERVAL_MS
from tests.runtime.harness import advance, eventually, running, state_of


def test_a_running_worker_is_reported_with_its_jobs_in_flight(store, registry, clock):
    gate = threading.Event()

    def slow(payload: object) -> str:
        gate.wait(5)
        return "done"

    job = Job("Slow", handler=slow, queue="reports", registry=registry)
    worker = Worker(store, [job], registry=registry, concurrency=2, worker_id="w-presence")
    with running(worker):
        [worker_info] = eventually(lambda: store.live_workers(), message="worker announced")
        assert worker_info.worker_id == "w-presence"
        assert worker_info.host == socket.gethostname() and worker_info.pid == os.getpid()
        assert worker_info.queues == {"reports": ["Slow"]}
        assert worker_info.concurrency == {"reports": 2}
        assert worker_info.started_at == worker_info.last_seen
        job_id = job.enqueue({})
        eventually(lambda: state_of(store, job_id) == "active")
        # The next announcement lists the job in flight.
        advance(clock, PRESENCE_INTERVAL_MS)
        busy = eventually(
            lambda: [w for w in store.live_workers() if w.in_flight_count == 1],
            message="in-flight job announced",
        )
        assert busy[0].in_flight[0].id == job_id and busy[0].in_flight[0].queue == "reports"
        gate.set()
        eventually(lambda: state_of(store, job_id) == "completed")
        advance(clock, PRESENCE_INTERVAL_MS)
        eventually(
            lambda: [w for w in store.live_workers() if w.totals.get("completed") == 1],
            message="totals announced",
        )
    # A clean stop removes the record at once.
    assert store.live_workers() == []
    assert store.client.hlen(store.keys.workers) == 0


def test_records_are_bounded_and_expire(store, clock):
    running_jobs = [InFlightJob(f"j-{i}", "q", "A", i) for i in range(PRESENCE_MAX_IN_FLIGHT + 30)]
    store.register_worker(
        "w-big", queues={"q": ["A"]}, routes=[], started_at=0, in_flight=running_jobs, ttl_ms=30_000
    )
    [info] = store.live_workers()
    assert len(info.in_flight) == PRESENCE_MAX_IN_FLIGHT
    assert info.in_flight_count == PRESENCE_MAX_IN_FLIGHT + 30
    # Past its own expiry (a killed worker never refreshes it) the record is pruned.
    clock.advance(30_001)
    assert store.live_workers() == []
    assert store.client.hlen(store.keys.workers) == 0
    # An unreadable record is pruned too, not raised.
    store.client.hset(store.keys.workers, "w-broken", "{not json")
    assert store.live_workers() == []
    assert store.client.hlen(store.keys.workers) == 0
