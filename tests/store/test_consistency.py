"""The consistency checker (store.consistency, behind ``manage.py mqcheck``)."""

from __future__ import annotations

from typing import Any

import pytest

from store import Claimed, Complete
from store.chunks import CHUNK_CAPACITY
from store.consistency import KINDS, PAGE, check_store, last_check
from store.records import DedupePolicy
from tests.flows.helpers import fanout_parent
from tests.store.helpers import (
    assert_chunked_set,
    chunked_members,
    chunked_remove,
    claim_job,
    fold_head,
    req,
)


def _states(store: Any) -> dict[str, str]:
    """A store with a job in each common state: name -> id."""
    ids = {
        "waiting": store.enqueue(req(payload={"n": "w"})).id,
        "delayed": store.enqueue(req(payload={"n": "d"}, delay_ms=60_000)).id,
    }
    active = store.enqueue(req(payload={"n": "a"}, queue="q2")).id
    assert claim_job(store, queue="q2").id == active
    ids["active"] = active
    done = store.enqueue(req(payload={"n": "c"}, queue="q3")).id
    assert claim_job(store, queue="q3", token="t-c").id == done
    store.ack(done, "t-c", Complete({"ok": True}))
    ids["completed"] = done
    return ids


def _true_counts(store: Any) -> dict[str, dict[str, int]]:
    """Counts from the job hashes themselves (a test-side recount)."""
    out: dict[str, dict[str, int]] = {}
    for key in store.client.scan_iter(match=store.keys.tag + ":job:*", count=500):
        h = store.client.hmget(key, "queue", "state")
        out.setdefault(h[0], {}).setdefault(h[1], 0)
        out[h[0]][h[1]] += 1
    return out


def _counters(store: Any) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for queue, states in store.counts_by_queue().items():
        nonzero = {s: n for s, n in states.items() if n}
        if nonzero:
            out[queue] = nonzero
    return out


def test_a_healthy_store_is_consistent(store, clock):
    _states(store)
    fanout_parent(store, children=("a", "b"), queue="fq")
    store.enqueue(req(dedupe=DedupePolicy(key="k")))
    report = check_store(store)
    assert report.found == {}, report.samples
    assert report.consistent and report.unsettled == 0
    assert report.jobs == 6
    saved = last_check(store)
    assert saved is not None and saved["consistent"] is True and saved["jobs"] == 6


def test_deleted_hashes_in_every_state_are_found_and_repaired(store, clock):
    ids = _states(store)
    for job_id in ids.values():
        store.client.delete(store.keys.job(job_id))
    report = check_store(store)
    assert not report.consistent
    assert report.found["dangling_member"] >= 4
    assert report.found["counter"] == 4  # one counter per state (and queue)
    assert report.repaired == {}
    # A report-only check writes nothing.
    assert len(chunked_members(store.client, store.keys.all)) == 4
    fixed = check_store(store, repair=True)
    assert fixed.consistent and fixed.unrepaired == 0
    assert len(chunked_members(store.client, store.keys.all)) == 0
    assert _counters(store) == {}
    again = check_store(store)
    assert again.found == {} and again.consistent


def test_counters_are_exact_after_repair_with_survivors(store, clock):
    ids = [store.enqueue(req(payload={"n": i})).id for i in range(30)]
    for job_id in ids[:5]:
        claim_job(store, token=f"t-{job_id}")
    for job_id in ids[::7]:
        store.client.delete(store.keys.job(job_id))
    store.client.hincrby(store.keys.counts, "default|completed", 3)
    assert check_store(store, repair=True).consistent
    assert _counters(store) == _true_counts(store)
    assert check_store(store).found == {}


def test_missing_state_set_membership_is_restored(store):
    job_id = store.enqueue(req()).id
    member = next(iter(store.client.zrange(store.keys.waiting("default", "TestJob"), 0, -1)))
    store.client.zrem(store.keys.waiting("default", "TestJob"), member)
    report = check_store(store, repair=True)
    assert report.found == {"missing_from_state_set": 1}
    assert claim_job(store).id == job_id


