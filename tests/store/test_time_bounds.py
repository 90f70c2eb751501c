"""Run times past 9999-12-31T23:59:59.999Z are refused before anything is written.

A delay given in microseconds instead of milliseconds (or an ``at=`` far in the future)
used to be stored as is, and the dashboard could not show the job (issue 23, defect 2).
Every way a run time enters the store is bounded: enqueue and enqueue_many delays, the
backoff of a request, a retry's delay at ack, schedules (their next run and interval).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from store import (
    MAX_RUN_AT_MS,
    BackoffPolicy,
    InvalidRequestError,
    Retry,
    ScheduleRecord,
)
from store.schedules import next_cron, next_occurrence
from tests.store.helpers import claim_id, req, store_keys

#: A realistic "now" (2026-12-05) for the fake clock.
NOW = 1_796_428_800_000


@pytest.fixture
def clock(clock):
    clock.set(NOW)
    return clock


@pytest.fixture
def before(store, redis_client, prefix):
    store.counts()
    return store_keys(redis_client, prefix)


def test_the_bound_is_the_last_millisecond_of_year_9999():
    last = datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC)
    assert int(last.timestamp() * 1000) == MAX_RUN_AT_MS


def test_delay_up_to_the_bound_is_accepted(store):
    job_id = store.enqueue(req(delay_ms=MAX_RUN_AT_MS - NOW)).id
    assert store.get_job(job_id).run_at == MAX_RUN_AT_MS


@pytest.mark.parametrize(
    "delay_ms",
    [MAX_RUN_AT_MS - NOW + 1, 10**18, 2**63],
    ids=["one-past", "microseconds-as-ms", "int64"],
)
def test_delay_past_the_bound_is_refused_before_writing(
    store, redis_client, prefix, before, delay_ms
):
    with pytest.raises(InvalidRequestError, match="9999-12-31T23:59:59.999Z"):
        store.enqueue(req(id="far", delay_ms=delay_ms))
    with pytest.raises(InvalidRequestError, match="delay_ms"):
        store.enqueue_many([req(id="ok-1"), req(id="far", delay_ms=delay_ms), req(id="ok-2")])
    with pytest.raises(InvalidRequestError):
        store.enqueue(req(id="far", delay_ms=delay_ms, dedupe={"key": "k"}))
    assert store_keys(redis_client, prefix) == before
    assert store.get_job("ok-1") is None


def test_negative_backoff_delay_is_refused(store, redis_client, prefix, before):
    for backoff in (
        BackoffPolicy("fixed", -1),
        {"kind": "exponential", "delay_ms": -1000},
        {"kind": "exponential", "delay_ms": 1000, "factor": -2},
        {"kind": "exponential", "delay_ms": 1000, "factor": float("nan")},
    ):
        with pytest.raises(InvalidRequestError, match="backoff"):
            store.enqueue(req(attempts_max=3, backoff=backoff))
    assert store_keys(redis_client, prefix) == before


@pytest.mark.parametrize(
    ("backoff", "attempts_max"),
    [
        (BackoffPolicy("fixed", 10**18), 2),
        (BackoffPolicy("exponential", 1000), 60),  # 1 s * 2**58: 9 billion years
        (BackoffPolicy("exponential", 1000, 10.0), 400),  # overflows a float
    ],
    ids=["fixed", "exponential", "overflow"],
)
def test_backoff_reaching_past_the_bound_is_refused(
    store, redis_client, prefix, before, backoff, attempts_max
):
    with pytest.raises(InvalidRequestError, match="backoff"):
        store.enqueue(req(attempts_max=attempts_max, backoff=backoff))
    assert store_keys(redis_client, prefix) == before


def test_backoff_within_the_bound_is_accepted(store):
    # 1 s doubling over 30 runs tops out at 2**28 s (8.5 years): fine.
    store.enqueue(req(attempts_max=30, backoff=BackoffPolicy("exponential", 1000)))
    # Without retries a backoff is never used, whatever it says.
    store.enqueue(req(attempts_max=1, backoff=BackoffPolicy("fixed", 10**18)))


def test_retry_past_the_bound_is_refused_and_the_job_stays_active(store):
    job_id = store.enqueue(req(attempts_max=3)).id
    claim_id(store, job_id)
    with pytest.raises(InvalidRequestError, match="retry"):
        store.ack(job_id, "t-1", Retry(MAX_RUN_AT_MS - NOW + 1))
    assert store.get_job(job_id).state == "active"
    store.ack(job_id, "t-1", Retry(MAX_RUN_AT_MS - NOW))
    assert store.get_job(job_id).run_at == MAX_RUN_AT_MS


def _schedule(**overrides):
    fields = {
        "key": "TestJob/far",
        "job_name": "TestJob",
        "every_ms": 60_000,
        "next_run_at": NOW + 60_000,
    }
    fields.update(overrides)
    return ScheduleRecord(**fields)


@pytest.mark.parametrize(
    "overrides",
    [
        {"next_run_at": MAX_RUN_AT_MS + 1},
        {"every_ms": 10**18},
        {"attempts_max": 80, "backoff": BackoffPolicy("exponential", 1000)},
        {"attempts_max": 2, "backoff": BackoffPolicy("fixed", -5)},
    ],
    ids=["next-run", "every", "backoff", "negative-backoff"],
)
def test_schedule_past_the_bound_is_refused(store, redis_client, prefix, before, overrides):
    with pytest.raises(InvalidRequestError):
        store.upsert_schedule(_schedule(**overrides))
    assert store_keys(redis_client, prefix) == before
    assert store.list_schedules() == []


def test_computed_next_runs_stop_at_the_bound():
    last_slot = MAX_RUN_AT_MS - 30_000
    assert next_occurrence(_schedule(), last_slot, last_slot) is None
    assert next_occurrence(_schedule(), last_slot - 60_000, last_slot - 60_000) == last_slot
    # The last minute of year 9999 matches; nothing after it does (and no crash).
    assert next_cron("59 23 31 12 *", None, MAX_RUN_AT_MS - 120_000) == MAX_RUN_AT_MS - 59_999
    assert next_cron("* * * * *", None, MAX_RUN_AT_MS - 30_000) is None
    assert next_cron("* * * * *", None, 10**18) is None
