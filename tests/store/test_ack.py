"""ACK cases (conformance-cases.md §5), ack invariants 19-22, 30-34 and 103 (store-contract.md)."""

from __future__ import annotations

import pytest

from store import (
    MISSING,
    AttemptRecord,
    Cancelled,
    Complete,
    Empty,
    Fail,
    JobNotFoundError,
    LockLostError,
    Retry,
)
from tests.store.helpers import (
    claim,
    claim_id,
    claim_job,
    counts_of,
    finish,
    outcomes,
    req,
)


def test_ack_01_complete_stores_exit_and_records_the_run(store, clock):
    result = store.enqueue(req())
    claim_id(store, result.id)
    store.ack(result.id, "t-1", Complete({"ok": True}))
    job = store.get_job(result.id)
    assert job.state == "completed"
    assert job.exit == {"ok": True}
    assert job.attempts_made == 1
    assert job.finished_at is not None
    ledger = store.get_attempts(result.id)
    assert len(ledger) == 1
    entry = ledger[0]
    assert entry.attempt == 1
    assert entry.outcome == "completed"
    assert entry.exit == {"ok": True}
    assert entry.started_at is not None
    assert entry.finished_at is not None


def test_ack_02_retry_requeues_with_delay_and_records_the_failed_run(store, clock):
    result = store.enqueue(req(attempts_max=3))
    claim_id(store, result.id)
    store.ack(result.id, "t-1", Retry(delay_ms=1000, exit={"boom": 1}))
    job = store.get_job(result.id)
    assert job.state == "delayed"
    assert job.attempts_made == 1
    ledger = store.get_attempts(result.id)
    assert [(e.attempt, e.outcome, e.exit) for e in ledger] == [(1, "retried", {"boom": 1})]
    assert isinstance(claim(store, token="t-2"), Empty)
    clock.advance(1000)
    again = claim_job(store, token="t-3")
    assert again.id == result.id
    assert again.attempts_made == 1


def test_ack_03_fail_is_terminal_and_records_the_run(store):
    result = store.enqueue(req())
    claim_id(store, result.id)
    store.ack(result.id, "t-1", Fail({"failed": True}))
    job = store.get_job(result.id)
    assert job.state == "failed"
    assert job.exit == {"failed": True}
    ledger = store.get_attempts(result.id)
    assert len(ledger) == 1
    assert ledger[0].outcome == "failed"
    assert ledger[0].exit == {"failed": True}
    assert isinstance(claim(store, token="t-2"), Empty)


def test_ack_05_ack_of_unknown_id_fails(store):
    with pytest.raises(JobNotFoundError) as info:
        store.ack("nope", "t-1", Complete(None))
    assert info.value.job_id == "nope"


def test_ack_06_completion_wins_over_a_pending_cancel(store):
    result = store.enqueue(req())
    claim_id(store, result.id)
    store.cancel(result.id)
    assert store.get_job(result.id).cancel_requested is True
    store.ack(result.id, "t-1", Complete({"ok": True}))
    job = store.get_job(result.id)
    assert job.state == "completed"
    assert job.cancel_requested is False
    assert job.exit == {"ok": True}


def test_ack_09_get_attempts_of_unknown_id_is_empty(store):
    assert store.get_attempts("nope") == []


# ---------------------------------------------------------------- invariants


def test_inv_22_wrong_token_is_lock_lost_and_job_stays_active(store):
    result = store.enqueue(req())
    claim_id(store, result.id)
    for outcome in (Complete(None), Fail(None), Retry(0, None), Cancelled()):
        with pytest.raises(LockLostError) as info:
            store.ack(result.id, "t-wrong", outcome)
        assert info.value.job_id == result.id
    job = store.get_job(result.id)
    assert job.state == "active"
    assert job.attempts_made == 0
    assert store.get_attempts(result.id) == []
    store.ack(result.id, "t-1", Complete(None))


def test_second_ack_after_completion_is_lock_lost(store):
    result = store.enqueue(req())
    finish(store, result.id, Complete({"ok": 1}), token="t-1")
    with pytest.raises(LockLostError):
        store.ack(result.id, "t-1", Complete({"ok": 2}))
    assert store.get_job(result.id).exit == {"ok": 1}
    assert len(store.get_attempts(result.id)) == 1


def test_ack_of_a_waiting_job_is_lock_lost(store):
    result = store.enqueue(req())
    with pytest.raises(LockLostError):
        store.ack(result.id, "t-1", Complete(None))
    assert store.get_job(result.id).state == "waiting"


