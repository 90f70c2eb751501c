"""list_by_state: every state the dashboard links to is read from the sets holding exactly
that state, so a page is full whatever the other rows of the queue are (no scan budget runs
out behind newer jobs of other states)."""

from __future__ import annotations

import pytest

from store import Complete, EnqueueRequest, Fail, ListOrderUnsupportedError, RedisJobStore
from store.errors import InvalidRequestError
from tests.store.helpers import claim_job


def _page_all(store: RedisJobStore, **kwargs: object) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        page = store.list_by_state(cursor=cursor, limit=7, **kwargs)  # type: ignore[arg-type]
        assert not page.truncated
        assert len(page.item_cursors) == len(page.items)
        ids.extend(job.id for job in page.items)
        cursor = page.cursor
        if cursor is None:
            return ids


def _finish(store: RedisJobStore, queue: str, name: str, fail: bool, clock: object) -> str:
    job = claim_job(store, queue=queue, names=[name], token=f"t-{name}")
    store.ack(job.id, f"t-{name}", Fail({"error": "x"}) if fail else Complete(None))
    clock.advance(1)  # type: ignore[attr-defined]
    return job.id


def test_failed_of_one_queue_behind_many_newer_completed_jobs(store: RedisJobStore, clock):
    failed = []
    for i in range(30):
        store.enqueue(EnqueueRequest(name="Export", queue="export", payload=i))
        failed.append(_finish(store, "export", "Export", True, clock))
    # Many newer rows of other states in the same queue and in other queues.
    store.enqueue_many(
        [EnqueueRequest(name="Export", queue="export", payload=i) for i in range(3000)]
    )
    store.enqueue_many([EnqueueRequest(name="Other", queue="other", payload=i) for i in range(500)])
    first = store.list_by_state(["failed"], queue="export", limit=10, scan_budget=50)
    assert [j.id for j in first.items] == failed[::-1][:10]
    assert first.route == "terminal:<state>:<names of export>"
    assert _page_all(store, states=["failed"], queue="export") == failed[::-1]
    assert _page_all(store, states=["failed"], queue="export", order="asc") == failed
    # The plain list under enqueued order runs out of budget behind the 3,000 newer rows.
    plain = store.list(queue="export", states=["failed"], limit=10)
    assert plain.items == [] and plain.truncated


def test_waiting_in_claim_order_with_priorities(store: RedisJobStore, clock):
    low = store.enqueue(EnqueueRequest(name="A", queue="q", payload=0, priority=0)).id
    clock.advance(5)
    high = [
        store.enqueue(EnqueueRequest(name="B", queue="q", payload=i, priority=5)).id
        for i in range(3)
    ]
    other_queue = store.enqueue(EnqueueRequest(name="A", queue="r", payload=1)).id
    ids = _page_all(store, states=["waiting"], queue="q", order="asc")
    assert ids == [*high, low]
    assert _page_all(store, states=["waiting"], queue="q", order="desc") == [low, *high[::-1]]
    assert _page_all(store, states=["waiting"], queue="q", name="A") == [low]
    everywhere = _page_all(store, states=["waiting"], order="asc")
    assert sorted(everywhere) == sorted([low, *high, other_queue])
    # The first claim takes what the listing puts first.
    job = claim_job(store, queue="q", names=["A", "B"], token="t")
    assert job.id == high[0]
    assert _page_all(store, states=["waiting"], queue="q", order="asc") == [*high[1:], low]


def test_delayed_of_every_queue_by_run_time(store: RedisJobStore, clock):
    a = store.enqueue(EnqueueRequest(name="A", queue="q1", payload=0, delay_ms=3000)).id
    b = store.enqueue(EnqueueRequest(name="A", queue="q2", payload=0, delay_ms=1000)).id
    c = store.enqueue(EnqueueRequest(name="B", queue="q1", payload=0, delay_ms=2000)).id
    store.enqueue(EnqueueRequest(name="A", queue="q1", payload=0))
    assert _page_all(store, states=["delayed"], order="asc") == [b, c, a]
    assert _page_all(store, states=["delayed"], queue="q1", order="asc") == [c, a]
    assert _page_all(store, states=["delayed"], name="A", order="asc") == [b, a]


def test_active_and_previous_page_cursors(store: RedisJobStore, clock):
    for i in range(5):
        store.enqueue(EnqueueRequest(name="A", queue="q", payload=i))
    running = []
    for i in range(5):
        running.append(claim_job(store, queue="q", names=["A"], token=f"t{i}").id)
        clock.advance(10)
    page = store.list_by_state(["active"], queue="q", order="asc", limit=2)
    assert [j.id for j in page.items] == running[:2]
    # A row's own cursor continues right after it, in both directions.
    after_first = store.list_by_state(
        ["active"], queue="q", order="asc", cursor=page.item_cursors[0], limit=2
    )
    assert [j.id for j in after_first.items] == running[1:3]
    back = store.list_by_state(
        ["active"], queue="q", order="desc", cursor=after_first.item_cursors[1], limit=5
    )
    assert [j.id for j in back.items] == running[:2][::-1]


def test_mixed_or_unknown_states_are_refused(store: RedisJobStore):
    with pytest.raises(ListOrderUnsupportedError):
        store.list_by_state(["failed", "waiting"])
    with pytest.raises(ListOrderUnsupportedError):
        store.list_by_state(["waiting-children", "active"])
    with pytest.raises(InvalidRequestError):
        store.list_by_state(["nope"])
    with pytest.raises(InvalidRequestError):
        store.list_by_state(["failed"], queue="")


def test_flow_parents_waiting_for_children_are_listed_exactly(store, clock, redis_client):
    from store import FanOut, FlowChildReport, FlowChildSpec, ParentEnvelope
    from store.flow_runtime import child_job_id

    parents = []
    for n in range(3):
        parent = store.enqueue(EnqueueRequest(name="Parent", queue="reports", payload=n)).id
        claim_job(store, queue="reports", names=["Parent"], token=f"p{n}")
        spec = FlowChildSpec(
            child_key="only",
            store_key=store.store_key,
            request=EnqueueRequest(
                id=child_job_id(store.store_key, parent, "only"),
                name="Child",
                queue="parts",
                parent=ParentEnvelope("F", parent, "only", store.store_key, 1),
            ),
        )
        store.ack(parent, f"p{n}", FanOut(False, [spec]))
        parents.append(parent)
        clock.advance(10)
    # Many newer rows of the queue in other states.
    store.enqueue_many(
        [EnqueueRequest(name="Parent", queue="reports", payload=i) for i in range(2500)]
    )
    page = store.list_by_state(["waiting-children"], queue="reports", scan_budget=50)
    assert [j.id for j in page.items] == parents[::-1] and not page.truncated
    assert page.route == "parked:reports"
    assert _page_all(store, states=["waiting-children"], order="asc") == parents
    # Leaving the state leaves the set: all children reported -> waiting; cancelled.
    store.record_child_results(
        [FlowChildReport(flow_id=parents[0], child_key="only", outcome="completed", exit=None)]
    )
    store.cancel(parents[1])
    assert [j.id for j in store.list_by_state(["waiting-children"]).items] == [parents[2]]
    assert redis_client.zcard(store.keys.parked("reports")) == 1
