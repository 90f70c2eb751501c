"""Per-error aggregates kept at fail time: groups by error type and normalised message,
with counts, first/last seen and the failed jobs of each group, bounded in size."""

from __future__ import annotations

import pytest

from store import EnqueueRequest, Fail, Retry
from store.errors import InvalidRequestError
from store.jobs import encode_failure
from tests.store.helpers import claim_job


def fail_with(store, exc: BaseException, queue: str = "q", name: str = "A") -> str:
    store.enqueue(EnqueueRequest(name=name, queue=queue, payload=1))
    job = claim_job(store, queue=queue, names=[name], token="t")
    try:
        raise exc
    except BaseException as raised:
        store.ack(job.id, "t", Fail(encode_failure(raised)))
    return job.id


def test_failures_are_grouped_by_type_and_message(store, clock):
    timeouts = []
    for i in range(3):
        timeouts.append(fail_with(store, TimeoutError(f"upstream timed out after {30 + i} s")))
        clock.advance(1000)
    value = fail_with(store, ValueError("bad row"), queue="other", name="B")
    groups = store.error_groups()
    assert [g.type for g in groups] == ["ValueError", "TimeoutError"]
    vgroup, tgroup = groups
    assert tgroup.count == 3 and tgroup.jobs_kept == 3
    assert tgroup.message == "upstream timed out after 30 s"  # the first sample
    assert tgroup.first_seen == clock() - 3000 and tgroup.last_seen == clock() - 1000
    assert tgroup.last_job == timeouts[-1] and tgroup.last_queue == "q"
    assert (vgroup.count, vgroup.last_job, vgroup.last_name) == (1, value, "B")
    assert store.error_group(tgroup.id) == tgroup
    listed = store.list_by_error(tgroup.id)
    assert [j.id for j in listed.items] == timeouts[::-1]
    assert [j.id for j in store.list_by_error(tgroup.id, order="asc", limit=2).items] == timeouts[
        :2
    ]
    assert store.list_by_error(tgroup.id, queue="other").items == []


def test_a_retried_job_leaves_the_listing_but_the_count_stays(store, clock):
    first = fail_with(store, KeyError("missing"))
    second = fail_with(store, KeyError("missing"))
    [group] = store.error_groups()
    store.retry(first)
    assert [j.id for j in store.list_by_error(group.id).items] == [second]
    assert store.error_group(group.id).count == 2  # type: ignore[union-attr]
    store.remove(second)
    assert store.list_by_error(group.id).items == []


def test_retry_outcomes_and_completions_are_not_counted(store):
    store.enqueue(EnqueueRequest(name="A", queue="q", payload=1, attempts_max=3))
    job = claim_job(store, queue="q", names=["A"], token="t")
    store.ack(job.id, "t", Retry(0, {"error": {"type": "X", "message": "m"}}))
    assert store.error_groups() == []


def test_groups_and_kept_jobs_are_bounded(store, redis_client, clock):
    # The cap (1,000 groups) is a Lua constant; fill the index up to it cheaply.
    clock.advance(5000)
    gid_key = store.keys.errors()
    redis_client.zadd(gid_key, {f"{i:016x}": i for i in range(1, 1001)})
    fail_with(store, RuntimeError("one more"))
    assert redis_client.zcard(gid_key) == 1000
    # The group seen longest ago was evicted to make room.
    assert redis_client.zscore(gid_key, f"{1:016x}") is None
    assert redis_client.zscore(gid_key, f"{2:016x}") is not None
    # Each group keeps at most the newest 10,000 failed job ids.
    [group] = [g for g in store.error_groups(limit=200) if g.type == "RuntimeError"]
    jobs_key = store.keys.error_jobs(group.id)
    redis_client.zadd(jobs_key, {f"old-{i}": i for i in range(10_000)})
    fail_with(store, RuntimeError("one more"))
    assert redis_client.zcard(jobs_key) == 10_000
    assert redis_client.zscore(jobs_key, "old-0") is None


def test_unknown_group_ids_are_rejected(store):
    with pytest.raises(InvalidRequestError):
        store.list_by_error("nope")
    with pytest.raises(InvalidRequestError):
        store.error_group("../x")
    assert store.error_group("0" * 16) is None


def test_removed_and_pruned_jobs_leave_no_trace_in_their_group(store, redis_client, prefix):
    from store.insights import error_group_id
    from tests.store.helpers import traces_of

    kept = fail_with(store, OSError("disk full on /var/7"))
    [group] = store.error_groups()
    # The Python mirror of the Lua grouping key (used for the explorer's error links).
    assert group.id == error_group_id("OSError", "builtins", "disk full on /var/7")
    assert group.id == error_group_id("OSError", "builtins", "disk full on /var/12")
    assert store.remove(kept)
    assert traces_of(redis_client, prefix, kept) == []
    store.enqueue(EnqueueRequest(name="A", queue="q", payload=1, keep={"failed": {"count": 0}}))
    job = claim_job(store, queue="q", names=["A"], token="t")
    store.ack(job.id, "t", Fail(encode_failure(OSError("disk full on /var/8"))))
    assert store.get_job(job.id) is None
    assert traces_of(redis_client, prefix, job.id) == []
    assert store.error_group(group.id).count == 2  # type: ignore[union-attr]
