"""Big values through the store API (issue 23, defect 1): results and errors of 300 KB and
2 MB are stored whole by every ack path, values over ``max_value_bytes`` are refused before
anything is written (enqueue) or fail the attempt with the reason (ack), and the store stays
consistent (the ``mqcheck`` checker finds nothing) after every case."""

from __future__ import annotations

import json
from typing import Any

import pytest

from store import (
    BackoffPolicy,
    Complete,
    DedupePolicy,
    Fail,
    InvalidRequestError,
    JobStoreError,
    RedisJobStore,
    Retry,
    ValueTooLargeError,
)
from store.layout import migrate
from store.limits import DEFAULT_MAX_VALUE_BYTES
from tests.faults.helpers import SIZES, assert_consistent, error_exit, keyspace
from tests.store.helpers import claim_id, counts_of, req
from tests.store.test_layout import to_layout_1

ACKS = ("ack", "ack_and_claim", "ack_and_claim_many")
#: A small limit for the over-the-limit cases (quick to fill).
LIMIT = 100_000


def ack_with(store: RedisJobStore, how: str, job_id: str, token: str, outcome: Any) -> None:
    """Ack through one of the store's three ack paths (ack, ack_claim, ack_claim_many)."""
    if how == "ack":
        store.ack(job_id, token, outcome)
    elif how == "ack_and_claim":
        store.ack_and_claim(
            job_id, token, outcome, queue="default", names=["TestJob"], next_token="t-next"
        )
    else:
        batch = store.ack_and_claim_many(
            [(job_id, token, outcome)], queue="default", names=["TestJob"], tokens=["t-next"]
        )
        assert batch.ack_errors == [None]


def run_once(store: RedisJobStore, how: str, outcome: Any, **request: Any) -> str:
    job_id = store.enqueue(req(**request)).id
    claim_id(store, job_id, token="t-1")
    ack_with(store, how, job_id, "t-1", outcome)
    return job_id


# ---------------------------------------------------------------- stored whole


@pytest.mark.parametrize("how", ACKS)
@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
def test_a_large_result_is_stored_whole(store, how, size):
    value = {"blob": "r" * size}
    job_id = run_once(store, how, Complete(value))
    job = store.get_job(job_id)
    assert job.state == "completed"
    assert job.exit == value
    assert [(a.outcome, a.exit) for a in store.get_attempts(job_id)] == [("completed", value)]
    assert store.counts() == counts_of(completed=1)
    assert_consistent(store)


@pytest.mark.parametrize("how", ACKS)
@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
def test_a_large_error_is_stored_whole(store, how, size):
    exit_doc = error_exit(size)
    job_id = run_once(store, how, Fail(exit_doc))
    job = store.get_job(job_id)
    assert job.state == "failed"
    assert job.exit == exit_doc
    assert store.counts() == counts_of(failed=1)
    assert_consistent(store)


@pytest.mark.parametrize("how", ACKS)
def test_a_large_retry_exit_is_kept_in_the_ledger(store, how):
    exit_doc = error_exit(SIZES["300KB"])
    job_id = run_once(store, how, Retry(0, exit_doc), attempts_max=2)
    if how == "ack":
        assert store.get_job(job_id).state == "waiting"
    assert [(a.outcome, a.exit) for a in store.get_attempts(job_id)] == [("retried", exit_doc)]
    assert_consistent(store)


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
def test_large_payload_metadata_and_dedupe_key_are_stored_whole_and_run(store, size):
    payload = {"p": "p" * size}
    metadata = {"tenant": "m" * size}
    key = "k" * size
    job_id = store.enqueue(req(payload=payload, metadata=metadata, dedupe=DedupePolicy(key=key))).id
    job = store.get_job(job_id)
    assert (job.payload, job.metadata, job.dedupe_key) == (payload, metadata, key)
    # The key holds while the job is pending.
    assert store.enqueue(req(dedupe=DedupePolicy(key=key))).duplicate
    claim_id(store, job_id, token="t-1")
    store.ack(job_id, "t-1", Complete(None))
    assert store.counts() == counts_of(completed=1)
    # Completion released the key.
    again = store.enqueue(req(dedupe=DedupePolicy(key=key)))
    assert not again.duplicate and again.id != job_id
    assert_consistent(store)


def test_a_dedupe_replace_writes_a_large_payload_whole(store):
    key = DedupePolicy(key="k", replace=True)
    job_id = store.enqueue(req(delay_ms=60_000, dedupe=key)).id
    payload = {"p": "p" * SIZES["300KB"]}
    metadata = {"tenant": "m" * SIZES["300KB"]}
    result = store.enqueue(req(payload=payload, metadata=metadata, delay_ms=60_000, dedupe=key))
    assert result.id == job_id and result.duplicate
    job = store.get_job(job_id)
    assert (job.payload, job.metadata) == (payload, metadata)
    assert store.counts() == counts_of(delayed=1)
    assert_consistent(store)


