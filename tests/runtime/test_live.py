"""Handlers report progress and log lines; waits are woken by the event stream."""

from __future__ import annotations

import asyncio
import logging
import statistics
import threading
import time
from typing import Any

import pytest

from store import Job, JobLogHandler, RedisJobStore, StoreRegistry, Worker, current_job
from store.clock import system_clock
from tests.runtime.harness import eventually, running


def wall_clock_store(make_store: Any) -> tuple[RedisJobStore, StoreRegistry]:
    store = make_store(clock=system_clock)
    registry = StoreRegistry()
    registry.register(store)
    return store, registry


@pytest.mark.parametrize("run_sync_in", ["thread", "process"])
def test_a_sync_handler_reports_progress_and_logs(make_store: Any, run_sync_in: str) -> None:
    store, registry = wall_clock_store(make_store)
    gate = threading.Event()

    def handler(payload: dict[str, int]) -> str:
        job = current_job()
        for step in range(1, payload["steps"] + 1):
            assert job.progress(100 * step // payload["steps"])
            assert job.log(f"step {step}")
        if run_sync_in == "thread":
            gate.wait(10)  # keeps running while the test looks
        return "done"

    job = Job("Steps", registry=registry, handler=handler)
    with running(Worker(store, [job], registry=registry, run_sync_in=run_sync_in)):
        job_id = job.enqueue({"steps": 4})
        if run_sync_in == "thread":
            # Visible while the job still runs.
            eventually(lambda: store.get_job(job_id).progress == 100)
            assert store.get_job(job_id).state == "active"
            gate.set()
        assert job.await_result(job_id, timeout_s=20) == "done"
    assert [line.message for line in store.job_logs(job_id)] == [f"step {n}" for n in range(1, 5)]
    kinds = [e.type for e in store.events("0", count=1000) if e.job_id == job_id]
    assert kinds == ["enqueued", "active"] + ["progress", "log"] * 4 + ["completed"]


def test_an_async_handler_reports_progress(make_store: Any) -> None:
    store, registry = wall_clock_store(make_store)

    async def handler(payload: Any) -> int:
        await asyncio.to_thread(current_job().progress, {"stage": "half"})
        current_job().log("async line")
        return 1

    job = Job("AsyncSteps", registry=registry, handler=handler)
    with running(Worker(store, [job], registry=registry)):
        job_id = job.enqueue({})
        assert job.await_result(job_id, timeout_s=20) == 1
    assert store.get_job(job_id).progress == {"stage": "half"}
    assert store.job_logs(job_id)[0].message == "async line"


def test_the_log_handler_copies_a_jobs_own_records(make_store: Any) -> None:
    store, registry = wall_clock_store(make_store)
    app_log = logging.getLogger("tests.live.app")
    app_log.setLevel(logging.INFO)
    handler = JobLogHandler()
    logging.getLogger().addHandler(handler)

    def work(payload: Any) -> None:
        app_log.info("fetched %d rows", 3)
        app_log.debug("too fine to keep")
        logging.getLogger("store.worker").warning("the store's own record stays out")

    try:
        job = Job("Logs", registry=registry, handler=work)
        with running(Worker(store, [job], registry=registry)):
            job_id = job.enqueue({})
            job.await_result(job_id, timeout_s=20)
            app_log.info("outside any job")
    finally:
        logging.getLogger().removeHandler(handler)
    assert [line.message for line in store.job_logs(job_id)] == [
        "INFO tests.live.app: fetched 3 rows"
    ]


def test_outside_a_worker_progress_and_log_write_nothing() -> None:
    from store.jobs import JobContext

    ctx = JobContext("j", "n", "q", 1, 1, None, system_clock)  # type: ignore[arg-type]
    assert ctx.progress(5) is False and ctx.log("x") is False


def test_await_result_returns_within_milliseconds_of_the_ack(make_store: Any) -> None:
    """Event-driven: the lag from the ack to the wait returning is a few ms, not a poll step."""
    store, registry = wall_clock_store(make_store)

    def handler(payload: Any) -> None:
        time.sleep(0.25)

    job = Job("Lag", registry=registry, handler=handler)
    lags = []
    with running(Worker(store, [job], registry=registry)):
        for _ in range(5):
            job_id = job.enqueue({})
            job.await_result(job_id, timeout_s=20)
            returned_ms = time.time() * 1000
            # The completed event's id is the server's clock (ms) when the ack ran.
            (done,) = [
                e
                for e in store.events("0", count=1000)
                if e.job_id == job_id and e.type == "completed"
            ]
            lags.append((returned_ms - int(done.id.split("-")[0])) / 1000)
    # Polling from 10 ms doubling would return ~60 ms after a 250 ms job; this is
    # a correctness bound with room for a loaded CI machine (the bench measures).
    assert statistics.median(lags) < 0.05, lags


def test_await_result_times_out_and_notices_a_removal(make_store: Any) -> None:
    store, registry = wall_clock_store(make_store)
    job = Job("Idle", registry=registry)
    job_id = job.enqueue({})
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="still waiting after 0.3 s"):
        job.await_result(job_id, timeout_s=0.3)
    assert 0.25 <= time.monotonic() - started < 2
    done = threading.Event()
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            job.await_result(job_id, timeout_s=10)
        except BaseException as exc:
            errors.append(exc)
        done.set()

    threading.Thread(target=wait, daemon=True).start()
    time.sleep(0.1)
    store.remove(job_id)
    assert done.wait(3)
    assert type(errors[0]).__name__ == "JobNotFoundError"


def test_await_result_falls_back_to_polling_without_events(make_store: Any) -> None:
    store, registry = wall_clock_store(make_store)
    store.set_events_max_len(0)
    job = Job("NoEvents", registry=registry, handler=lambda payload: payload["x"] * 2)
    with running(Worker(store, [job], registry=registry)):
        assert job.execute({"x": 21}, timeout_s=20) == 42
