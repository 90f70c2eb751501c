"""WCX — cancelling running jobs, pause/resume via the worker (conformance-cases.md §22)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from store import Job, JobCancelledError, Worker, current_job
from tests.runtime.harness import advance, eventually, outcomes, quiet, running, state_of, walk


@pytest.mark.parametrize("style", ["async", "sync"])
def test_wcx_01_cancel_interrupts_a_running_handler_via_the_heartbeat(
    store, registry, clock, style
):
    started: list[str] = []
    cleaned: list[str] = []

    async def async_handler(payload: Any) -> None:
        started.append(current_job().job_id)
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.2)  # cleanup takes a moment
            cleaned.append(current_job().job_id)

    def sync_handler(payload: Any) -> None:
        started.append(current_job().job_id)
        try:
            current_job().sleep(3_600_000)
        finally:
            time.sleep(0.2)  # cleanup takes a moment
            cleaned.append(current_job().job_id)

    handler = async_handler if style == "async" else sync_handler
    job = Job(f"Cancellable-{style}", attempts=3, handler=handler, registry=registry)
    with running(Worker(store, [job], lock_renew_interval_ms=1000, registry=registry)):
        job_id = job.enqueue({})
        eventually(lambda: started == [job_id])
        job.cancel(job_id)
        quiet(0.1)
        assert cleaned == []  # delivery rides on the heartbeat
        advance(clock, 1000)
        eventually(lambda: state_of(store, job_id) == "cancelled")
        # The cancelled ack is written once the interrupted handler finished its cleanup.
        assert cleaned == [job_id]
        with pytest.raises(JobCancelledError):
            job.await_result(job_id, timeout_s=5)
    assert outcomes(store, job_id)[-1] == "cancelled"
    assert store.get_job(job_id).attempts_made == 1


def test_wcx_02_cancelling_a_delayed_job_is_immediate_promote_runs_now(store, registry, clock):
    ran: list[int] = []
    job = Job("Parked", handler=lambda payload: ran.append(payload["n"]), registry=registry)
    with running(Worker(store, [job], registry=registry)):
        first = job.enqueue({"n": 1}, delay_ms=3_600_000)
        second = job.enqueue({"n": 2}, delay_ms=3_600_000)
        job.cancel(first)
        assert state_of(store, first) == "cancelled"
        job.promote(second)
        eventually(lambda: state_of(store, second) == "completed")
        quiet()
    assert clock() == 0
    assert ran == [2]
    assert outcomes(store, first) == ["cancelled"]


def test_wcx_03_slow_cancel_finalizer_does_not_stall_other_lock_renewals(store, registry, clock):
    cleanup: list[str] = []

    bystander_may_finish = threading.Event()

    async def handler(payload: Any) -> None:
        ctx = current_job()
        try:
            if payload["slow"]:
                await asyncio.Event().wait()
            while not bystander_may_finish.is_set():  # "blocks forever" (until the test is done)
                await asyncio.sleep(0.005)
        except asyncio.CancelledError:
            if payload["slow"]:
                cleanup.append("started")
                end = ctx.clock() + 120_000
                while ctx.clock() < end:  # a 2-minute finalizer (on the worker clock)
                    try:
                        await ctx.asleep(end - ctx.clock())
                    except asyncio.CancelledError:
                        cleanup.append("re-interrupted")
                cleanup.append("finished")
            raise

    job = Job("TwoOfThem", handler=handler, registry=registry)
    worker = Worker(
        store,
        [job],
        concurrency=2,
        lock_duration_ms=3000,
        lock_renew_interval_ms=1000,
        stalled_interval_ms=2000,
        registry=registry,
    )
    with running(worker):
        a = job.enqueue({"slow": True})
        b = job.enqueue({"slow": False})
        eventually(lambda: state_of(store, a) == state_of(store, b) == "active")
        job.cancel(a)
        for _ in range(10):
            advance(clock, 1000, precise=True)
            record = store.get_job(b)
            assert (record.state, record.stalled_count) == ("active", 0)
        assert "started" in cleanup and "finished" not in cleanup
        # Let the bystander end first: the 2-minute jump below would otherwise outrun its
        # heartbeat (a fake-clock jump fires the stall sweep and the renewal in one go).
        bystander_may_finish.set()
        eventually(lambda: state_of(store, b) == "completed")
        advance(clock, 120_000)
        eventually(lambda: state_of(store, a) == "cancelled")
        eventually(lambda: "finished" in cleanup)
    assert outcomes(store, a)[-1] == "cancelled"


def test_wcx_03b_repeated_cancel_flags_do_not_reinterrupt_a_finalizer(store, registry, clock):
    """[DERIVED] runtime.md §4.6: the store repeats cancel_requested on every heartbeat; the
    worker delivers the interrupt once ("cancelling") and never disturbs the finalizer it
    started (WCX-03's premise: a finalizer that takes its time runs to its end)."""
    cleanup: list[str] = []

    async def handler(payload: Any) -> None:
        ctx = current_job()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cleanup.append("started")
            try:
                await ctx.asleep(5_000)
            except asyncio.CancelledError:
                cleanup.append("re-interrupted")
                raise
            cleanup.append("finished")
            raise

    job = Job("PatientFinalizer", handler=handler, registry=registry)
    with running(Worker(store, [job], lock_renew_interval_ms=1000, registry=registry)):
        job_id = job.enqueue({})
        eventually(lambda: state_of(store, job_id) == "active")
        job.cancel(job_id)
        walk(clock, 7_000)
        eventually(lambda: state_of(store, job_id) == "cancelled")
    assert cleanup == ["started", "finished"]


def test_wcx_04_paused_queue_is_not_claimed_resume_wakes_takers(store, registry):
    ran: list[str] = []
    job = Job(
        "Pausable", handler=lambda payload: ran.append(current_job().job_id), registry=registry
    )
    with running(Worker(store, [job], registry=registry)):
        store.pause("default")
        job_id = job.enqueue({})
        quiet()
        assert ran == []
        assert state_of(store, job_id) == "waiting"
        store.resume("default")
        eventually(lambda: state_of(store, job_id) == "completed")
        quiet()
    assert ran == [job_id]