def test_migrate_rewrites_a_large_layout_1_value_whole(make_store, redis_client, prefix):
    writer = make_store()
    payload = {"p": "p" * SIZES["300KB"]}
    job_id = writer.enqueue(req(payload=payload)).id
    to_layout_1(redis_client, writer)
    assert len(redis_client.hget(writer.keys.job(job_id), "payload")) > 300_000
    assert migrate(redis_client, prefix).rewritten == 1
    assert make_store().get_job(job_id).payload == payload


# ---------------------------------------------------------------- a retry after a big value


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
def test_retrying_a_job_that_failed_with_a_large_error_keeps_the_counters_exact(store, size):
    job_id = run_once(store, "ack", Fail(error_exit(size)))
    assert store.counts() == counts_of(failed=1)
    store.retry(job_id)
    assert store.counts() == counts_of(waiting=1)
    claim_id(store, job_id, token="t-2")
    store.ack(job_id, "t-2", Complete({"blob": "r" * size}))
    assert store.counts() == counts_of(completed=1)
    assert_consistent(store)


def test_retrying_a_job_whose_result_was_over_the_limit_keeps_the_counters_exact(make_store):
    store = make_store(max_value_bytes=LIMIT)
    job_id = run_once(store, "ack", Complete("r" * (LIMIT + 1)))
    assert store.counts() == counts_of(failed=1)
    store.retry(job_id)
    assert store.counts() == counts_of(waiting=1)
    claim_id(store, job_id, token="t-2")
    store.ack(job_id, "t-2", Complete("fits"))
    assert store.counts() == counts_of(completed=1)
    assert store.get_job(job_id).exit == "fits"
    assert_consistent(store)


# ---------------------------------------------------------------- results and errors over the limit


def assert_reason(exit_doc: Any, what: str, size: int, limit: int) -> None:
    error = exit_doc["error"]
    assert error["type"] == "ValueTooLargeError"
    assert error["message"] == ValueTooLargeError(what, size, limit).message
    assert error["message"].startswith(f"{what} of ")
    assert "exceeds max_value_bytes" in error["message"]


@pytest.mark.parametrize("how", ACKS)
def test_a_result_over_the_limit_fails_the_attempt_with_the_reason(make_store, how):
    store = make_store(max_value_bytes=LIMIT)
    value = "r" * LIMIT  # its JSON text has 2 bytes more (the quotes)
    job_id = run_once(store, how, Complete(value))
    job = store.get_job(job_id)
    assert job.state == "failed"
    assert_reason(job.exit, "result", LIMIT + 2, LIMIT)
    assert job.exit["error"]["message"] == (
        "result of 97.7 KiB (100002 bytes) exceeds max_value_bytes 97.7 KiB (100000 bytes)"
    )
    assert [a.outcome for a in store.get_attempts(job_id)] == ["failed"]
    assert job.attempts_made == 1
    assert store.counts() == counts_of(failed=1)
    assert_consistent(store)


