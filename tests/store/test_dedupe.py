"""DED cases (conformance-cases.md §3) and dedupe invariants 59-65 (store-contract.md §5, §11)."""

from __future__ import annotations

from typing import Any

import pytest

from store import (
    BackoffPolicy,
    Cancelled,
    Complete,
    DedupePolicy,
    EnqueueResult,
    Fail,
    InvalidRequestError,
    KeepPolicy,
    Retry,
    TraceContext,
)
from tests.store.helpers import (
    Waiter,
    claim_empty,
    claim_id,
    counts_of,
    finish,
    recovered,
    req,
)


def dedupe(
    key: str, ttl_ms: int | None = None, extend: bool = False, replace: bool = False
) -> DedupePolicy:
    return DedupePolicy(key=key, ttl_ms=ttl_ms, extend=extend, replace=replace)


def test_ded_01_dedupe_never_rewrites_the_id_and_is_scoped_per_name(store):
    first = store.enqueue(req(id="my-ulid-1", dedupe=dedupe("emp-1")))
    assert first == EnqueueResult(id="my-ulid-1", duplicate=False)
    assert store.get_job("my-ulid-1").dedupe_key == "emp-1"
    second = store.enqueue(req(id="my-ulid-2", dedupe=dedupe("emp-1")))
    assert second == EnqueueResult(id="my-ulid-1", duplicate=True)
    assert store.get_job("my-ulid-2") is None
    third = store.enqueue(req(name="OtherJob", dedupe=dedupe("emp-1")))
    assert third.duplicate is False
    assert third.id != "my-ulid-1"
    assert store.counts()["waiting"] == 2


def test_ded_01_dedupe_given_as_dict(store):
    first = store.enqueue(req(dedupe={"key": "emp-1"}))
    second = store.enqueue(req(dedupe={"key": "emp-1"}))
    assert second == EnqueueResult(id=first.id, duplicate=True)


def test_ded_02_pending_dedupe_holds_through_waiting_and_active(store):
    first = store.enqueue(req(dedupe=dedupe("k")))
    assert first.duplicate is False
    assert store.enqueue(req(dedupe=dedupe("k"))) == EnqueueResult(first.id, True)
    claim_id(store, first.id)
    assert store.enqueue(req(dedupe=dedupe("k"))) == EnqueueResult(first.id, True)
    store.ack(first.id, "t-1", Complete(None))
    fourth = store.enqueue(req(dedupe=dedupe("k")))
    assert fourth.duplicate is False
    assert fourth.id != first.id
    assert store.get_job(fourth.id).state == "waiting"


def test_ded_03_cancellation_frees_a_pending_key(store):
    first = store.enqueue(req(dedupe=dedupe("k")))
    store.cancel(first.id)
    second = store.enqueue(req(dedupe=dedupe("k")))
    assert second.duplicate is False
    assert second.id != first.id


def test_ded_04_ttl_window_throttles_past_completion_and_expires_at_ttl(store, clock):
    first = store.enqueue(req(dedupe=dedupe("k", ttl_ms=60000)))
    finish(store, first.id, Complete(None))
    clock.advance(30000)
    assert store.enqueue(req(dedupe=dedupe("k", ttl_ms=60000))) == EnqueueResult(first.id, True)
    # t = 60000: the window [0, 60000) is over; the drop at 30 s did not push it
    clock.advance(30000)
    later = store.enqueue(req(dedupe=dedupe("k", ttl_ms=60000)))
    assert later.duplicate is False
    assert later.id != first.id


def test_ded_05_extend_window_is_pushed_by_each_dropped_enqueue(store, clock):
    policy = dedupe("k", ttl_ms=60000, extend=True)
    first = store.enqueue(req(dedupe=policy))
    results = []
    for at in (45000, 75000, 135001):
        clock.set(at)
        results.append(store.enqueue(req(dedupe=policy)))
    assert [r.duplicate for r in results] == [True, True, False]
    assert results[0].id == first.id and results[1].id == first.id
    assert results[2].id != first.id


