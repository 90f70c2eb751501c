"""CLM cases (conformance-cases.md §4), claim invariants 15-18, wake-ups 66-69 and atomicity 102."""

from __future__ import annotations

import threading
import time
from typing import Any

from store import Claimed, Complete, Empty, Fail, LockLostError, Retry
from tests.store.helpers import (
    NO_WAKE_WINDOW_S,
    Waiter,
    claim,
    claim_empty,
    claim_id,
    claim_job,
    counts_of,
    finish,
    recovered,
    req,
)


def test_clm_01_delayed_enqueue_next_run_at_and_due_inclusive(store, clock):
    result = store.enqueue(req(delay_ms=5000))
    assert store.counts()["delayed"] == 1
    empty = claim_empty(store)
    assert empty.next_run_at is not None
    assert empty.next_run_at == 5000  # contract §2.11: earliest matching run_at
    clock.advance(5000)
    claimed = claim(store, token="t-2")
    assert isinstance(claimed, Claimed)
    assert claimed.job.id == result.id


def test_clm_02_higher_priority_first_fifo_within_priority(store):
    a = store.enqueue(req(payload={"n": "a"}))
    b = store.enqueue(req(payload={"n": "b"}))
    c = store.enqueue(req(payload={"n": "c"}, priority=5))
    order = [claim_job(store, token=f"t-{i}").id for i in (1, 2, 3)]
    assert order == [c.id, a.id, b.id]


def test_clm_03_claim_filters_by_queue_and_name(store):
    store.enqueue(req(queue="other"))
    store.enqueue(req(name="OtherJob"))
    assert isinstance(claim(store, queue="default", names=["TestJob"]), Empty)
    in_other = claim_job(store, queue="other", token="t-2")
    assert in_other.queue == "other"
    other_name = claim_job(store, names=["OtherJob"], token="t-3")
    assert other_name.name == "OtherJob"


def test_clm_04_pause_stops_claims_until_resume_and_resume_wakes(store):
    result = store.enqueue(req())
    store.pause("default")
    assert store.paused_queues() == ["default"]
    assert isinstance(claim(store), Empty)
    store.enqueue(req(queue="other"))
    assert claim_job(store, queue="other", token="t-o").queue == "other"
    empty = claim_empty(store)
    waiter = Waiter(store, ["default"], empty.wake_token).start_parked()
    store.resume("default")
    assert waiter.outcome() is True
    assert store.paused_queues() == []
    assert claim_job(store, token="t-2").id == result.id


def test_clm_06_await_wake_honours_token_and_wakes_on_later_work(store):
    t1 = claim_empty(store).wake_token
    store.enqueue(req())
    assert store.await_wake(["default"], t1, timeout_ms=5000) is True  # False = timed out
    claim_job(store)
    t2 = claim_empty(store, token="t-2").wake_token
    waiter = Waiter(store, ["default"], t2).start_parked()
    store.enqueue(req())
    assert waiter.outcome() is True


def test_clm_07_enqueue_wakes_only_waiters_of_its_queue(store):
    empty = claim_empty(store)
    waiter = Waiter(store, ["default"], empty.wake_token).start_parked()
    store.enqueue(req(queue="other"))
    assert not waiter.done.wait(NO_WAKE_WINDOW_S), "woken by work on another queue"
    store.enqueue(req())
    assert waiter.outcome() is True


def test_clm_08_pubsub_wake_reaches_another_store_instance(store, make_store):
    other_instance = make_store()
    empty = claim_empty(store, names=["Cross"])
    waiter = Waiter(store, ["default"], empty.wake_token).start_parked(settle_s=0.1)
    other_instance.enqueue(req(name="Cross"))
    assert waiter.outcome() is True
    assert claim_job(store, names=["Cross"]).name == "Cross"


# ---------------------------------------------------------------- invariants 15-18


def test_await_wake_times_out_without_work(store):
    empty = claim_empty(store)
    started = time.monotonic()
    assert store.await_wake(["default"], empty.wake_token, timeout_ms=200) is False
    assert time.monotonic() - started >= 0.15


def test_next_run_at_only_counts_matching_names_and_queue(store):
    store.enqueue(req(name="OtherJob", delay_ms=1000))
    store.enqueue(req(queue="other", delay_ms=2000))
    store.enqueue(req(delay_ms=5000))
    store.enqueue(req(delay_ms=7000))
    assert claim_empty(store).next_run_at == 5000
    assert claim_empty(store, names=["Nobody"]).next_run_at is None


