"""The store's list of lately settled flow parents (``flows:settled``, lua/lib/parked.lua).

Written where a parent with a manifest reaches a terminal state, capped to the newest
``FLOWS_SETTLED_CAP``, dropped on retry and delete; ``settled_flows`` pages it newest
first with a keyset cursor that survives ties on the settled time.
"""

from __future__ import annotations

from typing import Any

import pytest

from store import (
    Claimed,
    Complete,
    EnqueueRequest,
    FakeClock,
    InvalidRequestError,
    RedisJobStore,
)
from store.keys import FLOWS_SETTLED_CAP
from tests.flows.helpers import claim, fanout_parent, record1, report


def _settle_completed(store: RedisJobStore, clock: FakeClock, **request: Any) -> str:
    """A parent fans out to one child, the child reports, the collect phase completes."""
    pid = fanout_parent(store, ("a",), **request)
    assert record1(store, report(pid, "a", "completed")).parent_settled
    claimed = claim(store, token="t-collect", names=[request.get("name", "TestJob")])
    assert isinstance(claimed, Claimed) and claimed.job.id == pid
    store.ack(pid, "t-collect", Complete({"done": True}))
    return pid


def _ids(store: RedisJobStore, **kwargs: Any) -> list[str]:
    return [item.flow_id for item in store.settled_flows(**kwargs).items]


def test_completed_failed_and_cancelled_parents_are_listed_newest_first(
    store: RedisJobStore, clock: FakeClock
) -> None:
    clock.set(1_000)
    done = _settle_completed(store, clock)
    clock.set(2_000)
    fast = fanout_parent(store, ("a", "b"), fail_fast=True, token="t-fast")
    assert record1(store, report(fast, "a", "failed")).parent_settled
    clock.set(3_000)
    parked = fanout_parent(store, ("a",), token="t-cancel")
    store.cancel(parked)
    clock.set(4_000)
    waiting = fanout_parent(store, ("a",), token="t-wait")  # still in waiting-children
    plain = store.enqueue(EnqueueRequest(name="TestJob", payload={})).id  # never a flow
    page = store.settled_flows()
    assert [(i.flow_id, i.settled_at) for i in page.items] == [
        (parked, 3_000),
        (fast, 2_000),
        (done, 1_000),
    ]
    assert page.cursor is None
    assert waiting not in _ids(store) and plain not in _ids(store)
    states = {i.flow_id: store.get_job(i.flow_id).state for i in page.items}  # type: ignore[union-attr]
    assert states == {parked: "cancelled", fast: "failed", done: "completed"}


def test_a_job_that_never_fanned_out_is_not_listed(store: RedisJobStore) -> None:
    jid = store.enqueue(EnqueueRequest(name="TestJob", payload={})).id
    assert isinstance(claim(store, token="t"), Claimed)
    store.ack(jid, "t", Complete(None))
    assert store.settled_flows().items == []


def test_retry_and_remove_take_a_parent_out(store: RedisJobStore, clock: FakeClock) -> None:
    fast = fanout_parent(store, ("a", "b"), fail_fast=True, token="t-fast")
    record1(store, report(fast, "a", "failed"))
    done = _settle_completed(store, clock)
    assert set(_ids(store)) == {fast, done}
    store.retry(fast)
    assert _ids(store) == [done]
    store.remove(done)
    assert _ids(store) == []


def test_pages_cross_ties_without_loss_or_repeats(store: RedisJobStore, clock: FakeClock) -> None:
    """Seven parents settle in the same millisecond, two more later: pages of two."""
    clock.set(5_000)
    same = [
        fanout_parent(store, ("a",), token=f"t-{n}", payload={"n": n}, id=f"p-{n}")
        for n in range(7)
    ]
    for pid in same:
        store.cancel(pid)
    clock.set(6_000)
    later = []
    for n in range(2):
        pid = fanout_parent(store, ("a",), token=f"t-later-{n}", id=f"later-{n}")
        store.cancel(pid)
        later.append(pid)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = store.settled_flows(cursor=cursor, limit=2)
        pages += 1
        seen.extend(i.flow_id for i in page.items)
        if page.cursor is None:
            break
        cursor = page.cursor
    assert pages == 5
    assert sorted(seen) == sorted(same + later)
    assert len(seen) == len(set(seen))
    assert seen[:2] == sorted(later, reverse=True)  # newest first, ties by id descending


def test_the_set_keeps_only_the_newest(
    store: RedisJobStore, clock: FakeClock, redis_client: Any
) -> None:
    """Past the cap the oldest entries go (seeded directly: settling 1,000 flows is slow)."""
    key = store.keys.flows_settled
    redis_client.zadd(key, {f"old-{n:04d}": n for n in range(FLOWS_SETTLED_CAP)})
    clock.set(10_000_000)
    newest = fanout_parent(store, ("a",), token="t-new")
    store.cancel(newest)
    assert redis_client.zcard(key) == FLOWS_SETTLED_CAP
    assert redis_client.zscore(key, "old-0000") is None
    assert _ids(store, limit=1) == [newest]


@pytest.mark.parametrize("cursor", ["", "abc", "12", ":x", "12:", "-1:x", "1.5:x"])
def test_a_malformed_cursor_is_refused(store: RedisJobStore, cursor: str) -> None:
    with pytest.raises(InvalidRequestError):
        store.settled_flows(cursor=cursor)