def test_ded_06_replace_rewrites_a_delayed_job_and_degrades_once_active(store, clock):
    policy = dedupe("k", replace=True)
    first = store.enqueue(req(payload={"n": 1}, priority=1, delay_ms=60000, dedupe=policy))
    second = store.enqueue(req(payload={"n": 2}, priority=7, delay_ms=5000, dedupe=policy))
    assert second == EnqueueResult(first.id, True)
    job = store.get_job(first.id)
    assert job.payload == {"n": 2}
    assert job.priority == 7
    assert job.state == "delayed"
    clock.advance(5000)
    claimed = claim_id(store, first.id)
    assert claimed.payload == {"n": 2}
    third = store.enqueue(req(payload={"n": 3}, dedupe=policy))
    assert third == EnqueueResult(first.id, True)
    assert store.get_job(first.id).payload == {"n": 2}
    assert store.counts() == counts_of(active=1)


def test_ded_07_existing_explicit_id_wins_over_the_dedupe_tree(store):
    store.enqueue(req(id="X", dedupe=dedupe("k")))
    finish(store, "X", Complete(None))
    j = store.enqueue(req(payload={"n": 9}, delay_ms=60000, dedupe=dedupe("k")))
    assert j.duplicate is False
    result = store.enqueue(req(id="X", payload={"n": 1}, dedupe=dedupe("k", replace=True)))
    assert result == EnqueueResult("X", True)
    keyed = store.get_job(j.id)
    assert keyed.payload == {"n": 9}
    assert keyed.state == "delayed"
    assert keyed.run_at == 60000


def test_ded_08_landed_replace_rearms_the_ttl_window(store, clock):
    policy = dedupe("k", ttl_ms=60000, replace=True)
    first = store.enqueue(req(delay_ms=300000, dedupe=policy))
    clock.set(50000)
    assert store.enqueue(req(payload={"n": 2}, delay_ms=300000, dedupe=policy)) == EnqueueResult(
        first.id, True
    )
    clock.set(100000)
    assert store.enqueue(req(payload={"n": 3}, delay_ms=300000, dedupe=policy)) == EnqueueResult(
        first.id, True
    )
    assert store.get_job(first.id).payload == {"n": 3}
    assert store.counts()["delayed"] == 1


def test_ded_08_rearmed_window_observable_once_job_is_active(store, clock):
    """§5 step 2: a replace with ttl restarts the window (expiresAt = now + ttl).

    Window from t=0 would end at 60000; the replace at 5000 moves it to 65000. Once the keyed
    job is active (no more replace), an enqueue at 62000 must still be throttled.
    """
    policy = dedupe("k", ttl_ms=60000, replace=True)
    first = store.enqueue(req(delay_ms=10000, dedupe=policy))
    clock.set(5000)
    assert store.enqueue(req(delay_ms=50000, dedupe=policy)) == EnqueueResult(first.id, True)
    assert store.get_job(first.id).run_at == 55000
    clock.set(55000)
    claim_id(store, first.id)
    clock.set(62000)
    assert store.enqueue(req(dedupe=policy)) == EnqueueResult(first.id, True)
    clock.set(65000)
    fresh = store.enqueue(req(dedupe=policy))
    assert fresh.duplicate is False


def test_ded_09_dedupe_alongside_custom_generator(make_store):
    state = {"n": 0}

    def generator(_request: Any) -> str:
        state["n"] += 1
        return f"job_{state['n']}"

    store = make_store(id_generator=generator)
    first = store.enqueue(req(name="Gen", dedupe=dedupe("k")))
    second = store.enqueue(req(name="Gen", dedupe=dedupe("k")))
    assert first == EnqueueResult("job_1", False)
    assert second == EnqueueResult("job_1", True)
    # §4.1 step 2 / §5: the reference runs dedupe before id generation (a hit never draws an id).
    assert state["n"] == 1


def test_ded_11_extend_without_ttl_is_refused(store):
    with pytest.raises(InvalidRequestError):
        store.enqueue(req(dedupe=DedupePolicy(key="x", extend=True)))
    assert store.counts() == counts_of()