def test_empty_names_is_empty(store):
    store.enqueue(req())
    assert isinstance(claim(store, names=[]), Empty)
    assert store.counts() == counts_of(waiting=1)


def test_claimed_record_is_the_post_claim_record(store, clock):
    result = store.enqueue(req(attempts_max=3))
    clock.set(250)
    job = claim_job(store)
    assert job.id == result.id
    assert job.state == "active"
    assert job.processed_at == 250
    assert job.attempts_made == 0
    assert store.get_job(result.id) == job
    assert store.counts() == counts_of(active=1)


def test_inv_17_active_and_terminal_jobs_are_never_claimed(store):
    a = store.enqueue(req(payload={"n": "a"}))
    b = store.enqueue(req(payload={"n": "b"}))
    c = store.enqueue(req(payload={"n": "c"}))
    claim_id(store, a.id, token="t-a")
    finish(store, b.id, Complete(None), token="t-b")
    finish(store, c.id, Fail(None), token="t-c")
    store.enqueue(req(id="d", delay_ms=1000))
    assert isinstance(claim(store, token="t-x"), Empty)
    assert store.counts() == counts_of(active=1, completed=1, failed=1, delayed=1)


def test_inv_18_paused_queue_still_promotes_due_delayed_jobs(store, clock):
    result = store.enqueue(req(delay_ms=1000))
    store.pause("default")
    clock.advance(1000)
    empty = claim_empty(store)
    assert empty.next_run_at is None
    assert store.get_job(result.id).state == "waiting"
    assert store.counts() == counts_of(waiting=1)
    store.resume("default")
    assert claim_job(store).id == result.id


def test_inv_18_enqueue_into_paused_queue_lands(store):
    store.pause("default")
    result = store.enqueue(req())
    assert store.get_job(result.id).state == "waiting"
    assert store.counts() == counts_of(waiting=1)


def test_pause_is_per_queue_idempotent_and_durable(store, make_store):
    store.pause("a")
    store.pause("a")
    store.pause("b")
    assert sorted(store.paused_queues()) == ["a", "b"]
    assert sorted(make_store().paused_queues()) == ["a", "b"]  # shared, durable state
    store.resume("a")
    assert store.paused_queues() == ["b"]
    store.resume("a")  # resuming a non-paused queue is harmless
    assert store.paused_queues() == ["b"]


def test_paused_queue_blocks_claims_from_other_instances(store, make_store):
    store.enqueue(req())
    store.pause("default")
    assert isinstance(claim(make_store()), Empty)


def test_promoted_delayed_job_keeps_its_enqueue_position(store, clock):
    """§4.3 step 1 / §12: promotion keeps the original seq (queues by enqueue order)."""
    early = store.enqueue(req(delay_ms=1000))
    late = store.enqueue(req(payload={"n": 2}))
    clock.advance(1000)
    assert claim_job(store, token="t-1").id == early.id
    assert claim_job(store, token="t-2").id == late.id


def test_release_returns_job_to_its_fifo_position(store):
    first = store.enqueue(req(payload={"n": 1}))
    second = store.enqueue(req(payload={"n": 2}))
    claim_id(store, first.id)
    store.release(first.id, "t-1")
    assert claim_job(store, token="t-2").id == first.id
    assert claim_job(store, token="t-3").id == second.id


def test_retry_ack_goes_to_the_back_of_the_line(store):
    first = store.enqueue(req(attempts_max=2))
    second = store.enqueue(req(payload={"n": 2}))
    claim_id(store, first.id)
    store.ack(first.id, "t-1", Retry(delay_ms=0, exit=None))
    assert store.get_job(first.id).state == "waiting"
    assert claim_job(store, token="t-2").id == second.id
    assert claim_job(store, token="t-3").id == first.id


def test_priorities_order_across_many_values(store):
    ids = {}
    for p in (0, 3, -2, 10, 3, 0.5):
        ids.setdefault(p, []).append(store.enqueue(req(priority=p, payload={"p": p})).id)
    claimed = [claim_job(store, token=f"t-{i}").id for i in range(6)]
    assert claimed == ids[10] + ids[3] + ids[0.5] + ids[0] + ids[-2]


# ---------------------------------------------------------------- wake-ups 66-69


def _parked_waiter(store: Any, queues: list[str] | None = None, **claim_kwargs: Any) -> Waiter:
    empty = claim_empty(store, **claim_kwargs)
    return Waiter(store, queues or ["default"], empty.wake_token).start_parked()


