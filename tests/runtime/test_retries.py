"""WBO — retries, backoff, failure classification (conformance-cases.md §18)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from store import (
    BackoffPolicy,
    EnqueueRequest,
    Job,
    JobFailedError,
    JobInterrupted,
    Unrecoverable,
    Worker,
    backoff_delay_ms,
    current_job,
    unrecoverable,
)
from tests.runtime.harness import (
    advance,
    eventually,
    fail_claims,
    outcomes,
    quiet,
    running,
    state_of,
    walk,
)


class SendFailure(Exception):
    pass


class RouteMissing(Exception):
    def __init__(self, host: str) -> None:
        super().__init__(f"no route to {host}")
        self.host = host


class FatalSendFailure(SendFailure, Unrecoverable):
    pass


def test_wbo_01_backoff_delay_function():
    assert backoff_delay_ms(None, 1) == 0
    assert backoff_delay_ms(None, 7) == 0
    fixed = BackoffPolicy("fixed", 500)
    assert backoff_delay_ms(fixed, 1) == 500
    assert backoff_delay_ms(fixed, 9) == 500
    exponential = BackoffPolicy("exponential", 1000)
    assert [backoff_delay_ms(exponential, n) for n in (1, 2, 3)] == [1000, 2000, 4000]
    assert backoff_delay_ms(BackoffPolicy("exponential", 1000, 3), 3) == 9000
    assert backoff_delay_ms(BackoffPolicy("exponential", 333, 1.5), 2) == 500
    # A job (or record) carrying the policy works the same way.
    job = Job("BackoffCarrier", attempts=3, backoff=("exponential", 1000, 3))
    assert backoff_delay_ms(job, 2) == 3000


def test_wbo_02_retries_with_exponential_backoff_until_success(store, registry, clock):
    seen: list[int] = []

    def handler(payload: Any) -> int:
        attempt = current_job().attempt
        seen.append(attempt)
        if attempt < 3:
            raise SendFailure(f"attempt {attempt} failed")
        return attempt

    job = Job(
        "Flaky", attempts=3, backoff=("exponential", 1000, 2), handler=handler, registry=registry
    )
    with running(Worker(store, [job], registry=registry)):
        job_id = job.enqueue({})
        eventually(lambda: state_of(store, job_id) == "delayed")
        assert seen == [1]
        advance(clock, 1000)
        eventually(lambda: seen == [1, 2] and state_of(store, job_id) == "delayed")
        advance(clock, 1000)
        quiet()
        assert seen == [1, 2]
        advance(clock, 1000)
        eventually(lambda: state_of(store, job_id) == "completed")
    assert seen == [1, 2, 3]
    record = store.get_job(job_id)
    assert record.attempts_made == 3
    assert record.exit == 3
    ledger = store.get_attempts(job_id)
    assert [(a.attempt, a.outcome) for a in ledger] == [
        (1, "retried"),
        (2, "retried"),
        (3, "completed"),
    ]
    assert [a.exit["error"]["type"] for a in ledger[:2]] == ["SendFailure", "SendFailure"]
    assert ledger[2].exit == 3


def test_wbo_03_fails_permanently_once_attempts_are_exhausted(store, registry, clock):
    def handler(payload: Any) -> None:
        raise SendFailure("still broken")

    job = Job("Doomed", attempts=2, backoff=("fixed", 1000), handler=handler, registry=registry)
    with running(Worker(store, [job], registry=registry)):
        job_id = job.enqueue({})
        eventually(lambda: state_of(store, job_id) == "delayed")
        advance(clock, 1000)
        with pytest.raises(JobFailedError) as info:
            job.await_result(job_id, timeout_s=5)
    assert info.value.error_type == "SendFailure"
    assert store.counts()["failed"] == 1
    record = store.get_job(job_id)
    assert record.attempts_made == 2
    assert record.exit["error"]["type"] == "SendFailure"
    assert [(a.attempt, a.outcome) for a in store.get_attempts(job_id)] == [
        (1, "retried"),
        (2, "failed"),
    ]


def test_wbo_04_handler_defects_consume_attempts_and_are_retried(store, registry, clock):
    def handler(payload: Any) -> str:
        if current_job().attempt == 1:
            return str(1 / 0)  # an unexpected exception (the Python "defect")
        return "recovered"

    job = Job("Defective", attempts=2, backoff=("fixed", 1000), handler=handler, registry=registry)
    with running(Worker(store, [job], registry=registry)):
        job_id = job.enqueue({})
        eventually(lambda: state_of(store, job_id) == "delayed")
        advance(clock, 1000)
        assert job.await_result(job_id, timeout_s=5) == "recovered"
    ledger = store.get_attempts(job_id)
    assert [a.outcome for a in ledger] == ["retried", "completed"]
    error = ledger[0].exit["error"]
    assert error["type"] == "ZeroDivisionError"
    assert error["kind"] == "error"
    assert "ZeroDivisionError" in error["traceback"]


def test_wbo_05_terminal_defect_surfaces_in_await_result(store, registry):
    def handler(payload: Any) -> None:
        raise RuntimeError("kaboom")

    job = Job("Exploding", handler=handler, registry=registry)
    with running(Worker(store, [job], registry=registry)), pytest.raises(JobFailedError) as info:
        job.execute({}, timeout_s=5)
    assert (info.value.error_type, info.value.message) == ("RuntimeError", "kaboom")
    assert info.value.exit["error"]["module"] == "builtins"


@pytest.mark.parametrize("style", ["async", "sync"])
def test_wbo_06_self_interrupting_handler_is_a_failed_attempt(store, registry, clock, style):
    runs: list[int] = []

    async def async_handler(payload: Any) -> None:
        runs.append(current_job().attempt)
        asyncio.current_task().cancel()
        await asyncio.sleep(0)

    def sync_handler(payload: Any) -> None:
        runs.append(current_job().attempt)
        raise JobInterrupted("I give up")

    handler = async_handler if style == "async" else sync_handler
    job = Job(
        f"SelfStop-{style}", attempts=2, backoff=("fixed", 1000), handler=handler, registry=registry
    )
    with running(Worker(store, [job], registry=registry)):
        job_id = job.enqueue({})
        eventually(lambda: state_of(store, job_id) == "delayed")
        assert runs == [1]
        assert store.get_job(job_id).attempts_made == 1
        advance(clock, 1000)
        eventually(lambda: state_of(store, job_id) == "failed")
        assert store.get_job(job_id).attempts_made == 2
        walk(clock, 30_000, step_ms=5000)
        quiet()
    assert runs == [1, 2]
    ledger = store.get_attempts(job_id)
    assert [a.outcome for a in ledger] == ["retried", "failed"]
    assert ledger[-1].exit["error"]["kind"] == "interrupted"


def test_wbo_07_unserialisable_success_value_fails_without_rerun(store, registry, clock):
    runs: list[int] = []

    def handler(payload: Any) -> Any:
        runs.append(current_job().attempt)
        return {"when": object()}  # not JSON

    job = Job("BadResult", attempts=3, handler=handler, registry=registry)
    with running(Worker(store, [job], registry=registry)):
        job_id = job.enqueue({})
        with pytest.raises(JobFailedError):
            job.await_result(job_id, timeout_s=5)
        assert state_of(store, job_id) == "failed"
        walk(clock, 120_000, step_ms=10_000)
        quiet()
    assert runs == [1]
    assert outcomes(store, job_id) == ["failed"]


def test_wbo_08_undecodable_payload_fails_that_job_and_the_taker_survives(store, registry):
    ran: list[int] = []

    def handler(payload: dict[str, Any]) -> int:
        n = payload["n"]
        if not isinstance(n, int):
            raise TypeError(f"payload.n must be a number, got {n!r}")
        ran.append(n)
        return n

    job = Job("Typednum", handler=handler, registry=registry)
    raw = store.enqueue(EnqueueRequest(name="Typednum", payload={"n": "not-a-number"})).id
    with running(Worker(store, [job], registry=registry)):
        eventually(lambda: state_of(store, raw) == "failed")
        assert job.execute({"n": 5}, timeout_s=5) == 5
    assert ran == [5]
    assert store.get_job(raw).exit["error"]["type"] == "TypeError"


@pytest.mark.parametrize("marking", ["unrecoverable()", "Unrecoverable subclass"])
def test_wbo_09_unrecoverable_errors_skip_the_remaining_budget(store, registry, marking):
    def handler(payload: Any) -> None:
        if marking == "unrecoverable()":
            raise unrecoverable(SendFailure("permanently rejected"))
        raise FatalSendFailure("permanently rejected")

    job = Job("NoRetry", attempts=5, handler=handler, registry=registry)
    with running(Worker(store, [job], registry=registry)):
        job_id = job.enqueue({})
        with pytest.raises(JobFailedError) as info:
            job.await_result(job_id, timeout_s=5)
    expected = "SendFailure" if marking == "unrecoverable()" else "FatalSendFailure"
    assert info.value.error_type == expected
    record = store.get_job(job_id)
    assert (record.state, record.attempts_made) == ("failed", 1)
    assert outcomes(store, job_id) == ["failed"]


def test_wbo_10_retryable_predicate_routes_failures_past_the_budget(store, registry):
    runs: dict[str, int] = {}

    def handler(payload: dict[str, str]) -> None:
        runs[payload["reason"]] = runs.get(payload["reason"], 0) + 1
        raise SendFailure(payload["reason"])

    job = Job(
        "Picky",
        attempts=3,
        retryable=lambda exc: str(exc) != "fatal",
        handler=handler,
        registry=registry,
    )
    with running(Worker(store, [job], registry=registry)):
        fatal = job.enqueue({"reason": "fatal"})
        transient = job.enqueue({"reason": "transient"})
        eventually(lambda: state_of(store, fatal) == state_of(store, transient) == "failed")
    assert store.get_job(fatal).attempts_made == 1
    assert store.get_job(transient).attempts_made == 3
    assert runs == {"fatal": 1, "transient": 3}
    assert outcomes(store, transient) == ["retried", "retried", "failed"]


def test_wbo_11_throwing_retryable_predicate_never_leaves_the_job_active(store, registry):
    def predicate(exc: BaseException) -> bool:
        raise ValueError("predicate bug")

    def handler(payload: Any) -> None:
        raise SendFailure("nope")

    job = Job("BadPredicate", attempts=2, retryable=predicate, handler=handler, registry=registry)
    with running(Worker(store, [job], registry=registry)):
        job_id = job.enqueue({})
        eventually(lambda: state_of(store, job_id) == "failed")
    assert store.get_job(job_id).attempts_made == 2
    assert outcomes(store, job_id) == ["retried", "failed"]


def test_wbo_12_several_error_classes_round_trip_by_type(store, registry):
    def handler(payload: dict[str, str]) -> None:
        if payload["host"] == "mars":
            raise RouteMissing("mars")
        raise SendFailure(f"cannot send to {payload['host']}")

    job = Job("Router", handler=handler, registry=registry)
    with running(Worker(store, [job], registry=registry)):
        with pytest.raises(JobFailedError) as mars:
            job.execute({"host": "mars"}, timeout_s=5)
        with pytest.raises(JobFailedError) as moon:
            job.execute({"host": "moon"}, timeout_s=5)
    assert (mars.value.error_type, mars.value.message) == ("RouteMissing", "no route to mars")
    assert (moon.value.error_type, moon.value.message) == ("SendFailure", "cannot send to moon")


def test_wbo_13_transient_store_errors_are_retried_with_backoff(store, registry, clock):
    ran: list[str] = []
    job = Job(
        "Resilient", handler=lambda payload: ran.append(current_job().job_id), registry=registry
    )
    job_id = job.enqueue({})
    failures = fail_claims(store, 2)
    with running(Worker(store, [job], registry=registry)):
        assert failures == [0]
        advance(clock, 199)
        quiet(0.1)
        assert failures == [0]
        advance(clock, 1)
        eventually(lambda: failures == [0, 200])
        advance(clock, 299)
        quiet(0.1)
        assert ran == []
        advance(clock, 1)
        eventually(lambda: state_of(store, job_id) == "completed")
        quiet()
    assert failures == [0, 200]
    assert ran == [job_id]