def test_a_result_over_the_default_limit_fails_the_attempt(store):
    assert store.max_value_bytes == DEFAULT_MAX_VALUE_BYTES == 4 * 1024 * 1024
    size = DEFAULT_MAX_VALUE_BYTES + 1
    job_id = run_once(store, "ack", Complete("é" * (size // 2)))
    job = store.get_job(job_id)
    assert job.state == "failed"
    assert_reason(job.exit, "result", (size // 2) * 2 + 2, DEFAULT_MAX_VALUE_BYTES)
    assert "4 MiB (4194304 bytes)" in job.exit["error"]["message"]
    assert store.counts() == counts_of(failed=1)
    assert_consistent(store)


@pytest.mark.parametrize("how", ACKS)
def test_a_result_over_the_limit_is_retried_under_the_jobs_policy(make_store, clock, how):
    store = make_store(max_value_bytes=LIMIT)
    job_id = run_once(
        store,
        how,
        Complete({"blob": "r" * LIMIT}),
        attempts_max=3,
        backoff=BackoffPolicy("exponential", 5_000),
    )
    job = store.get_job(job_id)
    assert job.state == "delayed"
    assert job.run_at == clock() + 5_000
    ledger = store.get_attempts(job_id)
    assert [a.outcome for a in ledger] == ["retried"]
    assert "exceeds max_value_bytes" in ledger[0].exit["error"]["message"]
    assert store.counts() == counts_of(delayed=1)
    assert_consistent(store)
    clock.set(clock() + 5_000)
    claim_id(store, job_id, token="t-2")
    store.ack(job_id, "t-2", Complete("fits"))
    assert [a.outcome for a in store.get_attempts(job_id)] == ["retried", "completed"]
    assert store.counts() == counts_of(completed=1)
    assert_consistent(store)


@pytest.mark.parametrize("how", ACKS)
def test_an_error_over_the_limit_is_cut_to_fit_and_says_why(make_store, how):
    store = make_store(max_value_bytes=LIMIT)
    exit_doc = error_exit(LIMIT, traceback_chars=LIMIT)
    size = len(json.dumps(exit_doc, separators=(",", ":")))
    job_id = run_once(store, how, Fail(exit_doc))
    job = store.get_job(job_id)
    assert job.state == "failed"
    error = job.exit["error"]
    reason = ValueTooLargeError("error", size, LIMIT).message
    assert (error["type"], error["module"], error["kind"]) == ("BoomError", "app.jobs", "error")
    assert error["message"] == "m" * 1000 + f"… [cut: {reason}]"
    assert error["cut"] == reason
    assert error["traceback"] == "t" * 4000 + "…" + "t" * 4000
    assert len(json.dumps(job.exit)) <= LIMIT
    assert store.counts() == counts_of(failed=1)
    assert_consistent(store)


def test_a_retry_with_an_error_over_the_limit_stays_a_retry(make_store):
    store = make_store(max_value_bytes=LIMIT)
    job_id = run_once(store, "ack", Retry(0, "x" * LIMIT), attempts_max=2)
    assert store.get_job(job_id).state == "waiting"
    (entry,) = store.get_attempts(job_id)
    assert entry.outcome == "retried"
    assert_reason(entry.exit, "error", LIMIT + 2, LIMIT)
    assert store.counts() == counts_of(waiting=1)
    assert_consistent(store)


# ---------------------------------------------------------------- enqueue refusals


OVERSIZED = {
    "payload": lambda n, **kw: req(payload="p" * n, **kw),
    "metadata": lambda n, **kw: req(metadata={"tenant": "m" * n}, **kw),
    "dedupe key": lambda n, **kw: req(dedupe=DedupePolicy(key="k" * n), **kw),
}


@pytest.fixture
def limited(make_store) -> RedisJobStore:
    """A store with the small limit that already holds a job (the id counter exists)."""
    store = make_store(max_value_bytes=LIMIT)
    store.enqueue(req())
    return store


@pytest.mark.parametrize("what", OVERSIZED)
@pytest.mark.parametrize("explicit_id", [False, True], ids=["auto-id", "explicit-id"])
def test_an_oversized_value_is_refused_with_nothing_written(
    limited, redis_client, prefix, what, explicit_id
):
    request = OVERSIZED[what](LIMIT + 1, **({"id": "mine"} if explicit_id else {}))
    before = keyspace(redis_client, prefix)
    seq = redis_client.get(limited.keys.seq)
    with pytest.raises(ValueTooLargeError) as info:
        limited.enqueue(request)
    assert info.value.what == what and info.value.limit == LIMIT
    assert info.value.size > LIMIT
    assert str(info.value).startswith(f"{what} of ")
    assert f"exceeds max_value_bytes 97.7 KiB ({LIMIT} bytes)" in str(info.value)
    assert isinstance(info.value, JobStoreError)
    assert keyspace(redis_client, prefix) == before
    assert redis_client.get(limited.keys.seq) == seq
    assert limited.counts() == counts_of(waiting=1)


@pytest.mark.parametrize("what", OVERSIZED)
def test_enqueue_many_refuses_the_whole_batch_with_nothing_written(
    limited, redis_client, prefix, what
):
    batch = [
        req(payload={"n": 1}),
        req(payload={"n": 2}, dedupe=DedupePolicy(key="fine")),
        req(payload={"n": 3}),
        OVERSIZED[what](LIMIT + 1),
        req(payload={"n": 4}),
    ]
    before = keyspace(redis_client, prefix)
    with pytest.raises(ValueTooLargeError, match=f"^{what} of "):
        limited.enqueue_many(batch)
    assert keyspace(redis_client, prefix) == before
    assert limited.counts() == counts_of(waiting=1)


def test_a_value_of_exactly_the_limit_is_taken_and_one_byte_more_is_not(limited):
    # JSON text of a string: the characters and two quotes; "é" is 2 bytes in UTF-8.
    fits = "é" * ((LIMIT - 2) // 2)
    assert limited.get_job(limited.enqueue(req(payload=fits)).id).payload == fits
    with pytest.raises(ValueTooLargeError) as info:
        limited.enqueue(req(payload=fits + "x"))
    assert info.value.size == LIMIT + 1


def test_a_payload_over_the_default_limit_is_refused(store, redis_client, prefix):
    before = keyspace(redis_client, prefix)
    with pytest.raises(ValueTooLargeError, match=r"payload of 5 MiB \(5242882 bytes\)"):
        store.enqueue(req(payload="p" * (5 * 1024 * 1024)))
    assert keyspace(redis_client, prefix) == before


def test_validate_request_refuses_what_enqueue_would(limited, redis_client, prefix):
    before = keyspace(redis_client, prefix)
    with pytest.raises(ValueTooLargeError):
        limited.validate_request(req(payload="p" * LIMIT))
    limited.validate_request(req(payload="p" * (LIMIT - 2)))
    assert keyspace(redis_client, prefix) == before


@pytest.mark.parametrize("value", [0, 1023, 512 * 1024 * 1024 + 1, True, 2.5, "4MB"])
def test_max_value_bytes_outside_its_range_is_refused(make_store, value):
    with pytest.raises(InvalidRequestError, match="max_value_bytes"):
        make_store(max_value_bytes=value)
