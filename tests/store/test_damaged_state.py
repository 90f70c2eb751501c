"""Damaged Redis state (issue 13): job hashes deleted behind the store's back.

A job hash removed by hand or by eviction leaves its id in the sorted sets.
No operation may crash on such a dangling member or be poisoned by it: each
removes the member, fixes the counter it contributed to, and goes on.
"""

from __future__ import annotations

from typing import Any

import pytest

from store import Claimed, Complete, Empty, codec
from store.records import DedupePolicy
from tests.store.helpers import chunked_members, claim, claim_job, counts_of, req


def _drop(store: Any, job_id: str) -> None:
    """What eviction or a careless operator does: delete the hash, nothing else."""
    store.client.delete(store.keys.job(job_id))


# ------------------------------------------------------------------ defect 1


def test_orphaned_active_member_does_not_poison_stalled_recovery(store, clock):
    orphan = store.enqueue(req(payload={"n": "orphan"})).id
    stalled = store.enqueue(req(payload={"n": "stalled"})).id
    assert claim_job(store, token="t-1").id == orphan
    assert claim_job(store, token="t-2").id == stalled
    _drop(store, orphan)
    clock.advance(60_000)  # both locks expired
    recovered = store.recover_stalled()
    # The live stalled job is recovered; the orphan is dropped without an error.
    assert [(r.id, r.failed) for r in recovered] == [(stalled, False)]
    assert store.client.zscore(store.keys.active, orphan) is None
    assert not store.client.exists(store.keys.job(orphan))
    assert store.get_job(stalled).state == "waiting"
    # Recovery keeps working on later calls too, and the counters are exact.
    assert store.recover_stalled() == []
    assert store.counts() == counts_of(waiting=1)


def test_active_member_with_partial_hash_does_not_poison_stalled_recovery(store, clock):
    """A hash that lost its identifying fields (a partial HDEL) is treated as gone."""
    broken = store.enqueue(req(payload={"n": "broken"})).id
    good = store.enqueue(req(payload={"n": "good"})).id
    claim_job(store, token="t-1")
    claim_job(store, token="t-2")
    store.client.hdel(store.keys.job(broken), "name", "queue", "seq")
    clock.advance(60_000)
    recovered = store.recover_stalled()
    assert [r.id for r in recovered] == [good]
    assert store.client.zscore(store.keys.active, broken) is None
    assert store.recover_stalled() == []


# ------------------------------------------------------------------ defect 2


def test_orphaned_waiting_member_is_skipped_and_cleaned_by_claim(store):
    orphan = store.enqueue(req(payload={"n": "orphan"}, priority=9)).id
    good = store.enqueue(req(payload={"n": "good"})).id
    _drop(store, orphan)
    claimed = claim(store)
    assert isinstance(claimed, Claimed)
    assert claimed.job.id == good
    # The orphan's member is gone, no partial hash was written, counters are exact.
    assert store.client.zcard(store.keys.waiting("default", "TestJob")) == 0
    assert not store.client.exists(store.keys.job(orphan))
    assert store.client.zscore(store.keys.active, orphan) is None
    assert store.counts() == counts_of(active=1)


def test_claim_over_only_orphans_reports_empty(store):
    ids = [store.enqueue(req(payload={"n": i})).id for i in range(3)]
    for job_id in ids:
        _drop(store, job_id)
    assert isinstance(claim(store), Empty)
    assert store.counts() == counts_of()


def test_ack_and_claim_skips_orphans(store):
    first = store.enqueue(req(payload={"n": 1})).id
    orphan = store.enqueue(req(payload={"n": 2})).id
    good = store.enqueue(req(payload={"n": 3})).id
    assert claim_job(store).id == first
    _drop(store, orphan)
    nxt = store.ack_and_claim(
        first, "t-1", Complete(None), queue="default", names=["TestJob"], next_token="t-2"
    )
    assert isinstance(nxt, Claimed) and nxt.job.id == good
    assert store.counts() == counts_of(active=1, completed=1)