def test_ded_12_cancel_by_dedupe(store):
    assert store.cancel_by_dedupe("TestJob", "emp-1") is False
    delayed = store.enqueue(req(delay_ms=60000, dedupe=dedupe("emp-1")))
    assert store.cancel_by_dedupe("TestJob", "emp-1") is True
    assert store.get_job(delayed.id).state == "cancelled"
    assert store.cancel_by_dedupe("TestJob", "emp-1") is False
    active = store.enqueue(req(payload={"n": 2}, dedupe=dedupe("emp-1")))
    assert active.duplicate is False
    claim_id(store, active.id)
    assert store.cancel_by_dedupe("TestJob", "emp-1") is True
    job = store.get_job(active.id)
    assert job.state == "active"
    assert job.cancel_requested is True
    # §12: calling it again on an already-flagged active job returns True again.
    assert store.cancel_by_dedupe("TestJob", "emp-1") is True
    assert store.cancel_by_dedupe("OtherJob", "emp-1") is False


# ---------------------------------------------------------------- invariants 59-65 and §5


def test_inv_60_fail_ack_frees_a_pending_key(store):
    first = store.enqueue(req(dedupe=dedupe("k")))
    finish(store, first.id, Fail({"e": 1}))
    second = store.enqueue(req(dedupe=dedupe("k")))
    assert second.duplicate is False and second.id != first.id


def test_inv_60_cancelled_ack_frees_a_pending_key(store):
    first = store.enqueue(req(dedupe=dedupe("k")))
    finish(store, first.id, Cancelled())
    assert store.enqueue(req(dedupe=dedupe("k"))).duplicate is False


def test_inv_60_retry_ack_keeps_the_pending_key(store):
    first = store.enqueue(req(attempts_max=2, dedupe=dedupe("k")))
    claim_id(store, first.id)
    store.ack(first.id, "t-1", Retry(delay_ms=1000, exit={"boom": 1}))
    assert store.enqueue(req(dedupe=dedupe("k"))) == EnqueueResult(first.id, True)


def test_stall_exhaustion_frees_a_pending_key(store, clock):
    first = store.enqueue(req(dedupe=dedupe("k")))
    claim_id(store, first.id, lock_duration_ms=1000)
    clock.advance(1000)
    assert recovered(store, 0) == [(first.id, True)]
    second = store.enqueue(req(dedupe=dedupe("k")))
    assert second.duplicate is False and second.id != first.id


def test_release_honouring_cancel_frees_a_pending_key(store):
    first = store.enqueue(req(dedupe=dedupe("k")))
    claim_id(store, first.id)
    store.cancel(first.id)
    assert store.enqueue(req(dedupe=dedupe("k"))).duplicate is True
    store.release(first.id, "t-1")
    assert store.get_job(first.id).state == "cancelled"
    assert store.enqueue(req(dedupe=dedupe("k"))).duplicate is False


def test_inv_61_window_exact_boundary_and_survives_completion(store, clock):
    policy = dedupe("k", ttl_ms=1000)
    first = store.enqueue(req(dedupe=policy))
    finish(store, first.id, Complete(None))
    clock.set(999)
    assert store.enqueue(req(dedupe=policy)) == EnqueueResult(first.id, True)
    clock.set(1000)
    assert store.enqueue(req(dedupe=policy)).duplicate is False


def test_inv_61_expired_window_lets_a_second_job_in_while_first_pending(store, clock):
    policy = dedupe("k", ttl_ms=1000)
    first = store.enqueue(req(dedupe=policy))
    clock.set(1000)
    second = store.enqueue(req(dedupe=policy))
    assert second.duplicate is False and second.id != first.id
    assert store.counts()["waiting"] == 2
    # the new job took over the key: a drop now points at it
    assert store.enqueue(req(dedupe=policy)) == EnqueueResult(second.id, True)


