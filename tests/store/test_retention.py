"""RET cases (conformance-cases.md §10) and retention invariants 51-58 (store-contract.md §4.20).

The worker's history timer is simulated by advancing the fake clock and calling
``store.sweep_state()`` (one full pass) as RET-07/08/09 allow.
"""

from __future__ import annotations

from typing import Any

import pytest

from store import Cancelled, Complete, Fail, InvalidRequestError, Retry, StoreDefect
from tests.store.helpers import (
    claim_id,
    counts_of,
    finish,
    req,
    traces_of,
)

MINUTE = 60_000
HOUR = 3_600_000


def sweep_for(store: Any, clock: Any, total_ms: int, step_ms: int = 10_000) -> None:
    """Walk the clock like the worker's timer (10 s interval), sweeping after each step."""
    for _ in range(total_ms // step_ms):
        clock.advance(step_ms)
        store.sweep_state()


def test_ret_01_keep_count_prunes_older_records_of_same_name_and_state(store, clock):
    for n in range(4):
        result = store.enqueue(req(payload={"n": n}, keep={"completed": {"count": 2}}))
        finish(store, result.id, Complete(None))
        clock.advance(1)
    items = store.list(name="TestJob", states=["completed"]).items
    assert [job.payload for job in items] == [{"n": 3}, {"n": 2}]
    assert store.counts() == counts_of(completed=2)


def test_ret_03_keep_count_tie_keeps_most_recently_acked(store):
    keep = {"completed": {"count": 1}}
    first = store.enqueue(req(payload={"n": 1}, keep=keep))
    second = store.enqueue(req(payload={"n": 2}, keep=keep))
    claim_id(store, first.id, token="t-a")
    claim_id(store, second.id, token="t-b")
    store.ack(first.id, "t-a", Complete(None))
    store.ack(second.id, "t-b", Complete(None))
    assert store.get_job(first.id) is None
    assert store.get_job(second.id) is not None
    assert store.counts() == counts_of(completed=1)


def test_ret_04_count_and_age_apply_together(store, clock):
    keep = {"completed": {"count": 2, "age_ms": 10_000}}
    ids = []
    for at in (0, 6000, 12000):
        clock.set(at)
        result = store.enqueue(req(payload={"at": at}, keep=keep))
        finish(store, result.id, Complete(None))
        ids.append(result.id)
    assert store.get_job(ids[0]) is None  # finished 0 <= 12000 - 10000
    assert store.get_job(ids[1]) is not None
    assert store.get_job(ids[2]) is not None


def test_ret_06_cancel_applies_the_keep_policy(store, clock):
    ids = []
    for n in range(3):
        result = store.enqueue(req(payload={"n": n}, keep={"cancelled": {"count": 1}}))
        store.cancel(result.id)
        ids.append(result.id)
        clock.advance(10)
    assert [job.id for job in store.list(states=["cancelled"]).items] == [ids[-1]]
    assert store.counts() == counts_of(cancelled=1)


def test_ret_07_history_ttl_sweeps_terminal_records_and_spares_live_ones(make_store, clock):
    store = make_store(history_ttl=MINUTE)
    done = store.enqueue(req(payload={"n": "done"}))
    finish(store, done.id, Complete(None))
    live = store.enqueue(req(payload={"n": "live"}))
    sweep_for(store, clock, 30_000)
    assert store.get_job(done.id) is not None
    assert store.get_job(live.id) is not None
    sweep_for(store, clock, 60_000)
    assert store.get_job(done.id) is None
    assert store.get_job(live.id) is not None
    assert store.counts() == counts_of(waiting=1)


def test_ret_08_per_state_history_ttl_sweeps_only_named_states(make_store, clock):
    store = make_store(history_ttl={"failed": MINUTE})
    store.enqueue(req(id="done"))
    finish(store, "done", Complete(None))
    store.enqueue(req(id="bad"))
    finish(store, "bad", Fail(None))
    sweep_for(store, clock, 2 * MINUTE)
    assert store.get_job("bad") is None
    assert store.get_job("done") is not None


def test_ret_09_sweep_honours_a_stricter_per_row_keep_age(make_store, clock):
    store = make_store(history_ttl=HOUR)
    result = store.enqueue(req(keep={"completed": {"age_ms": MINUTE}}))
    finish(store, result.id, Complete(None))
    sweep_for(store, clock, 2 * MINUTE)
    assert store.get_job(result.id) is None
    assert store.counts() == counts_of()


# ---------------------------------------------------------------- RET-D1 sweep_state


def test_ret_d1_sweep_boundary_is_inclusive(make_store, clock):
    store = make_store(history_ttl=MINUTE)
    result = store.enqueue(req())
    finish(store, result.id, Complete(None))
    clock.set(MINUTE - 1)
    assert store.sweep_state()["deleted"] == 0
    assert store.get_job(result.id) is not None
    clock.set(MINUTE)  # finished_at == now - ttl is deleted
    outcome = store.sweep_state()
    assert outcome["deleted"] == 1
    assert outcome["scanned"] >= 1
    assert store.get_job(result.id) is None
    assert store.get_attempts(result.id) == []


def test_ret_d1_flat_history_ttl_applies_to_all_three_states(make_store, clock):
    store = make_store(history_ttl=MINUTE)
    for job_id, outcome in (("c", Complete(None)), ("f", Fail(None)), ("x", Cancelled())):
        store.enqueue(req(id=job_id))
        finish(store, job_id, outcome)
    store.enqueue(req(id="direct"))
    store.cancel("direct")
    clock.set(MINUTE)
    assert store.sweep_state()["deleted"] == 4
    assert store.counts() == counts_of()


def test_ret_d1_laxer_row_age_loses_to_the_ceiling(make_store, clock):
    """§4.20: effective = min(keep.age, ttl)."""
    store = make_store(history_ttl=MINUTE)
    result = store.enqueue(req(keep={"completed": {"age_ms": HOUR}}))
    finish(store, result.id, Complete(None))
    clock.set(MINUTE)
    store.sweep_state()
    assert store.get_job(result.id) is None


def test_inv_57_state_without_ceiling_swept_only_by_its_own_keep_age(make_store, clock):
    store = make_store(history_ttl={"failed": HOUR})
    aged = store.enqueue(req(payload={"n": 1}, keep={"completed": {"age_ms": 1000}}))
    finish(store, aged.id, Complete(None), token="t-a")
    plain = store.enqueue(req(payload={"n": 2}))
    finish(store, plain.id, Complete(None), token="t-b")
    clock.set(10 * HOUR)
    store.sweep_state()
    assert store.get_job(aged.id) is None
    assert store.get_job(plain.id) is not None  # no ceiling, no own age: kept forever


def test_ret_d1_per_state_ceilings(make_store, clock):
    store = make_store(history_ttl={"completed": 1000, "failed": 5000, "cancelled": 9000})
    for job_id, outcome in (("c", Complete(None)), ("f", Fail(None)), ("x", Cancelled())):
        store.enqueue(req(id=job_id))
        finish(store, job_id, outcome, token=f"t-{job_id}")
    clock.set(1000)
    store.sweep_state()
    assert [store.get_job(i) is None for i in ("c", "f", "x")] == [True, False, False]
    clock.set(5000)
    store.sweep_state()
    assert [store.get_job(i) is None for i in ("f", "x")] == [True, False]
    clock.set(9000)
    store.sweep_state()
    assert store.get_job("x") is None


def test_ret_d1_sweep_counts_an_orphaned_index_member_as_deleted(
    make_store, clock, redis_client, prefix
):
    """RET-D1: a member whose record no longer exists is removed and counted as deleted."""
    store = make_store(history_ttl=MINUTE)
    store.enqueue(req(id="orphan-7c1d"))
    finish(store, "orphan-7c1d", Complete(None))
    # delete every per-job key out of band, leaving the store-wide index members behind
    pattern = "{" + prefix + "}*"
    per_job = [k for k in redis_client.scan_iter(match=pattern) if "orphan-7c1d" in k]
    assert per_job, "the job must have at least one key of its own"
    redis_client.delete(*per_job)
    before = traces_of(redis_client, prefix, "orphan-7c1d")
    assert before, "index members must remain"
    clock.set(MINUTE)
    assert store.sweep_state()["deleted"] == 1
    after = traces_of(redis_client, prefix, "orphan-7c1d")
    assert len(after) < len(before)
    assert store.sweep_state()["deleted"] == 0


def test_ret_d1_sweep_pages_past_1201_expired_rows(make_store, clock):
    store = make_store(history_ttl=MINUTE)
    old = store.enqueue_many([req(payload={"i": i}) for i in range(1201)])
    for result in old:
        store.cancel(result.id)
    clock.set(30_000)
    young = store.enqueue_many([req(payload={"y": i}) for i in range(700)])
    for result in young:
        store.cancel(result.id)
    assert store.counts() == counts_of(cancelled=1901)
    clock.set(MINUTE)
    outcome = store.sweep_state()
    assert outcome["deleted"] == 1201
    assert outcome["scanned"] >= 1201
    assert store.counts() == counts_of(cancelled=700)
    assert all(store.get_job(r.id) is None for r in old[:5] + old[-5:])
    assert all(store.get_job(r.id) is not None for r in young)
    clock.set(90_000)
    assert store.sweep_state()["deleted"] == 700
    assert store.counts() == counts_of()


def test_ret_d1_sweep_pages_with_interleaved_survivors(make_store, clock):
    """Interleaved keep/delete rows in one finished index: the page offset must advance by
    scanned - deleted, so no survivor hides an expired row behind a page boundary."""
    store = make_store(history_ttl=HOUR)
    results = store.enqueue_many(
        [
            req(payload={"i": i}, keep={"cancelled": {"age_ms": 1000}} if i % 2 else None)
            for i in range(1201)
        ]
    )
    for result in results:
        store.cancel(result.id)
    clock.set(1000)
    assert store.sweep_state()["deleted"] == 600
    assert store.counts() == counts_of(cancelled=601)
    for i, result in enumerate(results):
        assert (store.get_job(result.id) is None) == bool(i % 2), i


def test_sweep_state_never_touches_live_jobs(make_store, clock):
    store = make_store(history_ttl=1)
    done = store.enqueue(req(payload={"n": "done"}))
    finish(store, done.id, Complete(None))
    active = store.enqueue(req(payload={"n": "active"}))
    waiting = store.enqueue(req(payload={"n": "waiting"}))
    delayed = store.enqueue(req(delay_ms=100 * HOUR))
    claim_id(store, active.id)
    clock.set(10 * HOUR)
    assert store.sweep_state()["deleted"] == 1
    assert store.get_job(done.id) is None
    assert store.get_job(active.id).state == "active"
    assert store.get_job(waiting.id).state == "waiting"
    assert store.get_job(delayed.id).state == "delayed"
    assert store.counts() == counts_of(active=1, waiting=1, delayed=1)


# ---------------------------------------------------------------- RET-D2 sweep_dedupes


def test_ret_d2_expired_window_entry_is_pruned(store, clock, redis_client, prefix):
    marker = "win-key-4e2b"
    first = store.enqueue(req(id="win-job-77", dedupe={"key": marker, "ttl_ms": MINUTE}))
    finish(store, first.id, Complete(None))
    assert traces_of(redis_client, prefix, marker), "the window entry must exist"
    clock.set(MINUTE - 1)
    assert store.sweep_dedupes() == 0
    assert traces_of(redis_client, prefix, marker)
    clock.set(MINUTE)
    assert store.sweep_dedupes() == 1
    # the completed job still carries dedupe_key on its record; only registry traces must go
    remaining = [t for t in traces_of(redis_client, prefix, marker) if first.id not in t]
    assert remaining == []
    assert store.sweep_dedupes() == 0


def test_ret_d2_pending_entry_of_removed_job_is_pruned_live_ones_kept(store, redis_client, prefix):
    busy = store.enqueue(req(dedupe={"key": "busy-key-91aa"}))
    dead = store.enqueue(req(dedupe={"key": "dead-key-91aa"}))
    live = store.enqueue(req(dedupe={"key": "live-key-91aa"}))
    claim_id(store, busy.id)
    assert store.remove(dead.id) is True
    assert traces_of(redis_client, prefix, "dead-key-91aa"), "the dead entry exists"
    assert store.sweep_dedupes() == 1
    assert traces_of(redis_client, prefix, "dead-key-91aa") == []
    assert store.enqueue(req(dedupe={"key": "live-key-91aa"})).id == live.id
    assert store.enqueue(req(dedupe={"key": "busy-key-91aa"})).id == busy.id
    assert store.sweep_dedupes() == 0


def test_ret_d2_live_window_of_removed_job_is_not_pruned(store, clock):
    first = store.enqueue(req(dedupe={"key": "k", "ttl_ms": MINUTE}))
    store.remove(first.id)
    assert store.sweep_dedupes() == 0
    assert store.enqueue(req(dedupe={"key": "k", "ttl_ms": MINUTE})).id == first.id


def test_ret_d2_sweep_dedupes_reaches_dead_entries_behind_1001_live_ones(
    store, redis_client, prefix
):
    """Redis H6: the original re-read the same first page of pending entries forever.

    1,001 live pending entries (enqueued first, lexicographically first keys) sort before
    1,201 dead ones (their jobs were removed); one call must prune every dead entry.
    """
    live = [
        store.enqueue(req(payload={"l": i}, dedupe={"key": f"a-live-{i:04d}"})) for i in range(1001)
    ]
    dead = store.enqueue_many(
        [req(payload={"d": i}, dedupe={"key": f"z-dead-{i:04d}"}) for i in range(1201)]
    )
    assert not any(r.duplicate for r in dead)
    for result in dead:
        assert store.remove(result.id) is True
    assert traces_of(redis_client, prefix, "z-dead-1200"), "dead entries exist before the sweep"
    assert store.sweep_dedupes() == 1201
    assert traces_of(redis_client, prefix, "z-dead-") == []
    assert store.sweep_dedupes() == 0
    # live entries still dedupe
    assert store.enqueue(req(dedupe={"key": "a-live-0000"})).id == live[0].id
    assert store.enqueue(req(dedupe={"key": "a-live-1000"})).id == live[1000].id
    assert store.counts() == counts_of(waiting=1001)


# ---------------------------------------------------------------- RET-D3 validation


def test_ret_d3_empty_history_ttl_object_is_refused(make_store):
    with pytest.raises(InvalidRequestError) as info:
        make_store(history_ttl={})
    assert isinstance(info.value, StoreDefect)
    assert isinstance(info.value, ValueError)


# ---------------------------------------------------------------- keep invariants 51-56


def test_inv_52_keep_age_prunes_at_next_terminal_ack_of_group(store, clock):
    keep = {"completed": {"age_ms": 1000}}
    old = store.enqueue(req(payload={"n": 1}, keep=keep))
    finish(store, old.id, Complete(None))
    clock.set(999)
    second = store.enqueue(req(payload={"n": 2}, keep=keep))
    finish(store, second.id, Complete(None))
    assert store.get_job(old.id) is not None  # 0 > 999 - 1000
    clock.set(1000)
    third = store.enqueue(req(payload={"n": 3}, keep=keep))
    finish(store, third.id, Complete(None))
    assert store.get_job(old.id) is None  # 0 <= 1000 - 1000
    assert store.get_job(second.id) is not None
    assert store.get_job(third.id) is not None


def test_inv_53_ties_keep_higher_seq_even_when_acked_in_reverse(store):
    """§4.20: sort by finished_at desc then seq desc; ties keep the later-sequenced record."""
    keep = {"completed": {"count": 2}}
    ids = [store.enqueue(req(payload={"n": n}, keep=keep)).id for n in range(4)]
    for n, job_id in enumerate(ids):
        claim_id(store, job_id, token=f"t-{n}")
    for n in reversed(range(4)):
        store.ack(ids[n], f"t-{n}", Complete(None))
    survivors = {job.id for job in store.list(states=["completed"]).items}
    # all four finished at t=0: the two highest seqs survive regardless of ack order
    assert survivors == {ids[2], ids[3]}


def test_inv_55_keep_policies_are_independent_per_state(store):
    keep = {"completed": {"count": 1}}
    for n in range(3):
        result = store.enqueue(req(payload={"n": n}, keep=keep))
        finish(store, result.id, Fail(None))
    for n in range(3):
        result = store.enqueue(req(payload={"n": n}, keep=keep))
        finish(store, result.id, Complete(None))
    assert store.counts() == counts_of(completed=1, failed=3)


def test_keep_failed_count_applies_on_fail(store):
    keep = {"failed": {"count": 1}, "completed": {"count": 5}}
    ids = []
    for n in range(3):
        result = store.enqueue(req(payload={"n": n}, keep=keep))
        finish(store, result.id, Fail(None))
        ids.append(result.id)
    assert store.counts() == counts_of(failed=1)
    assert store.get_job(ids[-1]) is not None


def test_keep_is_name_scoped(store):
    other = store.enqueue(req(name="OtherJob"))
    finish(store, other.id, Complete(None), names=["OtherJob"])
    result = store.enqueue(req(keep={"completed": {"count": 0}}))
    finish(store, result.id, Complete(None))
    assert store.get_job(other.id) is not None
    assert store.get_job(result.id) is None


def test_keep_count_zero_deletes_the_job_just_finished(store):
    result = store.enqueue(req(keep={"completed": {"count": 0}}))
    finish(store, result.id, Complete({"ok": 1}))
    assert store.get_job(result.id) is None
    assert store.get_attempts(result.id) == []
    assert store.counts() == counts_of()


def test_flat_keep_applies_to_all_states(store):
    keep = {"count": 1, "age_ms": MINUTE}
    ids = []
    for n in range(2):
        result = store.enqueue(req(payload={"n": n}, keep=keep))
        store.cancel(result.id)
        ids.append(result.id)
    job = store.get_job(ids[1])
    assert job.keep.cancelled.count == 1 and job.keep.completed.age_ms == MINUTE
    assert store.get_job(ids[0]) is None
    assert store.counts() == counts_of(cancelled=1)


def test_keep_uses_the_finishing_jobs_policy_on_the_whole_group(store):
    plain = [store.enqueue(req(payload={"n": n})).id for n in range(3)]
    for job_id in plain:
        store.cancel(job_id)
    last = store.enqueue(req(payload={"n": "last"}, keep={"cancelled": {"count": 1}}))
    store.cancel(last.id)
    assert all(store.get_job(job_id) is None for job_id in plain)
    assert store.counts() == counts_of(cancelled=1)


def test_keep_policy_release_cancel_and_retry_cancel(store):
    keep = {"cancelled": {"count": 1}}
    a = store.enqueue(req(payload={"n": "a"}, keep=keep))
    b = store.enqueue(req(payload={"n": "b"}, keep=keep, attempts_max=2))
    claim_id(store, a.id, token="t-a")
    claim_id(store, b.id, token="t-b")
    store.cancel(a.id)
    store.cancel(b.id)
    store.release(a.id, "t-a")
    store.ack(b.id, "t-b", Retry(delay_ms=0, exit=None))
    assert store.get_job(a.id) is None
    assert store.get_job(b.id).state == "cancelled"
    assert store.counts() == counts_of(cancelled=1)


def test_keep_prunes_a_large_group_of_1201(store):
    results = store.enqueue_many([req(payload={"i": i}) for i in range(1201)])
    for result in results:
        store.cancel(result.id)
    assert store.counts() == counts_of(cancelled=1201)
    last = store.enqueue(req(payload={"i": "last"}, keep={"cancelled": {"count": 1}}))
    store.cancel(last.id)
    assert store.counts() == counts_of(cancelled=1)
    assert [job.id for job in store.list(states=["cancelled"]).items] == [last.id]
    assert all(store.get_job(r.id) is None for r in results[:3] + results[598:602] + results[-3:])
