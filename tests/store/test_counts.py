"""CNT cases (conformance-cases.md §9) and counts invariants 40-41 (store-contract.md §2.15)."""

from __future__ import annotations

from store import Cancelled, Complete, Fail, Retry
from tests.store.helpers import claim_id, claim_job, counts_of, finish, req


def test_cnt_01_counts_group_by_all_seven_states_and_filter_by_queue(store):
    store.enqueue(req())
    store.enqueue(req(delay_ms=1000))
    store.enqueue(req(queue="other"))
    claim_job(store)
    assert store.counts() == {
        "waiting": 1,
        "delayed": 1,
        "active": 1,
        "waiting-children": 0,
        "completed": 0,
        "failed": 0,
        "cancelled": 0,
    }
    other = store.counts("other")
    assert other == counts_of(waiting=1)
    assert other["active"] == 0
    assert store.counts(queue="default") == counts_of(delayed=1, active=1)


def test_cnt_02_counts_stay_consistent_across_cancel_retry_pruning_and_remove(store, clock):
    keep = {"completed": {"count": 1}}
    for n in range(3):
        result = store.enqueue(req(payload={"n": n}, keep=keep))
        finish(store, result.id, Complete(None))
        clock.advance(10)
    assert store.counts()["completed"] == 1

    doomed = store.enqueue(req(name="Doomed"))
    store.cancel(doomed.id)
    assert store.counts()["cancelled"] == 1

    failing = store.enqueue(req())
    claim_id(store, failing.id, token="t-f")
    store.ack(failing.id, "t-f", Fail(None))
    assert store.counts()["failed"] == 1
    store.retry(failing.id)

    survivors = store.list(states=["completed"]).items
    assert len(survivors) == 1
    assert store.remove(survivors[0].id) is True
    assert store.counts() == {
        "waiting": 1,
        "delayed": 0,
        "active": 0,
        "waiting-children": 0,
        "completed": 0,
        "failed": 0,
        "cancelled": 1,
    }


def test_counts_of_empty_store_and_unknown_queue(store):
    assert store.counts() == counts_of()
    store.enqueue(req())
    assert store.counts("nobody-uses-this") == counts_of()


def test_counts_follow_every_transition(store, clock):
    """Invariant 41 and §2.15: exact across every transition, per queue and overall."""
    a = store.enqueue(req(attempts_max=3))
    b = store.enqueue(req(queue="q2", delay_ms=100))
    assert store.counts() == counts_of(waiting=1, delayed=1)
    assert store.counts("q2") == counts_of(delayed=1)

    claim_id(store, a.id)  # waiting -> active
    assert store.counts() == counts_of(active=1, delayed=1)
    store.ack(a.id, "t-1", Retry(delay_ms=50, exit=None))  # active -> delayed
    assert store.counts() == counts_of(delayed=2)
    clock.set(50)
    claim_id(store, a.id, token="t-2")  # due promotion + claim
    assert store.counts() == counts_of(active=1, delayed=1)
    store.release(a.id, "t-2")  # active -> waiting
    assert store.counts() == counts_of(waiting=1, delayed=1)
    claim_id(store, a.id, token="t-3", lock_duration_ms=10)
    clock.set(60)
    store.recover_stalled(max_stalled_count=5)  # active -> waiting (stall)
    assert store.counts() == counts_of(waiting=1, delayed=1)
    claim_id(store, a.id, token="t-4", lock_duration_ms=10)
    clock.set(70)
    store.recover_stalled(max_stalled_count=0)  # active -> failed (stall limit)
    assert store.counts() == counts_of(failed=1, delayed=1)
    store.retry(a.id)  # failed -> waiting
    assert store.counts() == counts_of(waiting=1, delayed=1)

    store.promote(b.id)  # delayed -> waiting
    assert store.counts() == counts_of(waiting=2)
    assert store.counts("q2") == counts_of(waiting=1)
    claim_id(store, b.id, queue="q2", token="t-b")
    store.cancel(b.id)  # flag only
    assert store.counts("q2") == counts_of(active=1)
    store.ack(b.id, "t-b", Retry(delay_ms=0, exit=None))  # converted to cancel
    assert store.counts("q2") == counts_of(cancelled=1)
    assert store.counts("default") == counts_of(waiting=1)

    claim_id(store, a.id, token="t-5")
    store.ack(a.id, "t-5", Cancelled())
    assert store.counts() == counts_of(cancelled=2)
    assert store.remove(a.id) is True
    assert store.remove(b.id) is True
    assert store.counts() == counts_of()


def test_counts_after_duplicates_and_dedupe_do_not_change(store):
    store.enqueue(req(id="x"))
    store.enqueue(req(id="x"))
    store.enqueue(req(dedupe={"key": "k"}))
    store.enqueue(req(dedupe={"key": "k"}))
    store.enqueue_many([req(id="x"), req(dedupe={"key": "k"})])
    assert store.counts() == counts_of(waiting=2)


def test_counts_with_fail_complete_and_keep_pruning_per_queue(store):
    for queue in ("q1", "q2"):
        for n in range(3):
            result = store.enqueue(req(queue=queue, payload={"n": n}))
            finish(store, result.id, Complete(None) if n else Fail(None), queue=queue)
    assert store.counts("q1") == counts_of(completed=2, failed=1)
    assert store.counts("q2") == counts_of(completed=2, failed=1)
    # keep groups are name+state wide (not per queue): count 1 leaves one completed in total
    last = store.enqueue(req(queue="q1", keep={"completed": {"count": 1}}))
    finish(store, last.id, Complete(None), queue="q1")
    assert store.counts() == counts_of(completed=1, failed=2)
    assert store.counts("q1") == counts_of(completed=1, failed=1)
    assert store.counts("q2") == counts_of(failed=1)