def test_missing_from_all_and_index(store):
    job_id = store.enqueue(req()).id
    fold_head(store)  # the row is in the chunks, to be damaged there
    chunked_remove(store.client, store.keys.all, job_id)
    chunked_remove(store.client, store.keys.byname("TestJob"), job_id)
    chunked_remove(store.client, store.keys.byqueue("default"), job_id)
    report = check_store(store)
    # Each emptied chunk leaves a directory entry of a gone chunk, and each set's size
    # counter still says 1.
    assert report.found == {
        "missing_from_all": 1,
        "missing_from_index": 2,
        "index_chunk": 3,
        "index_count": 3,
    }
    assert check_store(store, repair=True).unrepaired == 0
    assert [j.id for j in store.list(name="TestJob").items] == [job_id]
    assert [j.id for j in store.list(queue="default").items] == [job_id]
    assert check_store(store).found == {}
    for directory in (store.keys.all, store.keys.byname("TestJob"), store.keys.byqueue("default")):
        assert assert_chunked_set(store.client, directory, store.keys.index_counts) == {
            job_id: store.get_job(job_id).enqueued_at
        }


def test_chunk_damage_is_found_and_repaired(store, clock):
    ids = []
    for i in range(300):
        ids.append(store.enqueue(req(payload={"n": i})).id)
        clock.advance(1)
    fold_head(store)  # every row in the chunks, to be damaged there
    keys = store.keys
    entries = store.client.zrange(keys.all, 0, -1)
    assert len(entries) >= 3
    # A lost directory entry (its chunk becomes a stray), a lost chunk (its entry dangles),
    # a bound that no longer names the chunk's first member, and a drifted size.
    store.client.zrem(keys.all, entries[0])
    lost = keys.chunk(keys.all, entries[1].split("\0")[1])
    lost_ids = set(store.client.zrange(lost, 0, -1))
    store.client.delete(lost)
    third = entries[2]
    score = store.client.zscore(keys.all, third)
    store.client.zrem(keys.all, third)
    number = third.split("\0")[1]
    store.client.zadd(keys.all, {f"j-\0{number}": score})  # below its first member "j-2.."
    store.client.hincrby(keys.index_counts, keys.all, 7)
    report = check_store(store)
    assert report.found["index_chunk"] == 3
    assert report.found["index_count"] == 1
    # The stray chunk's members cannot be reached from the directory either.
    stray = set(store.client.zrange(keys.chunk(keys.all, entries[0].split("\0")[1]), 0, -1))
    assert report.found["missing_from_all"] == len(lost_ids) + len(stray) == 2 * CHUNK_CAPACITY
    fixed = check_store(store, repair=True)
    assert fixed.unrepaired == 0, fixed.samples
    assert check_store(store).found == {}
    listed = assert_chunked_set(store.client, keys.all, keys.index_counts)
    assert set(listed) == set(ids)
    assert [j.id for j in store.list(order="asc", limit=300).items] == ids


def test_disabled_index_is_not_required(make_store):
    unindexed = make_store(indexes={"name": False, "queue": True})
    unindexed.enqueue(req())
    assert check_store(unindexed).found == {}


def test_stray_locks_both_ways(store, clock):
    waiting = store.enqueue(req()).id
    store.client.hset(store.keys.job(waiting), mapping={"lock_token": "x", "lock_expires_at": "9"})
    other = store.enqueue(req(queue="q2")).id
    store.client.zadd(store.keys.active, {other: 5})
    report = check_store(store, repair=True)
    assert report.found == {"stray_lock": 2}
    assert not store.client.hexists(store.keys.job(waiting), "lock_token")
    assert store.client.zscore(store.keys.active, other) is None
    assert check_store(store).found == {}


def test_wrong_set_member(store):
    job_id = store.enqueue(req()).id
    store.client.zadd(store.keys.delayed("default"), {job_id: 1})
    store.client.zadd(store.keys.finished("failed"), {job_id: 1})
    report = check_store(store, repair=True)
    assert report.found == {"wrong_set_member": 2}
    assert store.client.zcard(store.keys.delayed("default")) == 0
    assert check_store(store).found == {}