def test_inv_62_extend_window_frees_ttl_after_the_last_drop(store, clock):
    policy = dedupe("k", ttl_ms=60000, extend=True)
    first = store.enqueue(req(dedupe=policy))
    clock.set(59999)
    assert store.enqueue(req(dedupe=policy)) == EnqueueResult(first.id, True)  # pushed to 119999
    clock.set(119998)
    assert store.enqueue(req(dedupe=policy)) == EnqueueResult(first.id, True)  # pushed to 179998
    clock.set(179998)
    assert store.enqueue(req(dedupe=policy)).duplicate is False


def test_non_extend_drop_does_not_push_even_with_extend_false_explicit(store, clock):
    first = store.enqueue(req(dedupe=dedupe("k", ttl_ms=1000)))
    clock.set(900)
    assert store.enqueue(req(dedupe=dedupe("k", ttl_ms=1000))).id == first.id
    clock.set(1000)
    assert store.enqueue(req(dedupe=dedupe("k", ttl_ms=1000))).duplicate is False


def test_inv_63_replace_rewrites_every_content_field_and_keeps_identity(store, clock):
    policy = dedupe("k", replace=True)
    first = store.enqueue(
        req(
            payload={"n": 1},
            metadata={"v": "1"},
            priority=1,
            attempts_max=1,
            delay_ms=60000,
            dedupe=policy,
            parent={
                "flow_name": "f",
                "flow_id": "fid",
                "child_key": "c",
                "parent_store_key": "psk",
                "depth": 1,
            },
        )
    )
    before = store.get_job(first.id)
    clock.set(2000)
    trace = TraceContext("tr-2", "sp-2", True, True)
    result = store.enqueue(
        req(
            payload={"n": 2},
            metadata={"v": "2"},
            priority=5,
            attempts_max=4,
            backoff=BackoffPolicy(kind="fixed", delay_ms=10),
            keep={"completed": {"count": 3}},
            timeout_ms=777,
            trace=trace,
            delay_ms=3000,
            queue="elsewhere",
            dedupe=policy,
        )
    )
    assert result == EnqueueResult(first.id, True)
    job = store.get_job(first.id)
    assert job.payload == {"n": 2}
    assert job.metadata == {"v": "2"}
    assert job.priority == 5
    assert job.attempts_max == 4
    assert job.backoff == BackoffPolicy(kind="fixed", delay_ms=10)
    assert job.keep == KeepPolicy.coerce({"completed": {"count": 3}})
    assert job.timeout_ms == 777
    assert job.trace == trace
    assert job.run_at == 5000
    assert job.state == "delayed"
    # preserved: id, queue, enqueued_at, dedupe_key, parent
    assert job.queue == "default"
    assert job.enqueued_at == before.enqueued_at == 0
    assert job.dedupe_key == "k"
    assert job.parent == before.parent
    assert store.counts() == counts_of(delayed=1)
    assert store.counts("elsewhere") == counts_of()


def test_replace_with_zero_delay_stays_delayed_but_is_due(store, clock):
    policy = dedupe("k", replace=True)
    first = store.enqueue(req(delay_ms=60000, dedupe=policy))
    clock.set(100)
    store.enqueue(req(payload={"n": 2}, delay_ms=0, dedupe=policy))
    job = store.get_job(first.id)
    assert job.state == "delayed"
    assert job.run_at == 100
    assert claim_id(store, first.id).payload == {"n": 2}


def test_replace_keeps_fifo_position(store, clock):
    """§2.9: dedupe replace does not change seq; a promoted job queues by enqueue order."""
    policy = dedupe("k", replace=True)
    keyed = store.enqueue(req(delay_ms=60000, dedupe=policy))
    later = store.enqueue(req(payload={"n": 2}))
    store.enqueue(req(payload={"n": 3}, delay_ms=0, dedupe=policy))
    assert claim_id(store, keyed.id, token="t-a").payload == {"n": 3}
    assert claim_id(store, later.id, token="t-b")


