"""Keyspace hygiene: a deleted job leaves no trace under the store's prefix.

Checked generically (the key layout is the store's business): after keep pruning,
``remove`` or a history sweep no key name, zset/set member, hash field or value, list
element or string value may still mention the deleted job's id. Ids are unique markers
so a substring match cannot hit another job.
"""

from __future__ import annotations

from store import Cancelled, Complete, Fail, Retry
from tests.store.helpers import claim_id, finish, req, traces_of


def test_keep_count_zero_prunes_every_trace_of_the_job(store, redis_client, prefix):
    job_id = "pruned-job-5f1c"
    store.enqueue(req(id=job_id, keep={"completed": {"count": 0}}, metadata={"m": "v"}))
    claim_id(store, job_id)
    assert traces_of(redis_client, prefix, job_id), "the checker must see the live job"
    store.ack(job_id, "t-1", Complete({"ok": True}))
    assert store.get_job(job_id) is None
    assert traces_of(redis_client, prefix, job_id) == []


def test_keep_count_one_prunes_the_older_job_entirely(store, redis_client, prefix, clock):
    old_id, new_id = "older-job-a9d3", "newer-job-a9d3"
    keep = {"completed": {"count": 1}}
    store.enqueue(req(id=old_id, attempts_max=2, keep=keep))
    claim_id(store, old_id, token="t-a")
    store.ack(old_id, "t-a", Retry(delay_ms=0, exit={"r": 1}))  # two ledger entries
    finish(store, old_id, Complete({"n": 1}), token="t-b")
    clock.advance(10)
    store.enqueue(req(id=new_id, keep=keep))
    assert traces_of(redis_client, prefix, old_id)
    finish(store, new_id, Complete({"n": 2}), token="t-c")
    assert store.get_job(old_id) is None
    assert traces_of(redis_client, prefix, old_id) == []
    assert traces_of(redis_client, prefix, new_id), "the kept job keeps its keys"


def test_remove_leaves_no_trace(store, redis_client, prefix, clock):
    ids = {
        "waiting": "rm-waiting-31b0",
        "delayed": "rm-delayed-31b0",
        "completed": "rm-completed-31b0",
        "failed": "rm-failed-31b0",
        "cancelled": "rm-cancelled-31b0",
    }
    store.enqueue(req(id=ids["completed"]))
    finish(store, ids["completed"], Complete({"ok": 1}), token="t-c")
    store.enqueue(req(id=ids["failed"]))
    finish(store, ids["failed"], Fail({"bad": 1}), token="t-f")
    store.enqueue(req(id=ids["cancelled"], attempts_max=2))
    claim_id(store, ids["cancelled"], token="t-x")
    store.cancel(ids["cancelled"])
    store.ack(ids["cancelled"], "t-x", Cancelled())
    store.enqueue(req(id=ids["waiting"], metadata={"tenant": "acme"}))
    store.enqueue(req(id=ids["delayed"], delay_ms=60000))
    for state, job_id in ids.items():
        assert store.get_job(job_id).state == state
        assert traces_of(redis_client, prefix, job_id)
        assert store.remove(job_id) is True
        assert traces_of(redis_client, prefix, job_id) == [], state


def test_history_sweep_leaves_no_trace(make_store, redis_client, prefix, clock):
    store = make_store(history_ttl=1000)
    job_id = "swept-job-08e7"
    store.enqueue(req(id=job_id))
    finish(store, job_id, Fail({"bad": 1}))
    clock.set(1000)
    assert store.sweep_state()["deleted"] == 1
    assert traces_of(redis_client, prefix, job_id) == []


def test_cancel_keep_pruning_leaves_no_trace(store, redis_client, prefix):
    job_id = "cancel-pruned-6d2e"
    store.enqueue(req(id=job_id, keep={"cancelled": {"count": 0}}, delay_ms=5000))
    store.cancel(job_id)
    assert store.get_job(job_id) is None
    assert traces_of(redis_client, prefix, job_id) == []