def test_expired_but_unrecovered_lock_still_acks(store, clock):
    """§4.4 step 2: lock expiry alone is not checked by ack."""
    result = store.enqueue(req())
    claim_id(store, result.id, lock_duration_ms=1000)
    clock.advance(5000)
    store.ack(result.id, "t-1", Complete("late"))
    job = store.get_job(result.id)
    assert job.state == "completed"
    assert job.exit == "late"


def test_inv_30_cancel_active_then_heartbeat_then_cancelled_ack(store, clock):
    result = store.enqueue(req())
    clock.set(100)
    claim_id(store, result.id)
    store.cancel(result.id)
    job = store.get_job(result.id)
    assert job.state == "active" and job.cancel_requested is True
    beat = store.extend_locks([(result.id, "t-1")], 30000)
    assert beat.cancel_requested == [result.id]
    assert beat.lost == []
    clock.set(300)
    store.ack(result.id, "t-1", Cancelled())
    job = store.get_job(result.id)
    assert job.state == "cancelled"
    assert job.cancel_requested is False
    assert job.finished_at == 300
    assert job.exit is MISSING
    # a Cancelled ack consumes an attempt (§4.4 step 4), unlike release/stall cancels
    assert job.attempts_made == 1
    assert store.get_attempts(result.id) == [
        AttemptRecord(attempt=1, started_at=100, finished_at=300, outcome="cancelled")
    ]
    assert store.get_attempts(result.id)[0].exit is MISSING
    assert store.counts() == counts_of(cancelled=1)


def test_cancelled_ack_without_cancel_request(store):
    result = store.enqueue(req())
    finish(store, result.id, Cancelled())
    job = store.get_job(result.id)
    assert job.state == "cancelled"
    assert job.attempts_made == 1
    assert outcomes(store, result.id) == ["cancelled"]


def test_inv_32_fail_also_wins_over_a_pending_cancel(store):
    result = store.enqueue(req())
    claim_id(store, result.id)
    store.cancel(result.id)
    store.ack(result.id, "t-1", Fail({"e": 1}))
    job = store.get_job(result.id)
    assert job.state == "failed"
    assert job.cancel_requested is False
    assert outcomes(store, result.id) == ["failed"]


@pytest.mark.parametrize("delay", [0, 1000])
def test_inv_33_retry_ack_on_cancel_requested_job_ends_cancelled(store, clock, delay):
    result = store.enqueue(req(attempts_max=3))
    claim_id(store, result.id)
    store.cancel(result.id)
    clock.set(50)
    store.ack(result.id, "t-1", Retry(delay_ms=delay, exit={"boom": 1}))
    job = store.get_job(result.id)
    assert job.state == "cancelled"
    assert job.cancel_requested is False
    assert job.finished_at == 50
    assert job.exit is MISSING
    assert job.attempts_made == 1
    ledger = store.get_attempts(result.id)
    assert [e.outcome for e in ledger] == ["cancelled"]
    assert ledger[0].exit is MISSING
    clock.advance(5000)
    assert isinstance(claim(store, token="t-2"), Empty)
    assert store.counts() == counts_of(cancelled=1)


def test_inv_34_cancelled_ack_with_wrong_token_keeps_job_active_and_flagged(store):
    result = store.enqueue(req())
    claim_id(store, result.id)
    store.cancel(result.id)
    with pytest.raises(LockLostError):
        store.ack(result.id, "t-other", Cancelled())
    job = store.get_job(result.id)
    assert job.state == "active"
    assert job.cancel_requested is True
    assert store.get_attempts(result.id) == []


def test_retry_ack_does_not_store_the_exit_on_the_record(store):
    result = store.enqueue(req(attempts_max=2))
    claim_id(store, result.id)
    store.ack(result.id, "t-1", Retry(delay_ms=0, exit={"boom": 1}))
    job = store.get_job(result.id)
    assert job.state == "waiting"
    assert job.exit is MISSING
    assert job.finished_at is None


@pytest.mark.parametrize("delay", [0, -1000])
def test_retry_with_non_positive_delay_is_waiting_now(store, clock, delay):
    result = store.enqueue(req(attempts_max=2))
    claim_id(store, result.id)
    clock.set(777)
    store.ack(result.id, "t-1", Retry(delay_ms=delay, exit=None))
    job = store.get_job(result.id)
    assert job.state == "waiting"
    assert job.run_at == 777
    assert store.counts() == counts_of(waiting=1)


