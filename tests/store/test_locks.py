"""LCK cases (conformance-cases.md §6) and lock/stall invariants 23-26, 31 (store-contract.md)."""

from __future__ import annotations

import pytest

from store import (
    MISSING,
    AttemptRecord,
    Complete,
    Empty,
    ExtendLocksResult,
    JobNotFoundError,
    LockLostError,
    Retry,
    StalledJob,
)
from tests.store.helpers import (
    claim,
    claim_id,
    claim_job,
    counts_of,
    outcomes,
    recovered,
    req,
)

STALL_REASON = "job stalled more than allowable limit"


def test_lck_01_release_returns_to_waiting_without_consuming_an_attempt(store):
    result = store.enqueue(req())
    claim_id(store, result.id)
    store.release(result.id, "t-1")
    job = store.get_job(result.id)
    assert job.state == "waiting"
    assert job.attempts_made == 0
    assert store.get_attempts(result.id) == []
    assert store.counts() == counts_of(waiting=1)


def test_lck_02_extend_locks_extends_live_locks_and_reports_lost_ones(store, clock):
    result = store.enqueue(req())
    claim_id(store, result.id, lock_duration_ms=10000)
    extended = store.extend_locks([(result.id, "t-1"), ("ghost", "t-9")], 20000)
    assert extended.lost == ["ghost"]
    assert extended.cancel_requested == []
    clock.advance(15000)
    assert store.recover_stalled(max_stalled_count=1) == []
    assert store.get_job(result.id).state == "active"


def test_lck_03_recover_stalled_requeues_then_fails_repeat_offenders(store, clock):
    result = store.enqueue(req())
    claim_id(store, result.id, lock_duration_ms=1000)
    clock.advance(1000)  # expiry is inclusive: expired when expires_at <= now
    assert recovered(store, 1) == [(result.id, False)]
    assert store.get_job(result.id).state == "waiting"
    claim_id(store, result.id, token="t-2", lock_duration_ms=1000)
    clock.advance(1000)
    assert recovered(store, 1) == [(result.id, True)]
    job = store.get_job(result.id)
    assert job.state == "failed"
    assert job.failed_reason
    ledger = store.get_attempts(result.id)
    assert [e.outcome for e in ledger] == ["stalled", "stalled"]
    assert [e.attempt for e in ledger] == [1, 2]
    with pytest.raises(LockLostError):
        store.ack(result.id, "t-2", Complete(None))


def test_recover_stalled_rows_are_stalled_job_records(store, clock):
    result = store.enqueue(req())
    claim_id(store, result.id, lock_duration_ms=1000)
    clock.advance(1000)
    rows = store.recover_stalled(max_stalled_count=1)
    assert rows == [StalledJob(id=result.id, failed=False)]
    assert rows[0].id == result.id and rows[0].failed is False


def test_stalled_job_compares_equal_to_a_dict(store, clock):
    """The brief / LCK-03: rows compare equal to ``{"id": ..., "failed": ...}``."""
    result = store.enqueue(req())
    claim_id(store, result.id, lock_duration_ms=1000)
    clock.advance(1000)
    rows = store.recover_stalled(max_stalled_count=1)
    assert rows == [{"id": result.id, "failed": False}]
    assert rows[0] != {"id": result.id, "failed": True}
    assert rows[0]["id"] == result.id


# ---------------------------------------------------------------- stall details


def test_lock_expiry_boundary(store, clock):
    result = store.enqueue(req())
    claim_id(store, result.id, lock_duration_ms=1000)
    clock.set(999)
    assert store.recover_stalled(max_stalled_count=1) == []
    clock.set(1000)
    assert recovered(store, 1) == [(result.id, False)]


def test_stall_requeue_details(store, clock):
    result = store.enqueue(req(attempts_max=3))
    clock.set(10)
    claim_id(store, result.id, lock_duration_ms=1000)
    clock.set(1500)
    store.recover_stalled(max_stalled_count=1)
    job = store.get_job(result.id)
    assert job.state == "waiting"
    assert job.stalled_count == 1
    assert job.attempts_made == 0  # stalls do not consume the retry budget
    assert job.run_at == 0  # run_at unchanged by a stall requeue
    assert job.processed_at == 10
    assert job.finished_at is None
    assert store.get_attempts(result.id) == [
        AttemptRecord(attempt=1, started_at=10, finished_at=1500, outcome="stalled")
    ]
    assert store.get_attempts(result.id)[0].exit is MISSING
    assert store.counts() == counts_of(waiting=1)
    with pytest.raises(LockLostError):
        store.ack(result.id, "t-1", Complete(None))