def test_ack_and_claim_many_skips_orphans(store):
    ids = [store.enqueue(req(payload={"n": i})).id for i in range(5)]
    _drop(store, ids[1])
    _drop(store, ids[3])
    batch = store.ack_and_claim_many(
        [], queue="default", names=["TestJob"], tokens=["a", "b", "c", "d"]
    )
    assert [job.id for job, _ in batch.jobs] == [ids[0], ids[2], ids[4]]
    assert batch.empty is not None
    assert store.counts() == counts_of(active=3)


def test_a_batch_claim_takes_back_an_orphans_counter_as_the_call_sees_it(store):
    """A call sums its counter moves and writes them when it ends (lib/tally.lua): an orphan
    met after two claims of the same call must see the counter those claims left (0 here,
    the counter having been repaired to the two real jobs), not the stored 2 -- else it
    takes the counter below zero."""
    ids = [store.enqueue(req(payload={"n": i})).id for i in range(3)]
    _drop(store, ids[2])
    store.client.hset(store.keys.counts, "default|waiting", 2)  # as mqcheck repairs it
    batch = store.ack_and_claim_many([], queue="default", names=["TestJob"], tokens=["a", "b", "c"])
    assert [job.id for job, _ in batch.jobs] == ids[:2]
    assert store.client.hget(store.keys.counts, "default|waiting") == "0"
    assert store.counts() == counts_of(active=2)


def test_a_batch_claim_leaves_what_it_did_not_take(store):
    """A batch of one job name pops the members it wants at once: what it claims and what
    it skips is gone from the waiting set, the rest stays in order."""
    ids = [store.enqueue(req(payload={"n": i}, priority=i % 2)).id for i in range(6)]
    _drop(store, ids[1])
    batch = store.ack_and_claim_many([], queue="default", names=["TestJob"], tokens=["a", "b"])
    # Priority 1 first (ids 1, 3, 5; 1 is an orphan), then priority 0 in arrival order.
    assert [job.id for job, _ in batch.jobs] == [ids[3], ids[5]]
    assert {job.id: job.state for job, _ in batch.jobs} == {ids[3]: "active", ids[5]: "active"}
    rest = store.ack_and_claim_many(
        [], queue="default", names=["TestJob"], tokens=["c", "d", "e", "f"]
    )
    assert [job.id for job, _ in rest.jobs] == [ids[0], ids[2], ids[4]]
    assert store.counts() == counts_of(active=5)
    assert store.client.zcard(store.keys.active) == 5


def test_orphaned_delayed_member_is_cleaned_by_promotion(store, clock):
    orphan = store.enqueue(req(delay_ms=1000)).id
    good = store.enqueue(req(delay_ms=2000)).id
    _drop(store, orphan)
    clock.advance(5000)
    assert claim_job(store).id == good
    assert store.client.zcard(store.keys.delayed("default")) == 0
    assert store.counts() == counts_of(active=1)


def test_orphaned_delayed_member_does_not_hide_next_run_at(store, clock):
    orphan = store.enqueue(req(delay_ms=1000)).id
    store.enqueue(req(delay_ms=2000))
    _drop(store, orphan)
    empty = claim(store)
    assert isinstance(empty, Empty) and empty.next_run_at == 2000


# ------------------------------------------------------------------ defect 3


def test_sweep_dedupes_keeps_a_live_window_after_a_replace(store, clock):
    key = DedupePolicy(key="k", replace=True)
    owner = store.enqueue(req(dedupe=key, delay_ms=10_000)).id
    again = store.enqueue(
        req(dedupe=DedupePolicy(key="k", ttl_ms=60_000, replace=True), delay_ms=10_000)
    )
    assert again.id == owner and again.duplicate
    store.promote(owner)
    job = claim_job(store)
    store.ack(job.id, "t-1", Complete(None))
    # The 60 s window is live: a new enqueue with the key is a duplicate ...
    assert store.enqueue(req(dedupe=DedupePolicy(key="k"))).duplicate
    store.sweep_dedupes()
    # ... and still is after a sweep.
    third = store.enqueue(req(dedupe=DedupePolicy(key="k")))
    assert third.duplicate and third.id == owner
    clock.advance(60_001)
    store.sweep_dedupes()
    assert not store.enqueue(req(dedupe=DedupePolicy(key="k"))).duplicate


