"""WTO — handler timeouts (conformance-cases.md §19)."""

from __future__ import annotations

import asyncio
from typing import Any

from store import Job, Worker, current_job
from tests.runtime.harness import advance, eventually, outcomes, quiet, running, state_of


async def forever(payload: Any) -> None:
    await asyncio.Event().wait()


def test_wto_01_job_timeout_interrupts_the_handler_and_consumes_attempts(store, registry, clock):
    runs: list[int] = []
    interrupted: list[int] = []

    async def handler(payload: Any) -> None:
        runs.append(current_job().attempt)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            interrupted.append(current_job().attempt)
            raise

    job = Job("Slowpoke", attempts=2, timeout_ms=5000, handler=handler, registry=registry)
    with running(Worker(store, [job], registry=registry)):
        job_id = job.enqueue({})
        eventually(lambda: runs == [1])
        advance(clock, 4999)
        quiet(0.1)
        assert runs == [1] and state_of(store, job_id) == "active"
        advance(clock, 1)
        eventually(lambda: runs == [1, 2])  # no backoff: retried at once
        assert interrupted == [1]
        advance(clock, 5000)
        eventually(lambda: state_of(store, job_id) == "failed")
    assert interrupted == [1, 2]
    ledger = store.get_attempts(job_id)
    assert [a.outcome for a in ledger] == ["retried", "failed"]
    assert {a.exit["error"]["kind"] for a in ledger} == {"timeout"}
    assert {a.exit["error"]["type"] for a in ledger} == {"JobTimeoutError"}


def test_wto_02_per_enqueue_timeout_overrides_the_default(store, registry, clock):
    job = Job("LongDefault", timeout_ms=3_600_000, handler=forever, registry=registry)
    with running(Worker(store, [job], registry=registry)):
        job_id = job.enqueue({}, timeout_ms=1000)
        eventually(lambda: state_of(store, job_id) == "active")
        settled_at = clock()
        advance(clock, 999)
        quiet(0.1)
        assert state_of(store, job_id) == "active"
        advance(clock, 1)
        eventually(lambda: state_of(store, job_id) == "failed")
    assert clock() - settled_at == 1000
    assert store.get_job(job_id).exit["error"]["kind"] == "timeout"


def test_wto_03_handlers_own_timeout_error_is_a_typed_failure(store, registry, clock):
    async def handler(payload: Any) -> None:
        await current_job().asleep(1000)
        raise TimeoutError("upstream call timed out")  # the handler's own timeout

    job = Job(
        "OwnTimeout",
        attempts=3,
        timeout_ms=3_600_000,
        retryable=lambda exc: False,
        handler=handler,
        registry=registry,
    )
    with running(Worker(store, [job], registry=registry)):
        job_id = job.enqueue({})
        eventually(lambda: state_of(store, job_id) == "active")
        advance(clock, 1000)
        eventually(lambda: state_of(store, job_id) == "failed")
    record = store.get_job(job_id)
    assert record.attempts_made == 1
    assert record.exit["error"]["type"] == "TimeoutError"
    assert record.exit["error"]["kind"] == "error"
    assert outcomes(store, job_id) == ["failed"]