def test_stall_requeue_keeps_fifo_position(store, clock):
    first = store.enqueue(req(payload={"n": 1}))
    second = store.enqueue(req(payload={"n": 2}))
    claim_id(store, first.id, lock_duration_ms=1000)
    clock.advance(1000)
    store.recover_stalled(max_stalled_count=1)
    assert claim_job(store, token="t-2").id == first.id
    assert claim_job(store, token="t-3").id == second.id


def test_inv_26_max_stalled_count_zero_fails_on_first_stall(store, clock):
    result = store.enqueue(req(attempts_max=5))
    claim_id(store, result.id, lock_duration_ms=1000)
    clock.set(2000)
    assert recovered(store, 0) == [(result.id, True)]
    job = store.get_job(result.id)
    assert job.state == "failed"
    assert job.stalled_count == 1


def test_stall_exhaustion_sets_reason_without_exit(store, clock):
    result = store.enqueue(req(attempts_max=5))
    clock.set(100)
    claim_id(store, result.id, lock_duration_ms=1000)
    clock.set(1100)
    store.recover_stalled(max_stalled_count=0)
    job = store.get_job(result.id)
    assert job.state == "failed"
    assert job.failed_reason == STALL_REASON
    assert job.exit is MISSING
    assert job.attempts_made == 0
    assert job.finished_at == 1100
    assert job.cancel_requested is False
    # stall recovery writes the only ledger entry even when it fails the job
    ledger = store.get_attempts(result.id)
    assert ledger == [AttemptRecord(attempt=1, started_at=100, finished_at=1100, outcome="stalled")]
    assert store.counts() == counts_of(failed=1)
    assert isinstance(claim(store, token="t-2"), Empty)


def test_stalled_count_accumulates_across_retry_acks(store, clock):
    result = store.enqueue(req(attempts_max=5))
    claim_id(store, result.id, lock_duration_ms=1000)
    clock.advance(1000)
    store.recover_stalled(max_stalled_count=2)
    claim_id(store, result.id, token="t-2", lock_duration_ms=1000)
    store.ack(result.id, "t-2", Retry(delay_ms=0, exit=None))
    claim_id(store, result.id, token="t-3", lock_duration_ms=1000)
    clock.advance(1000)
    assert recovered(store, 2) == [(result.id, False)]
    assert store.get_job(result.id).stalled_count == 2
    claim_id(store, result.id, token="t-4", lock_duration_ms=1000)
    clock.advance(1000)
    assert recovered(store, 2) == [(result.id, True)]
    assert store.get_job(result.id).stalled_count == 3


def test_recover_stalled_handles_several_jobs(store, clock):
    ids = [store.enqueue(req(payload={"i": i})).id for i in range(4)]
    claim_id(store, ids[0], token="t-0", lock_duration_ms=1000)
    claim_id(store, ids[1], token="t-1", lock_duration_ms=5000)
    claim_id(store, ids[2], token="t-2", lock_duration_ms=1000)
    clock.set(1000)
    rows = store.recover_stalled(max_stalled_count=1)
    assert sorted((r.id, r.failed) for r in rows) == sorted([(ids[0], False), (ids[2], False)])
    assert store.counts() == counts_of(waiting=3, active=1)


# ---------------------------------------------------------------- pending cancel (31)


def test_inv_31_release_honours_a_pending_cancel(store, clock):
    result = store.enqueue(req())
    clock.set(100)
    claim_id(store, result.id)
    store.cancel(result.id)
    clock.set(200)
    store.release(result.id, "t-1")
    job = store.get_job(result.id)
    assert job.state == "cancelled"
    assert job.cancel_requested is False
    assert job.finished_at == 200
    assert job.attempts_made == 0  # a release-cancel consumes no attempt
    assert store.get_attempts(result.id) == [
        AttemptRecord(attempt=1, started_at=100, finished_at=200, outcome="cancelled")
    ]
    assert store.counts() == counts_of(cancelled=1)
    assert isinstance(claim(store, token="t-2"), Empty)