def test_partial_hash_is_reported_and_deleted(store):
    job_id = store.enqueue(req()).id
    store.client.hdel(store.keys.job(job_id), "name", "seq")
    report = check_store(store)
    assert report.found.get("partial_hash") == 1
    assert check_store(store, repair=True).consistent
    assert not store.client.exists(store.keys.job(job_id))
    assert check_store(store).found == {}
    assert _counters(store) == {}


def test_dedupe_entries(store, clock):
    gone = store.enqueue(req(dedupe=DedupePolicy(key="gone"))).id
    store.enqueue(req(dedupe=DedupePolicy(key="live-window", ttl_ms=60_000)))
    window_gone = store.enqueue(req(dedupe=DedupePolicy(key="window", ttl_ms=60_000))).id
    store.client.delete(store.keys.job(gone))
    store.client.delete(store.keys.job(window_gone))
    # An index member without an entry, and an entry out of its index.
    store.client.zadd(store.keys.dedupe_pending, {"TestJob\0nothing": 0})
    unindexed = store.enqueue(req(dedupe=DedupePolicy(key="unindexed"))).id
    store.client.zrem(store.keys.dedupe_pending, "TestJob\0unindexed")
    report = check_store(store)
    dedupe_found = {k: v for k, v in report.found.items() if k.startswith("dedupe")}
    # The live window of a vanished job is fine; the pending entry of a vanished job is not.
    assert dedupe_found == {"dedupe_dangling": 2, "dedupe_unindexed": 1}
    check_store(store, repair=True)
    assert not store.client.exists(store.keys.dedupe("TestJob", "gone"))
    assert store.client.exists(store.keys.dedupe("TestJob", "window"))
    assert store.enqueue(req(dedupe=DedupePolicy(key="unindexed"))).id == unindexed
    assert check_store(store).found == {}


def test_flow_counters_and_orphan_rows(store, clock):
    pid = fanout_parent(store, children=("a", "b", "c"))
    store.client.hset(store.keys.job(pid), "flow_pending", "1")
    report = check_store(store)
    assert report.found == {"flow_counter": 1}
    assert check_store(store, repair=True).consistent
    assert store.get_job(pid).flow.pending == 3
    # Rows outliving their parent.
    orphan = fanout_parent(store, children=("x", "y"), token="t-2")
    store.client.delete(store.keys.job(orphan))
    report = check_store(store, repair=True)
    assert report.found.get("flow_orphan_rows") == 1
    assert not store.client.exists(store.keys.flowchildren(orphan))
    assert check_store(store).found == {}


def test_many_pages(store, clock):
    n = PAGE * 2 + 17
    ids = [r.id for r in store.enqueue_many([req(payload={"i": i}) for i in range(n)])]
    for job_id in ids[::50]:
        store.client.delete(store.keys.job(job_id))
    report = check_store(store, repair=True)
    assert report.jobs == n - len(ids[::50])
    assert report.consistent
    assert store.counts()["waiting"] == n - len(ids[::50])
    batch = store.ack_and_claim_many(
        [], queue="default", names=["TestJob"], tokens=[f"t{i}" for i in range(5)]
    )
    assert len(batch.jobs) == 5


def test_progress_and_stop(store):
    for i in range(3):
        store.enqueue(req(payload={"i": i}))
    seen: list[str] = []
    report = check_store(store, progress=lambda phase, done, total: seen.append(phase))
    assert {"jobs", "sets", "counters"} <= set(seen)
    calls = {"n": 0}

    def stop() -> bool:
        calls["n"] += 1
        return calls["n"] > 3

    stopped = check_store(store, should_stop=stop)
    assert stopped.interrupted and not stopped.consistent
    assert report.consistent


def test_every_kind_has_words():
    from store.consistency import REPAIRS

    assert set(KINDS) == set(REPAIRS)


@pytest.mark.parametrize("state", ["waiting", "active"])
def test_claim_after_repair(store, clock, state):
    a = store.enqueue(req(payload={"n": 1})).id
    b = store.enqueue(req(payload={"n": 2})).id
    if state == "active":
        claim_job(store)
    store.client.delete(store.keys.job(a))
    check_store(store, repair=True)
    got = store.claim(queue="default", names=["TestJob"], token="t-9")
    if state == "waiting":
        assert isinstance(got, Claimed) and got.job.id == b
    assert check_store(store).found == {}
