"""WRK — worker runtime: basics, routing, producer/runner split (conformance-cases.md §16)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from store import (
    InvalidRequestError,
    Job,
    JobFailedError,
    StoreRegistry,
    Worker,
    current_job,
    system_clock,
)
from tests.runtime.harness import (
    advance,
    eventually,
    outcomes,
    quiet,
    running,
    state_of,
    walk,
)


class SendFailure(Exception):
    pass


def test_wrk_01_queues_a_job_and_runs_it_in_the_background(store, registry, clock):
    seen: list[tuple[int, str, str]] = []

    def greet(payload: dict[str, Any]) -> str:
        ctx = current_job()
        seen.append((ctx.attempt, ctx.queue, ctx.name))
        return f"hello {payload['name']}"

    job = Job("Greet", handler=greet, registry=registry)
    with running(Worker(store, [job], registry=registry)):
        job_id = job.enqueue({"name": "world"})
        eventually(lambda: state_of(store, job_id) == "completed")
        advance(clock, 1000)
        assert job.await_result(job_id, timeout_s=5) == "hello world"
    assert seen == [(1, "default", "Greet")]


def test_wrk_02_current_job_is_readable_deep_in_the_call_graph(store, registry):
    def innermost() -> str:
        ctx = current_job()
        return f"{ctx.job_id}:{ctx.attempt}"

    def middle() -> str:
        return innermost()

    job = Job("Deep", handler=lambda payload: middle(), registry=registry)
    with running(Worker(store, [job], registry=registry)):
        assert job.execute({}, job_id="deep-1", timeout_s=5) == "deep-1:1"
    with pytest.raises(LookupError):
        current_job()


def test_wrk_03_handler_log_lines_carry_job_identity(store, registry, caplog):
    log = logging.getLogger("tests.noisy")

    def handler(payload):
        log.warning("sending the thing")

    job = Job("Noisy", handler=handler, registry=registry)
    with (
        caplog.at_level(logging.WARNING, logger="tests.noisy"),
        running(Worker(store, [job], registry=registry)),
    ):
        job.execute({}, job_id="noisy-1", timeout_s=5)
    [record] = [r for r in caplog.records if r.getMessage() == "sending the thing"]
    assert (record.job_id, record.job_queue, record.job_attempt) == ("noisy-1", "default", 1)
    assert record.mq_job == "[noisy-1 default#1] "
    outside = logging.getLogger("tests.noisy").makeRecord("n", logging.INFO, "f", 1, "m", (), None)
    assert outside.job_id is None and outside.mq_job == ""


def test_wrk_04_delayed_jobs_run_only_once_the_delay_elapses(store, registry, clock):
    runs: list[str] = []
    job = Job("Later", handler=lambda payload: runs.append(current_job().job_id), registry=registry)
    with running(Worker(store, [job], registry=registry)):
        job_id = job.enqueue({}, delay_ms=5000)
        advance(clock, 4000)
        quiet()
        assert runs == []
        assert state_of(store, job_id) == "delayed"
        advance(clock, 1000)
        eventually(lambda: state_of(store, job_id) == "completed")
        quiet()
    assert runs == [job_id]


def test_wrk_05_typed_errors_round_trip_to_the_caller(store, registry):
    def send(payload: Any) -> None:
        raise SendFailure("no route to mars")

    job = Job("Send", handler=send, registry=registry)
    with running(Worker(store, [job], registry=registry)), pytest.raises(JobFailedError) as info:
        job.execute({"to": "mars"}, timeout_s=5)
    assert info.value.error_type == "SendFailure"
    assert info.value.message == "no route to mars"
    assert info.value.exit["error"]["type"] == "SendFailure"


def test_wrk_06_idempotent_enqueues_run_the_handler_once(store, registry):
    runs: list[str] = []
    job = Job(
        "Once",
        idempotency_key=lambda payload: payload["key"],
        handler=lambda payload: runs.append(current_job().job_id),
        registry=registry,
    )
    with running(Worker(store, [job], registry=registry)):
        first = job.enqueue({"key": "k"})
        second = job.enqueue({"key": "k"})
        assert first == second == "Once/k"
        eventually(lambda: state_of(store, first) == "completed")
        assert job.enqueue({"key": "k"}) == "Once/k"
        quiet()
    assert runs == ["Once/k"]


def test_wrk_07_two_job_types_on_one_queue_share_its_takers(store, registry):
    ran: list[str] = []
    a = Job("A", queue="shared", handler=lambda payload: ran.append("A"), registry=registry)
    b = Job("B", queue="shared", handler=lambda payload: ran.append("B"), registry=registry)
    with running(Worker(store, [a, b], registry=registry)) as handle:
        ids = [a.enqueue({}), b.enqueue({})]
        eventually(lambda: all(state_of(store, i) == "completed" for i in ids))
        assert handle.worker.queues == {"shared": ["A", "B"]}
    assert sorted(ran) == ["A", "B"]


def test_wrk_08_jobs_on_queues_without_handlers_stay_waiting(store, registry, clock):
    ran: list[str] = []
    here = Job("Here", handler=lambda payload: ran.append("here"), registry=registry)
    orphan = Job(
        "Orphan", queue="elsewhere", handler=lambda payload: ran.append("orphan"), registry=registry
    )
    with running(Worker(store, [here], registry=registry)):
        orphan_id = orphan.enqueue({})
        walk(clock, 30_000, step_ms=5000)
        quiet()
        assert state_of(store, orphan_id) == "waiting"
    assert ran == []
    assert store.counts(queue="elsewhere")["waiting"] == 1


def test_wrk_09_queue_overrides_on_registration_and_enqueue(store, registry, clock):
    ran: list[str] = []
    job = Job(
        "Routed",
        queue="a",
        handler=lambda payload: ran.append(current_job().queue),
        registry=registry,
    )
    worker = Worker(store, registry=registry)
    worker.register(job, queue="b")
    with running(worker):
        on_a = job.enqueue({})
        on_b = job.enqueue({}, queue="b")
        walk(clock, 30_000, step_ms=5000)
        eventually(lambda: state_of(store, on_b) == "completed")
        quiet()
        assert state_of(store, on_a) == "waiting"
    assert store.get_job(on_a).queue == "a"
    assert ran == ["b"]


def test_wrk_10_producer_runner_separation(store, registry):
    report = Job(
        "MonthlyReport",
        handler=lambda payload: f"report for {payload['month']}",
        registry=registry,
    )
    # Producer side: no Worker constructed anywhere.
    job_id = report.enqueue({"month": "2026-08"})
    assert store.counts()["waiting"] == 1
    status = report.poll(job_id)
    assert status is not None and status.state == "waiting"
    # A separate runner on the same store drains it.
    with running(Worker(store, [report], registry=registry)):
        assert report.await_result(job_id, timeout_s=5) == "report for 2026-08"


def test_wrk_11_duplicate_handler_registration_fails(store, registry):
    job = Job("Dup", handler=lambda payload: None, registry=registry)
    worker = Worker(store, registry=registry)
    worker.register(job)
    with pytest.raises(InvalidRequestError):
        worker.register(job)
    with pytest.raises(InvalidRequestError):
        Worker(store, [job, job], registry=registry)
    twin = Job("Dup", handler=lambda payload: None, registry=registry)
    with pytest.raises(InvalidRequestError):
        worker.register(twin)


def test_wrk_12_handler_context_isolation(store, registry):
    def make_handler(service: int):
        def handler(payload: Any) -> dict[str, Any]:
            return {"service": service, "name": current_job().name, "id": current_job().job_id}

        return handler

    one = Job("UsesOne", queue="shared", handler=make_handler(1), registry=registry)
    two = Job("UsesTwo", queue="shared", handler=make_handler(2), registry=registry)
    with running(Worker(store, [one, two], registry=registry)):
        id_one = one.enqueue({})
        id_two = two.enqueue({})
        r1 = one.await_result(id_one, timeout_s=5)
        r2 = two.await_result(id_two, timeout_s=5)
    assert r1 == {"service": 1, "name": "UsesOne", "id": id_one}
    assert r2 == {"service": 2, "name": "UsesTwo", "id": id_two}


def test_wrk_13_real_timers_execute_delay_and_retry(make_store):
    live = make_store(clock=system_clock)
    reg = StoreRegistry()
    reg.register(live)
    calls: dict[int, int] = {}

    def handler(payload: dict[str, int]) -> int:
        n = payload["n"]
        calls[n] = calls.get(n, 0) + 1
        if n == 2 and current_job().attempt == 1:
            raise RuntimeError("die on the first attempt")
        return n * 10

    job = Job("Live", attempts=2, backoff=("fixed", 30), handler=handler, registry=reg)
    with running(Worker(live, [job], poll_interval_ms=20, lock_duration_ms=2000, registry=reg)):
        assert job.execute({"n": 1}, timeout_s=5) == 10
        assert job.execute({"n": 3}, delay_ms=50, timeout_s=5) == 30
        assert job.execute({"n": 2}, timeout_s=5) == 20
    assert calls == {1: 1, 3: 1, 2: 2}


def test_wrk_14_full_lifecycle_round_trips_through_redis(make_store):
    live = make_store(clock=system_clock)
    reg = StoreRegistry()
    reg.register(live)
    last_attempt: list[int] = []

    def handler(payload: dict[str, str]) -> str:
        attempt = current_job().attempt
        last_attempt.append(attempt)
        if attempt == 1:
            raise SendFailure("flaky")
        return f"report {payload['month']} sent"

    job = Job(
        "Report",
        attempts=2,
        metadata=lambda payload: {"month": payload["month"]},
        handler=handler,
        registry=reg,
    )
    with running(Worker(live, [job], poll_interval_ms=100, lock_duration_ms=5000, registry=reg)):
        assert job.execute({"month": "2026-08"}, timeout_s=5) == "report 2026-08 sent"
    assert last_attempt[-1] == 2
    page = live.list(metadata={"month": "2026-08"})
    assert len(page.items) == 1
    record = page.items[0]
    assert (record.state, record.attempts_made) == ("completed", 2)
    assert outcomes(live, record.id) == ["retried", "completed"]