def test_complete_none_exit_is_json_null_not_missing(store):
    null_exit = store.enqueue(req(payload={"n": "null"}))
    no_exit = store.enqueue(req(payload={"n": "missing"}))
    finish(store, null_exit.id, Complete(None), token="t-a")
    finish(store, no_exit.id, Complete(), token="t-b")
    assert store.get_job(null_exit.id).exit is None
    assert store.get_attempts(null_exit.id)[0].exit is None
    assert store.get_job(no_exit.id).exit is MISSING
    assert store.get_attempts(no_exit.id)[0].exit is MISSING


def test_fail_none_exit_is_json_null(store):
    result = store.enqueue(req())
    finish(store, result.id, Fail(None))
    assert store.get_job(result.id).exit is None
    assert store.get_attempts(result.id)[0].exit is None


def test_retry_exit_none_on_ledger_is_null_and_missing_is_missing(store):
    result = store.enqueue(req(attempts_max=3))
    claim_id(store, result.id, token="t-1")
    store.ack(result.id, "t-1", Retry(delay_ms=0, exit=None))
    claim_id(store, result.id, token="t-2")
    store.ack(result.id, "t-2", Retry(delay_ms=0))
    ledger = store.get_attempts(result.id)
    assert [e.attempt for e in ledger] == [1, 2]
    assert ledger[0].exit is None
    assert ledger[1].exit is MISSING


def test_ledger_started_at_is_claim_time_and_attempts_are_monotonic(store, clock):
    result = store.enqueue(req(attempts_max=3))
    clock.set(100)
    claim_id(store, result.id, token="t-1")
    clock.set(150)
    store.ack(result.id, "t-1", Retry(delay_ms=10, exit={"a": 1}))
    clock.set(400)
    claim_id(store, result.id, token="t-2")
    clock.set(450)
    store.ack(result.id, "t-2", Retry(delay_ms=0, exit={"a": 2}))
    clock.set(500)
    claim_id(store, result.id, token="t-3")
    clock.set(900)
    store.ack(result.id, "t-3", Complete({"a": 3}))
    assert store.get_attempts(result.id) == [
        AttemptRecord(1, 100, 150, "retried", {"a": 1}),
        AttemptRecord(2, 400, 450, "retried", {"a": 2}),
        AttemptRecord(3, 500, 900, "completed", {"a": 3}),
    ]
    job = store.get_job(result.id)
    assert job.attempts_made == 3
    assert job.processed_at == 500
    assert job.finished_at == 900


def test_ack_clears_the_lock(store, clock):
    result = store.enqueue(req())
    claim_id(store, result.id, lock_duration_ms=1000)
    store.ack(result.id, "t-1", Complete(None))
    clock.advance(5000)
    assert store.recover_stalled(max_stalled_count=1) == []
    assert store.extend_locks([(result.id, "t-1")], 1000).lost == [result.id]


def test_inv_103_every_timestamp_follows_the_fake_clock(store, clock):
    clock.set(1000)
    a = store.enqueue(req(attempts_max=2, delay_ms=500))
    job = store.get_job(a.id)
    assert (job.enqueued_at, job.run_at, job.processed_at, job.finished_at) == (
        1000,
        1500,
        None,
        None,
    )
    clock.set(2500)
    claimed = claim_id(store, a.id)
    assert claimed.processed_at == 2500
    assert claimed.run_at == 1500
    clock.set(3000)
    store.ack(a.id, "t-1", Retry(delay_ms=250, exit=None))
    job = store.get_job(a.id)
    assert job.run_at == 3250
    assert job.processed_at == 2500
    clock.set(4000)
    store.promote(a.id)
    assert store.get_job(a.id).run_at == 4000
    clock.set(4100)
    claim_id(store, a.id, token="t-2")
    clock.set(4600)
    store.ack(a.id, "t-2", Fail(None))
    job = store.get_job(a.id)
    assert job.finished_at == 4600
    clock.set(5000)
    store.retry(a.id)
    job = store.get_job(a.id)
    assert job.run_at == 5000
    assert job.finished_at is None and job.processed_at is None
    clock.set(6000)
    store.cancel(a.id)
    job = store.get_job(a.id)
    assert job.finished_at == 6000
    assert job.enqueued_at == 1000
    assert [(e.started_at, e.finished_at) for e in store.get_attempts(a.id)] == [
        (2500, 3000),
        (4100, 4600),
        (None, 6000),
    ]