def test_inv_31_stall_recovery_honours_a_pending_cancel(store, clock):
    result = store.enqueue(req())
    claim_id(store, result.id, lock_duration_ms=1000)
    store.cancel(result.id)
    clock.set(1000)
    assert store.recover_stalled(max_stalled_count=1) == []  # not listed
    job = store.get_job(result.id)
    assert job.state == "cancelled"
    assert job.cancel_requested is False
    assert job.stalled_count == 0
    assert job.attempts_made == 0
    assert job.finished_at == 1000
    assert outcomes(store, result.id) == ["cancelled"]
    assert store.counts() == counts_of(cancelled=1)


def test_cancel_requested_lock_is_not_extended_and_is_reported_every_beat(store, clock):
    result = store.enqueue(req())
    claim_id(store, result.id, lock_duration_ms=10000)
    store.cancel(result.id)
    for _ in range(2):
        beat = store.extend_locks([(result.id, "t-1")], 60000)
        assert beat == ExtendLocksResult(lost=[], cancel_requested=[result.id])
    clock.set(10000)  # the original expiry still applies
    assert store.recover_stalled(max_stalled_count=1) == []
    assert store.get_job(result.id).state == "cancelled"


# ---------------------------------------------------------------- release / extend_locks


def test_release_errors(store):
    result = store.enqueue(req())
    with pytest.raises(JobNotFoundError):
        store.release("nope", "t-1")
    with pytest.raises(LockLostError):
        store.release(result.id, "t-1")  # waiting, not active
    claim_id(store, result.id)
    with pytest.raises(LockLostError):
        store.release(result.id, "t-wrong")
    assert store.get_job(result.id).state == "active"


def test_release_keeps_run_at_and_processed_at(store, clock):
    result = store.enqueue(req())
    clock.set(300)
    claim_id(store, result.id)
    clock.set(400)
    store.release(result.id, "t-1")
    job = store.get_job(result.id)
    assert job.run_at == 0
    assert job.processed_at == 300
    assert job.finished_at is None
    assert job.cancel_requested is False


def test_release_clears_the_lock(store, clock):
    result = store.enqueue(req())
    claim_id(store, result.id, lock_duration_ms=1000)
    store.release(result.id, "t-1")
    clock.advance(5000)
    assert store.recover_stalled(max_stalled_count=1) == []
    assert store.extend_locks([(result.id, "t-1")], 1000).lost == [result.id]


def test_extend_locks_extends_from_now(store, clock):
    result = store.enqueue(req())
    claim_id(store, result.id, lock_duration_ms=10000)
    clock.set(8000)
    assert store.extend_locks([(result.id, "t-1")], 5000) == ExtendLocksResult([], [])
    clock.set(12999)
    assert store.recover_stalled(max_stalled_count=1) == []
    clock.set(13000)
    assert recovered(store, 1) == [(result.id, False)]


def test_extend_locks_revives_an_expired_but_unrecovered_lock(store, clock):
    result = store.enqueue(req())
    claim_id(store, result.id, lock_duration_ms=1000)
    clock.set(2000)
    assert store.extend_locks([(result.id, "t-1")], 5000).lost == []
    assert store.recover_stalled(max_stalled_count=1) == []
    clock.set(7000)
    assert recovered(store, 1) == [(result.id, False)]


def test_extend_locks_reports_in_input_order_and_empty_input(store):
    a = store.enqueue(req(payload={"n": "a"}))
    b = store.enqueue(req(payload={"n": "b"}))
    c = store.enqueue(req(payload={"n": "c"}))
    claim_id(store, a.id, token="t-a")
    claim_id(store, b.id, token="t-b")
    store.cancel(b.id)
    result = store.extend_locks(
        [("zz-ghost", "t"), (a.id, "t-wrong"), (b.id, "t-b"), (c.id, "t-c"), (a.id, "t-a")],
        1000,
    )
    assert result.lost == ["zz-ghost", a.id, c.id]
    assert result.cancel_requested == [b.id]
    assert store.extend_locks([], 1000) == ExtendLocksResult(lost=[], cancel_requested=[])


def test_extend_locks_after_stall_requeue_is_lost(store, clock):
    result = store.enqueue(req())
    claim_id(store, result.id, lock_duration_ms=1000)
    clock.set(1000)
    store.recover_stalled(max_stalled_count=1)
    assert store.extend_locks([(result.id, "t-1")], 1000).lost == [result.id]
    claim_id(store, result.id, token="t-2")
    assert store.extend_locks([(result.id, "t-1")], 1000).lost == [result.id]
    assert store.extend_locks([(result.id, "t-2")], 1000).lost == []