def test_sweep_dedupes_heals_window_entry_listed_as_pending(store, clock):
    """An entry that has a window but is (wrongly) listed as pending is not dropped early."""
    owner = store.enqueue(req(dedupe=DedupePolicy(key="w", ttl_ms=60_000))).id
    member = "TestJob\0w"
    store.client.zadd(store.keys.dedupe_pending, {member: 0})
    claim_job(store)
    store.ack(owner, "t-1", Complete(None))
    store.sweep_dedupes()
    assert store.client.hget(store.keys.dedupe("TestJob", "w"), "job_id") == owner
    assert store.client.zscore(store.keys.dedupe_pending, member) is None
    assert store.enqueue(req(dedupe=DedupePolicy(key="w"))).duplicate


# ------------------------------------------------------------------ defect 4


@pytest.mark.parametrize("due", [450, 1_234])
def test_promotion_of_many_due_jobs_keeps_priority(store, clock, due):
    # Many low-priority jobs due first, one high-priority job due last (1,234: the owed
    # promotions take several bounded promote_due calls).
    store.enqueue_many([req(payload={"n": i}, delay_ms=1000 + i) for i in range(due)])
    urgent = store.enqueue(req(payload={"n": "urgent"}, priority=10, delay_ms=5000)).id
    later = store.enqueue(req(payload={"n": "later"}, priority=99, delay_ms=60_000)).id
    clock.advance(10_000)
    assert claim_job(store).id == urgent
    # Every due job was promoted before the pick, and only the due ones.
    assert store.client.zrange(store.keys.delayed("default"), 0, -1) == [later]
    assert store.counts() == counts_of(waiting=due, active=1, delayed=1)
    # FIFO among the promoted (equal priority): the earliest enqueued comes next.
    assert claim_job(store, token="t-2").payload == {"n": 0}


def test_promotion_of_many_due_jobs_keeps_priority_in_ack_and_claim(store, clock):
    first = store.enqueue(req(payload={"n": "first"})).id
    assert claim_job(store).id == first
    store.enqueue_many([req(payload={"n": i}, delay_ms=1000 + i) for i in range(450)])
    urgent = store.enqueue(req(priority=10, delay_ms=5000)).id
    clock.advance(10_000)
    nxt = store.ack_and_claim(
        first, "t-1", Complete(None), queue="default", names=["TestJob"], next_token="t-2"
    )
    assert isinstance(nxt, Claimed) and nxt.job.id == urgent
    assert store.client.zcard(store.keys.delayed("default")) == 0


def test_promotion_of_many_due_jobs_keeps_priority_in_ack_and_claim_many(store, clock):
    store.enqueue_many([req(payload={"n": i}, delay_ms=1000 + i) for i in range(450)])
    urgent = store.enqueue(req(priority=10, delay_ms=5000)).id
    clock.advance(10_000)
    batch = store.ack_and_claim_many([], queue="default", names=["TestJob"], tokens=["a", "b"])
    assert batch.jobs[0][0].id == urgent
    assert len(batch.jobs) == 2
    assert store.client.zcard(store.keys.delayed("default")) == 0
    assert store.counts() == counts_of(waiting=449, active=2)


# ------------------------------------------------------------------ other scripts


def test_promote_retry_cancel_remove_treat_partial_hash_as_missing(store):
    from store import JobNotFoundError

    job_id = store.enqueue(req(delay_ms=1000)).id
    store.client.hdel(store.keys.job(job_id), "name", "queue")
    for verb in (store.promote, store.retry, store.cancel):
        try:
            verb(job_id)
        except JobNotFoundError:
            pass
        else:  # pragma: no cover - the assertion message names the verb
            raise AssertionError(f"{verb.__name__} accepted a partial hash")
    assert store.remove(job_id) in (True, False)