def test_inv_66_wake_between_empty_claim_and_await_is_not_lost(store):
    token = claim_empty(store).wake_token
    store.enqueue(req(delay_ms=60000))  # delayed inserts wake too (§4.1 step 6)
    assert store.await_wake(["default"], token, timeout_ms=5000) is True


def test_inv_67_delayed_insert_wakes_a_parked_waiter(store):
    waiter = _parked_waiter(store)
    store.enqueue(req(delay_ms=5000))
    assert waiter.outcome() is True


def test_inv_68_waiter_on_several_queues_woken_by_any(store):
    empty = claim_empty(store)
    waiter = Waiter(store, ["q1", "q2"], empty.wake_token).start_parked()
    store.enqueue(req(queue="q3"))
    assert not waiter.done.wait(NO_WAKE_WINDOW_S)
    store.enqueue(req(queue="q2"))
    assert waiter.outcome() is True


def test_inv_69_retry_wakes(store):
    result = store.enqueue(req())
    finish(store, result.id, Fail(None))
    waiter = _parked_waiter(store)
    store.retry(result.id)
    assert waiter.outcome() is True


def test_inv_69_promote_wakes(store):
    result = store.enqueue(req(delay_ms=60000))
    waiter = _parked_waiter(store)
    store.promote(result.id)
    assert waiter.outcome() is True


def test_inv_69_release_wakes(store):
    result = store.enqueue(req())
    claim_id(store, result.id)
    waiter = _parked_waiter(store, token="t-idle")
    store.release(result.id, "t-1")
    assert waiter.outcome() is True


def test_inv_69_retry_ack_wakes(store):
    result = store.enqueue(req(attempts_max=2))
    claim_id(store, result.id)
    waiter = _parked_waiter(store, token="t-idle")
    store.ack(result.id, "t-1", Retry(delay_ms=0, exit=None))
    assert waiter.outcome() is True


def test_inv_69_recover_stalled_broadcasts(store, clock):
    result = store.enqueue(req())
    claim_id(store, result.id, lock_duration_ms=1000)
    # the waiter watches a queue the stalled job is NOT in: only a broadcast can wake it
    empty = claim_empty(store, queue="elsewhere")
    waiter = Waiter(store, ["elsewhere"], empty.wake_token).start_parked()
    clock.advance(1000)
    assert recovered(store, 1) == [(result.id, False)]
    assert waiter.outcome() is True


def test_inv_69_resume_wakes_only_after_pause(store):
    store.pause("default")
    waiter = _parked_waiter(store)
    store.resume("default")
    assert waiter.outcome() is True


def test_inv_69_enqueue_many_wakes_each_queue(store):
    empty = claim_empty(store, queue="q2")
    waiter = Waiter(store, ["q2"], empty.wake_token).start_parked()
    store.enqueue_many([req(queue="q1"), req(queue="q2")])
    assert waiter.outcome() is True


# ---------------------------------------------------------------- atomicity (102)


def test_inv_102_concurrent_claims_never_return_the_same_job(store, make_store):
    total = 200
    store.enqueue_many([req(payload={"i": i}) for i in range(total)])
    stores = [store, make_store(), make_store(), make_store()]
    barrier = threading.Barrier(8)
    claimed: list[list[str]] = [[] for _ in range(8)]
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        target = stores[index % len(stores)]
        try:
            barrier.wait()
            n = 0
            while True:
                result = claim(target, token=f"w{index}-{n}")
                n += 1
                if isinstance(result, Empty):
                    return
                claimed[index].append(result.job.id)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    flat = [job_id for ids in claimed for job_id in ids]
    assert len(flat) == total
    assert len(set(flat)) == total
    assert store.counts() == counts_of(active=total)


def test_inv_102_concurrent_acks_with_one_token_settle_once(store):
    result = store.enqueue(req())
    claim_id(store, result.id)
    barrier = threading.Barrier(6)
    outcomes: list[str] = []
    lock = threading.Lock()

    def acker() -> None:
        barrier.wait()
        try:
            store.ack(result.id, "t-1", Complete({"ok": True}))
            label = "ok"
        except LockLostError:
            label = "lost"
        with lock:
            outcomes.append(label)

    threads = [threading.Thread(target=acker) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["lost"] * 5 + ["ok"]
    assert len(store.get_attempts(result.id)) == 1
    assert store.counts() == counts_of(completed=1)
