"""WSD — graceful shutdown (§20) and WST — worker locks, heartbeat, stalled sweep (§21)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from store import MISSING, Claimed, Job, JobFailedError, Worker, current_job
from tests.runtime.harness import (
    Running,
    advance,
    eventually,
    outcomes,
    running,
    state_of,
    walk,
)


@pytest.mark.parametrize("style", ["async", "sync"])
def test_wsd_01_shutdown_releases_in_flight_jobs(store, registry, style):
    started: list[str] = []
    finalized: list[str] = []

    async def async_handler(payload: Any) -> None:
        started.append(current_job().job_id)
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.2)  # a finalizer that takes a moment
            finalized.append(current_job().job_id)

    def sync_handler(payload: Any) -> None:
        started.append(current_job().job_id)
        try:
            current_job().sleep(3_600_000)  # cooperative: raises once asked to stop
        finally:
            time.sleep(0.2)
            finalized.append(current_job().job_id)

    handler = async_handler if style == "async" else sync_handler
    job = Job(f"Blocker-{style}", attempts=3, handler=handler, registry=registry)
    with running(Worker(store, [job], registry=registry)):
        job_id = job.enqueue({})
        eventually(lambda: started == [job_id])
        assert state_of(store, job_id) == "active"
    # No grace period, but the worker waits for the handler's finalizers before it is done.
    assert finalized == [job_id]
    counts = store.counts()
    assert (counts["active"], counts["waiting"]) == (0, 1)
    assert outcomes(store, job_id) == []
    claimed = store.claim(queue="default", names=[job.name], token="t-again")
    assert isinstance(claimed, Claimed)
    assert claimed.job.id == job_id and claimed.job.attempts_made == 0


@pytest.mark.parametrize("style", ["async", "sync"])
def test_wsd_01b_job_claimed_while_the_worker_stops_is_released(store, registry, style):
    """WSD-01 when the stop lands during the claim round trip: the claim is never interrupted
    midway (runtime.md §4.4), so the freshly claimed job must still be released (§4.10),
    whatever kind of handler it has, and the worker must stop."""
    started: list[str] = []

    async def async_handler(payload: Any) -> None:
        started.append(current_job().job_id)
        await asyncio.Event().wait()

    def sync_handler(payload: Any) -> None:
        started.append(current_job().job_id)
        current_job().sleep(3_600_000)

    handler = async_handler if style == "async" else sync_handler
    job = Job(f"LateClaim-{style}", attempts=3, handler=handler, registry=registry)
    job_id = job.enqueue({})
    worker = Worker(store, [job], registry=registry)
    stopped_mid_claim = threading.Event()

    def stop_then(original: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            claiming = kwargs.get("tokens", [None]) != []
            if claiming and not stopped_mid_claim.is_set():
                worker.request_stop()
                deadline = time.monotonic() + 2
                while not worker.stopping and time.monotonic() < deadline:
                    time.sleep(0.005)
                stopped_mid_claim.set()
            return original(*args, **kwargs)

        return call

    for name in ("claim", "ack_and_claim", "ack_and_claim_many"):
        if hasattr(store, name):
            setattr(store, name, stop_then(getattr(store, name)))
    handle = Running(worker)
    handle.start()
    handle.stop(timeout=5)
    assert stopped_mid_claim.is_set()
    record = store.get_job(job_id)
    assert (record.state, record.attempts_made) == ("waiting", 0)
    assert outcomes(store, job_id) == []


def test_wst_01_lock_renewal_keeps_long_handlers_alive(store, registry, clock):
    runs: list[int] = []

    def handler(payload: Any) -> str:
        runs.append(current_job().attempt)
        current_job().sleep(3000)
        return "done"

    job = Job("Marathon", handler=handler, registry=registry)
    worker = Worker(
        store,
        [job],
        lock_duration_ms=1000,
        lock_renew_interval_ms=500,
        stalled_interval_ms=1000,
        max_stalled_count=1,
        registry=registry,
    )
    with running(worker):
        job_id = job.enqueue({})
        eventually(lambda: runs == [1])
        for _ in range(8):
            advance(clock, 500, precise=True)
        eventually(lambda: state_of(store, job_id) == "completed")
    record = store.get_job(job_id)
    assert runs == [1]
    assert record.stalled_count == 0
    assert outcomes(store, job_id) == ["completed"]


def test_wst_02_recovers_stalled_jobs_from_crashed_workers(store, registry, clock):
    runs: list[int] = []
    job = Job(
        "Survivor", handler=lambda payload: runs.append(current_job().attempt), registry=registry
    )
    job_id = job.enqueue({})
    crashed = store.claim(
        queue="default", names=["Survivor"], token="dead-worker:1", lock_duration_ms=1000
    )
    assert isinstance(crashed, Claimed)
    with running(Worker(store, [job], stalled_interval_ms=2000, registry=registry)):
        advance(clock, 2000)
        eventually(lambda: state_of(store, job_id) == "completed")
    record = store.get_job(job_id)
    assert runs == [1]
    assert record.stalled_count == 1
    assert outcomes(store, job_id) == ["stalled", "completed"]


def test_wst_03_stalled_sweep_fails_repeat_offenders(store, registry, clock):
    job = Job("Offender", handler=lambda payload: "never", registry=registry)
    job_id = job.enqueue({})
    store.claim(queue="default", names=["Offender"], token="dead-worker:1", lock_duration_ms=500)
    with running(
        Worker(store, [job], stalled_interval_ms=1000, max_stalled_count=0, registry=registry)
    ):
        walk(clock, 2000)
        with pytest.raises(JobFailedError):
            job.await_result(job_id, timeout_s=5)
    record = store.get_job(job_id)
    assert record.state == "failed"
    assert record.failed_reason
    assert outcomes(store, job_id) == ["stalled"]


def test_wst_04_attempts_show_stalled_entries_as_exit_less_runs(store, registry, clock):
    job = Job("Stally", handler=lambda payload: None, registry=registry)
    job_id = job.enqueue({})
    store.claim(queue="default", names=["Stally"], token="t-1", lock_duration_ms=1000)
    clock.advance(1000)
    recovered = store.recover_stalled(1)
    assert [r.id for r in recovered] == [job_id]
    attempts = job.attempts_of(job_id)
    assert len(attempts) == 1
    entry = attempts[0]
    assert entry.outcome == "stalled"
    assert entry.exit is MISSING
    assert entry.started_at is not None and entry.started_at == 0
    assert entry.finished_at == 1000