def test_list_skips_and_heals_orphans(store):
    ids = [store.enqueue(req(payload={"n": i})).id for i in range(4)]
    _drop(store, ids[1])
    page = store.list(limit=10)
    assert [j.id for j in page.items] == [ids[3], ids[2], ids[0]]
    assert ids[1] not in chunked_members(store.client, store.keys.all)


def test_list_survives_partial_hash(store):
    ids = [store.enqueue(req(payload={"n": i})).id for i in range(2)]
    store.client.hdel(store.keys.job(ids[0]), "name", "payload", "enqueued_at")
    page = store.list(limit=10)
    assert ids[1] in [j.id for j in page.items]


def test_extend_locks_reports_orphan_as_lost(store):
    job_id = store.enqueue(req()).id
    claim_job(store)
    _drop(store, job_id)
    result = store.extend_locks([(job_id, "t-1")], 30_000)
    assert result.lost == [job_id]
    assert not store.client.exists(store.keys.job(job_id))


def test_sweep_history_drops_orphans(store, make_store, clock):
    history = make_store(history_ttl=1000)
    job_id = history.enqueue(req()).id
    claim_job(history)
    history.ack(job_id, "t-1", Complete(None))
    _drop(history, job_id)
    clock.advance(5000)
    history.sweep_state()
    assert history.client.zscore(history.keys.finished("completed"), job_id) is None


def test_decoder_never_raises_on_a_partial_hash():
    assert codec.record_from_hash("x", {}).id == "x"
    rec = codec.record_from_hash(
        "y",
        {
            "state": "active",
            "lock_token": "t",
            "payload": "{not json",
            "priority": "high",
            "attempts_made": "",
            "run_at": "soon",
            "metadata": "[1]",
            "keep": '{"bogus": 1}',
            "backoff": '"x"',
            "exit": "{",
            "flow_pending": "two",
        },
    )
    assert rec.state == "active"
    assert rec.name == "" and rec.queue == ""
    assert rec.priority == 0 and rec.run_at == 0


def test_get_jobs_of_partial_hashes(store):
    job_id = store.enqueue(req()).id
    store.client.hdel(store.keys.job(job_id), "name", "queue", "payload")
    rec = store.get_job(job_id)
    assert rec is not None and rec.id == job_id
    assert store.get_jobs([job_id])[0].id == job_id


def test_enqueue_over_a_dedupe_entry_of_a_vanished_job(store):
    owner = store.enqueue(req(dedupe=DedupePolicy(key="v"))).id
    _drop(store, owner)
    fresh = store.enqueue(req(dedupe=DedupePolicy(key="v")))
    assert not fresh.duplicate and fresh.id != owner


def test_list_heal_of_a_state_set_takes_back_its_counter(store, clock):
    done = store.enqueue(req(payload={"n": "done"})).id
    claim_job(store)
    store.ack(done, "t-1", Complete(None))
    later = store.enqueue(req(delay_ms=60_000)).id
    _drop(store, done)
    _drop(store, later)
    assert store.list(states=["completed"], order_by="finished_at").items == []
    assert store.list(queue="default", states=["delayed"], order_by="run_at").items == []
    assert store.counts() == counts_of()


def test_ack_and_release_of_a_vanished_job_drop_its_lock(store):
    from store import JobNotFoundError

    for verb in ("ack", "release"):
        job_id = store.enqueue(req(payload={"verb": verb})).id
        claim_job(store, token=f"t-{verb}")
        _drop(store, job_id)
        try:
            if verb == "ack":
                store.ack(job_id, f"t-{verb}", Complete(None))
            else:
                store.release(job_id, f"t-{verb}")
        except JobNotFoundError:
            pass
        else:  # pragma: no cover
            raise AssertionError(f"{verb} of a vanished job did not raise JobNotFoundError")
        assert store.client.zscore(store.keys.active, job_id) is None
        assert store.counts() == counts_of()


def test_flow_row_with_a_damaged_exit_decodes():
    from store.flows import _child_record
    from store.records import MISSING

    row = _child_record("f", "a", {"status": "completed", "exit": "{broken"})
    assert row.status == "completed" and row.exit is MISSING
