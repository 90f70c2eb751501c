"""WCC — worker concurrency and ordering (conformance-cases.md §17)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from store import Job, Worker, current_job
from tests.runtime.harness import advance, eventually, quiet, running, state_of


class Gauge:
    """Counts handlers running at once (async handlers: not bounded by any thread pool)."""

    def __init__(self) -> None:
        self.running = 0
        self.max = 0
        self.done = 0
        self.gate = threading.Event()
        self.lock = threading.Lock()

    async def handler(self, payload: Any) -> None:
        with self.lock:
            self.running += 1
            self.max = max(self.max, self.running)
        try:
            while not self.gate.is_set():
                await asyncio.sleep(0.005)
        finally:
            with self.lock:
                self.running -= 1
                self.done += 1


def test_wcc_01_at_most_concurrency_handlers_per_queue(store, registry):
    gauge = Gauge()
    job = Job("Gated", handler=gauge.handler, registry=registry)
    worker = Worker(store, registry=registry)
    worker.register(job, concurrency=2)
    with running(worker):
        ids = [job.enqueue({"i": i}) for i in range(4)]
        eventually(lambda: gauge.running == 2)
        quiet()
        assert (gauge.running, gauge.max) == (2, 2)
        assert store.counts()["active"] == 2
        gauge.gate.set()
        eventually(lambda: all(state_of(store, i) == "completed" for i in ids))
    assert gauge.max == 2
    assert store.counts()["completed"] == 4


def test_wcc_02_per_queue_worker_option_beats_registration_concurrency(store, registry):
    gauge = Gauge()
    job = Job("Capped", queue="q", handler=gauge.handler, registry=registry)
    worker = Worker(store, concurrency=3, queues={"q": {"concurrency": 2}}, registry=registry)
    worker.register(job, concurrency=5)
    assert worker.queue_concurrency("q") == 2
    with running(worker):
        ids = [job.enqueue({"i": i}) for i in range(5)]
        eventually(lambda: gauge.running == 2)
        quiet()
        assert gauge.max == 2
        gauge.gate.set()
        eventually(lambda: all(state_of(store, i) == "completed" for i in ids))
    assert gauge.max == 2


def test_wcc_03_higher_priority_jobs_run_first(store, registry, clock):
    order: list[str] = []
    job = Job("Prio", handler=lambda payload: order.append(payload["label"]), registry=registry)
    with running(Worker(store, [job], registry=registry)):
        low = job.enqueue({"label": "low"}, delay_ms=1000)
        high = job.enqueue({"label": "high"}, delay_ms=1000, priority=10)
        advance(clock, 1000)
        eventually(lambda: state_of(store, low) == state_of(store, high) == "completed")
    assert order == ["high", "low"]


def test_wcc_04_two_workers_sharing_a_store_never_double_process(make_store, registry, clock):
    store_a = registry.get("default")
    store_b = make_store()  # a second store object (own connection use, own wake hub), same prefix
    runs: dict[str, int] = {}
    by_worker: dict[str, set[str]] = {"w1": set(), "w2": set()}
    lock = threading.Lock()

    def make(tag: str):
        async def handler(payload: Any) -> None:
            await asyncio.sleep(0.01)
            with lock:
                runs[current_job().job_id] = runs.get(current_job().job_id, 0) + 1
                by_worker[tag].add(current_job().job_id)

        return handler

    job_1 = Job("Shared", handler=make("w1"), registry=registry)
    job_2 = Job("Shared", handler=make("w2"), registry=registry)
    w1 = Worker(store_a, [job_1], concurrency=2, worker_id="w1", registry=registry)
    w2 = Worker(store_b, [job_2], concurrency=2, worker_id="w2", registry=registry)
    with running(w1), running(w2):
        ids = job_1.enqueue_many([{"i": i} for i in range(10)])
        advance(clock, 1000)
        eventually(lambda: store_a.counts()["completed"] == 10)
        quiet()
    assert sorted(runs) == sorted(ids)
    assert set(runs.values()) == {1}
    assert not (by_worker["w1"] & by_worker["w2"])
