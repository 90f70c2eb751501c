"""The producer API bounds run times too (9999-12-31T23:59:59.999Z), and croniter's
"never matches" comes back as InvalidRequestError on every supported croniter."""

from __future__ import annotations

from typing import Any

import pytest

from store import MAX_RUN_AT_MS, BackoffPolicy, InvalidRequestError, Job, Worker
from tests.runtime.harness import eventually, running, state_of

NOW = 1_796_428_800_000


@pytest.fixture
def clock(clock):
    clock.set(NOW)
    return clock


def test_job_definition_refuses_a_delay_or_backoff_past_the_bound(registry):
    with pytest.raises(InvalidRequestError, match="9999"):
        Job("FarDefault", delay_ms=10**18, registry=registry)
    with pytest.raises(InvalidRequestError, match="backoff"):
        Job("FarBackoff", attempts=100, backoff=("exponential", 1000), registry=registry)
    with pytest.raises(InvalidRequestError, match="negative"):
        Job("NegativeBackoff", attempts=2, backoff=("fixed", -1), registry=registry)


def test_enqueue_options_past_the_bound_are_refused(store, registry):
    job = Job("Producer", registry=registry)
    with pytest.raises(InvalidRequestError, match="delay_ms"):
        job.enqueue({}, delay_ms=10**18)
    with pytest.raises(InvalidRequestError, match="at="):
        job.enqueue({}, at=MAX_RUN_AT_MS + 1)
    with pytest.raises(InvalidRequestError, match="at="):
        job.enqueue_many([{}, {}], at=NOW * 1000)  # microseconds given as milliseconds
    with pytest.raises(InvalidRequestError, match="backoff"):
        job.enqueue({}, attempts=70, backoff=("exponential", 1000))
    with pytest.raises(InvalidRequestError):
        job.enqueue({}, delay_ms=10**18, on_commit=False)
    assert store.counts()["delayed"] == 0 and store.counts()["waiting"] == 0
    # Up to the bound is fine.
    job_id = job.enqueue({}, at=MAX_RUN_AT_MS)
    assert store.get_job(job_id).run_at == MAX_RUN_AT_MS


def test_schedule_with_an_interval_past_the_bound_is_refused(store, registry):
    job = Job("Rare", registry=registry)
    with pytest.raises(InvalidRequestError, match="every_ms"):
        job.schedule("millennia", every_ms=10**18, payload={})
    assert store.list_schedules() == []


@pytest.mark.parametrize("cron", ["0 0 30 2 *", "0 0 31 4 *", "0 0 31 11 *"])
def test_a_cron_that_never_matches_is_refused_at_upsert(store, registry, cron):
    job = Job("Never", registry=registry)
    with pytest.raises(InvalidRequestError, match="never matches"):
        job.schedule("never", cron=cron, payload={})
    assert store.list_schedules() == []


def test_a_cron_that_matches_rarely_is_accepted(store, registry):
    job = Job("LeapDay", registry=registry)
    job.schedule("leap", cron="0 0 29 2 *", payload={})
    (schedule,) = store.list_schedules()
    assert schedule.next_run_at > NOW


def test_retry_delays_stay_within_the_bound():
    from store.worker import RETRY_MARGIN_MS, backoff_delay_ms, bounded_retry_delay

    assert backoff_delay_ms(BackoffPolicy("exponential", 1000, 10.0), 10_000) == MAX_RUN_AT_MS
    assert bounded_retry_delay(5_000, NOW) == 5_000
    assert bounded_retry_delay(10**18, NOW) == MAX_RUN_AT_MS - RETRY_MARGIN_MS - NOW
    assert bounded_retry_delay(10**18, MAX_RUN_AT_MS) == 0


def test_worker_retries_a_stored_job_with_an_oversized_backoff_within_the_bound(
    store, registry, redis_client
):
    """A job stored before the bound existed (its backoff reaches past year 9999) still retries."""
    from store.worker import RETRY_MARGIN_MS

    def handler(payload: Any) -> None:
        raise RuntimeError("try again")

    job = Job("OldBackoff", attempts=3, backoff=("fixed", 1000), handler=handler, registry=registry)
    job_id = job.enqueue({})
    redis_client.hset(
        store.keys.job(job_id), "backoff", '{"kind": "fixed", "delay_ms": 1000000000000000000}'
    )
    with running(Worker(store, [job], registry=registry)):
        eventually(lambda: state_of(store, job_id) == "delayed")
    record = store.get_job(job_id)
    assert record.run_at == MAX_RUN_AT_MS - RETRY_MARGIN_MS
