"""Big results and errors through a real worker (issue 23, defect 1): 300 KB and 2 MB are
stored whole; over the store's ``max_value_bytes`` the attempt fails with the reason and the
job's retry policy applies; the consistency checker finds nothing after every case."""

from __future__ import annotations

from typing import Any

import pytest

from store import Job, RedisJobStore, StoreRegistry, Worker, current_job
from tests.faults.helpers import SIZES, assert_consistent
from tests.runtime.harness import advance, eventually, running, state_of
from tests.store.helpers import counts_of

LIMIT = 100_000


class BoomError(Exception):
    pass


def registry_of(store: RedisJobStore) -> StoreRegistry:
    registry = StoreRegistry()
    registry.register(store)
    return registry


def run_job(store: RedisJobStore, handler: Any, *, final: str, **options: Any) -> str:
    """Run one job of ``handler`` on a worker until the job is ``final``; returns its id."""
    registry = registry_of(store)
    job = Job("Big", handler=handler, registry=registry, **options)
    with running(Worker(store, [job], registry=registry)):
        job_id = job.enqueue({})
        eventually(lambda: state_of(store, job_id) == final, timeout=30)
    return job_id


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
def test_a_large_result_is_stored_whole(store, size):
    value = {"blob": "r" * size}
    job_id = run_job(store, lambda payload: value, final="completed")
    assert store.get_job(job_id).exit == value
    assert store.counts() == counts_of(completed=1)
    assert_consistent(store)


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
def test_a_large_error_is_stored_whole(store, size):
    message = "m" * size

    def handler(payload: Any) -> None:
        raise BoomError(message)

    job_id = run_job(store, handler, final="failed")
    error = store.get_job(job_id).exit["error"]
    assert (error["type"], error["message"]) == ("BoomError", message)
    assert message in error["traceback"]
    assert store.counts() == counts_of(failed=1)
    assert_consistent(store)


def test_a_result_over_the_limit_fails_the_job_with_the_reason(make_store):
    store = make_store(max_value_bytes=LIMIT)
    job_id = run_job(store, lambda payload: "r" * LIMIT, final="failed")
    job = store.get_job(job_id)
    error = job.exit["error"]
    assert error["type"] == "ValueTooLargeError"
    assert error["message"] == (
        "result of 97.7 KiB (100002 bytes) exceeds max_value_bytes 97.7 KiB (100000 bytes)"
    )
    assert job.attempts_made == 1
    assert store.counts() == counts_of(failed=1)
    assert_consistent(store)


def test_a_result_over_the_limit_is_retried_under_the_jobs_policy(make_store, clock):
    store = make_store(max_value_bytes=LIMIT)
    seen: list[int] = []

    def handler(payload: Any) -> str:
        attempt = current_job().attempt
        seen.append(attempt)
        return "r" * LIMIT if attempt == 1 else "fits"

    registry = registry_of(store)
    job = Job("Big", handler=handler, registry=registry, attempts=2, backoff=("fixed", 1_000))
    worker = Worker(store, [job], registry=registry)
    with running(worker):
        job_id = job.enqueue({})
        eventually(lambda: state_of(store, job_id) == "delayed")
        assert store.counts() == counts_of(delayed=1)
        assert_consistent(store)
        advance(clock, 1_000)
        eventually(lambda: state_of(store, job_id) == "completed")
    assert seen == [1, 2]
    assert worker.stats["retried"] == 1 and worker.stats["completed"] == 1
    ledger = store.get_attempts(job_id)
    assert [a.outcome for a in ledger] == ["retried", "completed"]
    assert ledger[0].exit["error"]["type"] == "ValueTooLargeError"
    assert "exceeds max_value_bytes" in ledger[0].exit["error"]["message"]
    assert store.get_job(job_id).exit == "fits"
    assert store.counts() == counts_of(completed=1)
    assert_consistent(store)


def test_an_error_over_the_limit_fails_the_job_with_the_reason(make_store):
    store = make_store(max_value_bytes=LIMIT)

    def handler(payload: Any) -> None:
        raise BoomError("m" * LIMIT)

    job_id = run_job(store, handler, final="failed")
    error = store.get_job(job_id).exit["error"]
    assert error["type"] == "BoomError"
    assert error["message"].startswith("m" * 1000 + "… [cut: error of ")
    assert "exceeds max_value_bytes 97.7 KiB (100000 bytes)" in error["cut"]
    assert error["traceback"].startswith("Traceback (most recent call last)")
    assert store.counts() == counts_of(failed=1)
    assert_consistent(store)