def test_replace_on_waiting_keyed_job_is_plain_dedupe(store):
    policy = dedupe("k", replace=True)
    first = store.enqueue(req(payload={"n": 1}, dedupe=policy))
    assert store.enqueue(req(payload={"n": 2}, delay_ms=1000, dedupe=policy)) == EnqueueResult(
        first.id, True
    )
    job = store.get_job(first.id)
    assert job.payload == {"n": 1}
    assert job.state == "waiting"


def test_replace_lands_even_after_the_window_expired(store, clock):
    """§5 step 2: window liveness does not matter for replace while the keyed job is delayed."""
    policy = dedupe("k", ttl_ms=1000, replace=True)
    first = store.enqueue(req(delay_ms=60000, dedupe=policy))
    clock.set(5000)
    assert store.enqueue(req(payload={"n": 2}, delay_ms=60000, dedupe=policy)) == EnqueueResult(
        first.id, True
    )
    assert store.get_job(first.id).payload == {"n": 2}


def test_replace_wakes_the_keyed_jobs_queue(store):
    policy = dedupe("k", replace=True)
    first = store.enqueue(req(delay_ms=60000, dedupe=policy))
    empty = claim_empty(store)
    waiter = Waiter(store, ["default"], empty.wake_token).start_parked()
    store.enqueue(req(payload={"n": 2}, delay_ms=0, dedupe=policy))
    assert waiter.outcome() is True
    assert claim_id(store, first.id).payload == {"n": 2}


def test_pending_mode_entry_keeps_its_mode(store, clock):
    """§5: a pending-mode entry dedupes a later {key, ttl} request and acquires no window."""
    first = store.enqueue(req(dedupe=dedupe("k")))
    assert store.enqueue(req(dedupe=dedupe("k", ttl_ms=1000))) == EnqueueResult(first.id, True)
    clock.set(500)
    finish(store, first.id, Complete(None))
    second = store.enqueue(req(dedupe=dedupe("k", ttl_ms=1000)))
    assert second.duplicate is False


def test_removed_keyed_job_frees_pending_key_for_enqueue(store):
    first = store.enqueue(req(dedupe=dedupe("k")))
    assert store.remove(first.id) is True
    second = store.enqueue(req(dedupe=dedupe("k")))
    assert second.duplicate is False and second.id != first.id


def test_live_window_still_throttles_after_remove(store):
    first = store.enqueue(req(dedupe=dedupe("k", ttl_ms=60000)))
    assert store.remove(first.id) is True
    assert store.enqueue(req(dedupe=dedupe("k", ttl_ms=60000))) == EnqueueResult(first.id, True)
    assert store.counts() == counts_of()


def test_explicit_new_id_on_dedupe_hit_is_not_created(store):
    first = store.enqueue(req(dedupe=dedupe("k")))
    assert store.enqueue(req(id="requested", dedupe=dedupe("k"))) == EnqueueResult(first.id, True)
    assert store.get_job("requested") is None


def test_same_key_different_names_never_interact(store):
    a = store.enqueue(req(name="A", dedupe=dedupe("k")))
    b = store.enqueue(req(name="B", dedupe=dedupe("k")))
    assert not a.duplicate and not b.duplicate
    store.cancel(a.id)
    assert store.enqueue(req(name="B", dedupe=dedupe("k"))) == EnqueueResult(b.id, True)
    assert store.cancel_by_dedupe("A", "k") is False
    assert store.cancel_by_dedupe("B", "k") is True
    assert store.get_job(b.id).state == "cancelled"


def test_cancel_by_dedupe_with_expired_window_still_cancels(store, clock):
    """§4.14: the registry entry is looked up regardless of window expiry."""
    first = store.enqueue(req(delay_ms=600000, dedupe=dedupe("k", ttl_ms=1000)))
    clock.set(5000)
    assert store.cancel_by_dedupe("TestJob", "k") is True
    assert store.get_job(first.id).state == "cancelled"


def test_dedupe_duplicate_returns_without_inserting(store):
    store.enqueue(req(dedupe=dedupe("k")))
    for _ in range(3):
        store.enqueue(req(dedupe=dedupe("k")))
    assert store.counts() == counts_of(waiting=1)
