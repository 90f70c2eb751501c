"""ADM cases (conformance-cases.md §7) and admin invariants 27-29, 35-37 (store-contract.md)."""

from __future__ import annotations

import pytest

from store import (
    MISSING,
    AttemptRecord,
    Complete,
    Empty,
    Fail,
    JobNotCancellableError,
    JobNotFoundError,
    JobNotPromotableError,
    JobNotRetryableError,
    Retry,
    StoreFailure,
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


def test_adm_03_retry_reruns_a_failed_job_with_fresh_budget_and_kept_ledger(store):
    result = store.enqueue(req(attempts_max=1))
    claim_id(store, result.id)
    store.ack(result.id, "t-1", Fail({"failed": 1}))
    store.retry(result.id)
    job = store.get_job(result.id)
    assert job.state == "waiting"
    assert job.attempts_made == 0
    assert job.exit is MISSING
    assert job.failed_reason is None
    claim_id(store, result.id, token="t-2")
    store.ack(result.id, "t-2", Complete({"ok": 1}))
    ledger = store.get_attempts(result.id)
    assert [(e.attempt, e.outcome) for e in ledger] == [(1, "failed"), (2, "completed")]


def test_adm_04_retry_rejects_non_failed_jobs_and_unknown_ids(store):
    result = store.enqueue(req())
    with pytest.raises(JobNotRetryableError) as info:
        store.retry(result.id)
    assert info.value.job_id == result.id
    assert info.value.state == "waiting"
    with pytest.raises(JobNotFoundError):
        store.retry("nope")
    assert store.get_job(result.id).state == "waiting"


def test_adm_05_promote_runs_a_delayed_job_now_and_rejects_other_states(store):
    result = store.enqueue(req(delay_ms=60000))
    assert isinstance(claim(store), Empty)
    store.promote(result.id)
    assert claim_job(store, token="t-2").id == result.id
    with pytest.raises(JobNotPromotableError) as info:
        store.promote(result.id)
    assert info.value.state == "active"
    assert info.value.job_id == result.id
    with pytest.raises(JobNotFoundError):
        store.promote("nope")


def test_adm_06_remove_deletes_non_active_jobs_but_refuses_active_ones(store):
    first = store.enqueue(req(payload={"n": 1}))
    second = store.enqueue(req(payload={"n": 2}))
    assert claim_job(store).id == first.id
    assert store.remove(second.id) is True
    assert store.remove(first.id) is False
    assert store.remove("ghost") is False
    assert store.counts()["waiting"] == 0
    assert store.counts() == counts_of(active=1)
    assert store.get_job(second.id) is None
    assert store.get_job(first.id).state == "active"


# ---------------------------------------------------------------- retry (27-28)


def test_retry_resets_every_budget_field(store, clock):
    result = store.enqueue(req(attempts_max=1))
    claim_id(store, result.id, lock_duration_ms=1000)
    clock.set(1000)
    store.recover_stalled(max_stalled_count=0)
    failed = store.get_job(result.id)
    assert failed.failed_reason == "job stalled more than allowable limit"
    assert failed.stalled_count == 1
    clock.set(5000)
    store.retry(result.id)
    job = store.get_job(result.id)
    assert job.state == "waiting"
    assert job.attempts_made == 0
    assert job.stalled_count == 0
    assert job.cancel_requested is False
    assert job.exit is MISSING
    assert job.failed_reason is None
    assert job.finished_at is None
    assert job.processed_at is None
    assert job.run_at == 5000
    assert store.counts() == counts_of(waiting=1)
    # the ledger is kept and keeps numbering
    claim_id(store, result.id, token="t-2")
    store.ack(result.id, "t-2", Complete(None))
    assert [(e.attempt, e.outcome) for e in store.get_attempts(result.id)] == [
        (1, "stalled"),
        (2, "completed"),
    ]


def test_retry_after_several_attempts_continues_numbering(store):
    result = store.enqueue(req(attempts_max=3))
    for n in range(1, 3):
        claim_id(store, result.id, token=f"t-{n}")
        store.ack(result.id, f"t-{n}", Retry(delay_ms=0, exit={"n": n}))
    claim_id(store, result.id, token="t-3")
    store.ack(result.id, "t-3", Fail({"n": 3}))
    assert store.get_job(result.id).attempts_made == 3
    store.retry(result.id)
    claim_id(store, result.id, token="t-4")
    store.ack(result.id, "t-4", Complete(None))
    ledger = store.get_attempts(result.id)
    assert [e.attempt for e in ledger] == [1, 2, 3, 4]
    assert store.get_job(result.id).attempts_made == 1


def test_retry_puts_the_job_at_the_back_of_the_line(store):
    failed = store.enqueue(req(payload={"n": "failed"}))
    finish(store, failed.id, Fail(None))
    waiting = store.enqueue(req(payload={"n": "waiting"}))
    store.retry(failed.id)
    assert claim_job(store, token="t-a").id == waiting.id
    assert claim_job(store, token="t-b").id == failed.id


@pytest.mark.parametrize("state", ["delayed", "active", "completed", "cancelled"])
def test_retry_rejects_every_non_failed_state(store, state):
    result = store.enqueue(req(delay_ms=60000 if state == "delayed" else 0))
    if state in ("active", "completed"):
        claim_id(store, result.id)
        if state == "completed":
            store.ack(result.id, "t-1", Complete(None))
    if state == "cancelled":
        store.cancel(result.id)
    with pytest.raises(JobNotRetryableError) as info:
        store.retry(result.id)
    assert info.value.state == state
    assert isinstance(info.value, StoreFailure)


# ---------------------------------------------------------------- cancel (29-30)


@pytest.mark.parametrize("delay", [0, 60000])
def test_inv_29_cancel_waiting_and_delayed(store, clock, delay):
    result = store.enqueue(req(delay_ms=delay))
    clock.set(100)
    store.cancel(result.id)
    job = store.get_job(result.id)
    assert job.state == "cancelled"
    assert job.finished_at == 100
    assert job.attempts_made == 0  # a direct cancel consumes no attempt
    assert job.exit is MISSING
    assert store.get_attempts(result.id) == [
        AttemptRecord(attempt=1, started_at=None, finished_at=100, outcome="cancelled")
    ]
    clock.set(120000)
    assert isinstance(claim(store), Empty)
    with pytest.raises(JobNotCancellableError) as info:
        store.cancel(result.id)
    assert info.value.state == "cancelled"
    assert info.value.job_id == result.id
    with pytest.raises(JobNotFoundError):
        store.cancel("nope")
    assert store.counts() == counts_of(cancelled=1)


@pytest.mark.parametrize("outcome", [Complete({"ok": 1}), Fail({"bad": 1})])
def test_cancel_of_terminal_job_is_not_cancellable(store, outcome):
    result = store.enqueue(req())
    finish(store, result.id, outcome)
    state = store.get_job(result.id).state
    with pytest.raises(JobNotCancellableError) as info:
        store.cancel(result.id)
    assert info.value.state == state
    assert store.get_job(result.id).state == state


def test_cancel_of_an_active_job_is_idempotent(store):
    result = store.enqueue(req())
    claim_id(store, result.id)
    store.cancel(result.id)
    store.cancel(result.id)
    job = store.get_job(result.id)
    assert job.state == "active"
    assert job.cancel_requested is True
    assert job.finished_at is None
    assert store.get_attempts(result.id) == []
    assert store.counts() == counts_of(active=1)


def test_cancel_ledger_started_at_is_the_last_claim_time(store, clock):
    """§4.13: the cancelled entry's startedAt = last processedAt (the previous run's start)."""
    result = store.enqueue(req(attempts_max=3))
    clock.set(100)
    claim_id(store, result.id)
    clock.set(200)
    store.ack(result.id, "t-1", Retry(delay_ms=1000, exit=None))
    clock.set(300)
    store.cancel(result.id)
    ledger = store.get_attempts(result.id)
    assert [(e.attempt, e.outcome, e.started_at, e.finished_at) for e in ledger] == [
        (1, "retried", 100, 200),
        (2, "cancelled", 100, 300),
    ]
    assert store.get_job(result.id).attempts_made == 1


def test_retry_clears_a_pending_cancel_flag_state(store):
    """Retry of a failed job leaves cancel_requested False (flag cleared on terminal + retry)."""
    result = store.enqueue(req())
    claim_id(store, result.id)
    store.cancel(result.id)
    store.ack(result.id, "t-1", Fail(None))
    store.retry(result.id)
    job = store.get_job(result.id)
    assert job.cancel_requested is False
    claim_id(store, result.id, token="t-2")
    store.ack(result.id, "t-2", Retry(delay_ms=0, exit=None))  # not converted to cancel
    assert store.get_job(result.id).state == "waiting"
    assert outcomes(store, result.id) == ["failed", "retried"]


# ---------------------------------------------------------------- promote (35)


def test_promote_sets_run_at_now_and_keeps_enqueue_order(store, clock):
    delayed = store.enqueue(req(delay_ms=60000, payload={"n": "delayed"}))
    waiting = store.enqueue(req(payload={"n": "waiting"}))
    clock.set(500)
    store.promote(delayed.id)
    job = store.get_job(delayed.id)
    assert job.state == "waiting"
    assert job.run_at == 500
    assert store.counts() == counts_of(waiting=2)
    # seq unchanged: the promoted job was enqueued first, so it is claimed first
    assert claim_job(store, token="t-a").id == delayed.id
    assert claim_job(store, token="t-b").id == waiting.id


@pytest.mark.parametrize("state", ["waiting", "completed", "failed", "cancelled"])
def test_promote_rejects_non_delayed_states(store, state):
    result = store.enqueue(req())
    if state in ("completed", "failed"):
        finish(store, result.id, Complete(None) if state == "completed" else Fail(None))
    if state == "cancelled":
        store.cancel(result.id)
    with pytest.raises(JobNotPromotableError) as info:
        store.promote(result.id)
    assert info.value.state == state


# ---------------------------------------------------------------- remove (37)


@pytest.mark.parametrize("state", ["waiting", "delayed", "completed", "failed", "cancelled"])
def test_remove_deletes_any_non_active_job(store, state):
    result = store.enqueue(req(delay_ms=60000 if state == "delayed" else 0))
    if state == "completed":
        finish(store, result.id, Complete({"ok": 1}))
    elif state == "failed":
        finish(store, result.id, Fail({"bad": 1}))
    elif state == "cancelled":
        store.cancel(result.id)
    assert store.counts()[state] == 1
    assert store.remove(result.id) is True
    assert store.get_job(result.id) is None
    assert store.get_attempts(result.id) == []
    assert store.counts() == counts_of()
    assert store.remove(result.id) is False
    assert store.list().items == []


def test_removed_job_is_not_claimed(store, clock):
    removed = store.enqueue(req(payload={"n": 1}))
    removed_delayed = store.enqueue(req(payload={"n": 2}, delay_ms=100))
    kept = store.enqueue(req(payload={"n": 3}))
    store.remove(removed.id)
    store.remove(removed_delayed.id)
    clock.set(100)
    assert claim_job(store).id == kept.id
    assert isinstance(claim(store, token="t-2"), Empty)


def test_removed_explicit_id_can_be_enqueued_again(store):
    store.enqueue(req(id="X", payload={"n": 1}))
    finish(store, "X", Complete(None))
    assert store.remove("X") is True
    result = store.enqueue(req(id="X", payload={"n": 2}))
    assert result.duplicate is False
    job = store.get_job("X")
    assert job.payload == {"n": 2}
    assert job.state == "waiting"
    assert store.get_attempts("X") == []


def test_pause_and_resume_affect_only_their_queue(store):
    a = store.enqueue(req(queue="a"))
    b = store.enqueue(req(queue="b"))
    store.pause("a")
    assert isinstance(claim(store, queue="a"), Empty)
    assert claim_job(store, queue="b").id == b.id
    store.resume("a")
    assert claim_job(store, queue="a", token="t-2").id == a.id
