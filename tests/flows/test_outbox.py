"""OBX — the child-side outbox (conformance-cases.md §14), and the relay over it
(runtime.md §7.6, redis-layout.md §4.26, H18: unroutable entries are counted and never block).
"""

from __future__ import annotations

from typing import Any

from store import (
    MISSING,
    Claimed,
    Complete,
    EnqueueRequest,
    FanOut,
    JobRecord,
    ParentEnvelope,
    RedisJobStore,
    Retry,
    StoreRegistry,
)
from store.flow_runtime import relay_outbox
from tests.flows.helpers import (
    claim,
    env,
    fanout_parent,
    outcomes,
    record1,
    report,
    row_map,
    spec,
    state_of,
)


def _child(store: RedisJobStore, key: str, flow_id: str = "remote-flow-1", **overrides: Any) -> str:
    fields: dict[str, Any] = {
        "name": "TestJob",
        "payload": {"child": key},
        "parent": env(flow_id, key),
    }
    fields.update(overrides)
    return store.enqueue(EnqueueRequest(**fields)).id


def _claim(store: RedisJobStore, job_id: str, token: str, **kwargs: Any) -> JobRecord:
    claimed = claim(store, token=token, **kwargs)
    assert isinstance(claimed, Claimed), claimed
    assert claimed.job.id == job_id
    return claimed.job


def _summary(store: RedisJobStore, limit: int = 10) -> list[tuple[str, str]]:
    return [(e.report.child_key, e.report.outcome) for e in store.peek_outbox(limit=limit)]


def test_obx_01_terminal_transitions_of_envelope_carrying_jobs_land_in_the_outbox(
    store: RedisJobStore, clock: Any
) -> None:
    plain = store.enqueue(EnqueueRequest(name="TestJob", payload={"plain": True})).id
    _claim(store, plain, "t-plain")
    store.ack(plain, "t-plain", Complete({"plain": 1}))
    assert store.peek_outbox(limit=10) == []
    assert store.outbox_depth() == 0

    acked = _child(store, "acked")
    _claim(store, acked, "t-acked")
    store.ack(acked, "t-acked", Complete({"sent": 1}))
    cancelled = _child(store, "cancelled", delay_ms=60000)
    store.cancel(cancelled)
    stalled = _child(store, "stalled")
    _claim(store, stalled, "t-stalled", lock_duration_ms=1000)
    clock.advance(2000)
    assert [(r.id, r.failed) for r in store.recover_stalled(0)] == [(stalled, True)]

    head2 = store.peek_outbox(limit=2)
    assert [e.report.child_key for e in head2] == ["acked", "cancelled"]
    head = head2[0]
    assert head.flow_name == "test-flow"
    assert head.parent_store_key == "main"
    assert head.report.flow_id == "remote-flow-1"
    assert head.report.outcome == "completed"
    assert head.report.exit == {"sent": 1}
    entries = store.peek_outbox(limit=10)
    assert [e.report.outcome for e in entries] == ["completed", "cancelled", "failed"]
    assert entries[1].report.exit is MISSING
    failed = entries[2].report
    assert failed.exit is MISSING
    assert failed.failed_reason == "job stalled more than allowable limit"
    assert store.outbox_depth() == 3
    # Peeking does not consume.
    assert [e.id for e in store.peek_outbox(limit=10)] == [e.id for e in entries]

    store.delete_outbox([head.id, "ghost-id"])
    assert [e.report.child_key for e in store.peek_outbox(limit=10)] == ["cancelled", "stalled"]
    store.delete_outbox([head.id])
    assert len(store.peek_outbox(limit=10)) == 2
    # ``after`` continues strictly after an issued id, even a deleted one.
    assert [e.report.child_key for e in store.peek_outbox(limit=10, after=head.id)] == [
        "cancelled",
        "stalled",
    ]
    assert [e.report.child_key for e in store.peek_outbox(limit=10, after=entries[1].id)] == [
        "stalled"
    ]
    assert store.peek_outbox(limit=10, after=entries[2].id) == []
    assert store.peek_outbox(limit=0) == []
    # Anything that is not an id this store issued is treated as unset.
    assert [e.id for e in store.peek_outbox(limit=10, after="ghost-id")] == [
        e.id for e in entries[1:]
    ]
    # remove appends nothing.
    removed = _child(store, "removed")
    assert store.remove(removed) is True
    assert store.outbox_depth() == 2


def test_obx_03_cancels_honoured_by_retry_ack_stall_sweep_and_parked_parent_land_in_the_outbox(
    store: RedisJobStore, clock: Any
) -> None:
    rc = _child(store, "retry-cancel")
    _claim(store, rc, "t-a")
    store.cancel(rc)
    store.ack(rc, "t-a", Retry(0, None))
    assert state_of(store, rc) == "cancelled"
    assert outcomes(store, rc) == ["cancelled"]

    sc = _child(store, "stall-cancel")
    _claim(store, sc, "t-b", lock_duration_ms=1000)
    store.cancel(sc)
    clock.advance(2000)
    store.recover_stalled(5)
    assert state_of(store, sc) == "cancelled"

    pc = _child(store, "parked-cancel")
    _claim(store, pc, "t-c")
    store.ack(pc, "t-c", FanOut(False, [spec(pc, "a")]))
    assert state_of(store, pc) == "waiting-children"
    assert _summary(store) == [("retry-cancel", "cancelled"), ("stall-cancel", "cancelled")]
    store.cancel(pc)
    assert state_of(store, pc) == "cancelled"
    assert _summary(store) == [
        ("retry-cancel", "cancelled"),
        ("stall-cancel", "cancelled"),
        ("parked-cancel", "cancelled"),
    ]


def test_obx_04_a_cancel_honoured_on_release_lands_in_the_outbox(store: RedisJobStore) -> None:
    job_id = _child(store, "released", flow_id="remote-flow-2")
    _claim(store, job_id, "t-run")
    store.cancel(job_id)
    assert store.peek_outbox(limit=10) == []  # only a request so far
    store.release(job_id, "t-run")
    assert state_of(store, job_id) == "cancelled"
    entries = store.peek_outbox(limit=10)
    assert [e.report.outcome for e in entries] == ["cancelled"]
    assert entries[0].report.child_key == "released"
    assert entries[0].report.flow_id == "remote-flow-2"


def test_obx_05_a_cancel_racing_a_nested_parents_fan_out_reports_upward(
    store: RedisJobStore,
) -> None:
    envelope = ParentEnvelope("outer-flow", "outer-2", "inner-raced", "outer-store", 1)
    inner = store.enqueue(
        EnqueueRequest(name="TestJob", payload={"inner": True}, parent=envelope)
    ).id
    _claim(store, inner, "t-inner")
    store.cancel(inner)
    store.ack(inner, "t-inner", FanOut(False, [spec(inner, "a")]))
    job = store.get_job(inner)
    assert job is not None and job.state == "cancelled"
    assert outcomes(store, inner) == ["fanned-out", "cancelled"]
    a = row_map(store, inner)["a"]
    assert (a.status, a.cascaded) == ("cancelled", False)
    entries = store.peek_outbox(limit=10)
    assert [e.report.outcome for e in entries] == ["cancelled"]
    assert entries[0].report.child_key == "inner-raced"
    assert entries[0].report.flow_id == "outer-2"
    assert entries[0].flow_name == "outer-flow"
    assert entries[0].parent_store_key == "outer-store"


def test_obx_06_a_fail_fast_settle_of_a_nested_parent_reports_upward_parking_alone_does_not(
    store: RedisJobStore,
) -> None:
    envelope = ParentEnvelope("outer-flow", "outer-1", "inner", "outer-store", 1)
    inner = fanout_parent(store, ["a"], fail_fast=True, parent=envelope)
    assert state_of(store, inner) == "waiting-children"
    assert store.peek_outbox(limit=10) == []
    record1(store, report(inner, "a", "failed"))
    entries = store.peek_outbox(limit=10)
    assert len(entries) == 1
    entry = entries[0]
    assert entry.flow_name == "outer-flow"
    assert entry.report.flow_id == "outer-1"
    assert entry.report.child_key == "inner"
    assert entry.report.outcome == "failed"
    assert entry.report.exit is MISSING
    assert entry.report.failed_reason is not None and '"a" failed' in entry.report.failed_reason


# ---------------------------------------------------------------- the relay


def test_relay_delivers_then_deletes_and_redelivery_is_a_no_op(
    main_store: RedisJobStore, child_store: RedisJobStore, registry: StoreRegistry
) -> None:
    pid = fanout_parent(main_store, ["a", "b"], store_key="children")
    for key in ("a", "b"):
        request = EnqueueRequest(
            id=f"child-{key}", name="ChildJob", payload={"k": key}, parent=env(pid, key)
        )
        child_store.enqueue(request)
        claimed = claim(child_store, token=f"t-{key}", names=["ChildJob"])
        assert isinstance(claimed, Claimed) and claimed.job.id == f"child-{key}"
        child_store.ack(f"child-{key}", f"t-{key}", Complete(f"done-{key}"))
    entries = child_store.peek_outbox(limit=10)
    assert len(entries) == 2
    assert relay_outbox(child_store, registry) == 2
    assert child_store.outbox_depth() == 0
    parent = main_store.get_job(pid)
    assert parent is not None and parent.state == "waiting"
    rows = row_map(main_store, pid)
    assert (rows["a"].status, rows["a"].exit) == ("completed", "done-a")
    # A redelivery of the same reports (a relay that died before deleting) applies nothing.
    again = main_store.record_child_results([e.report for e in entries])
    assert [(r.applied, r.parent_settled) for r in again] == [(False, False), (False, False)]
    assert main_store.get_job(pid).flow.completed == 2


def test_relay_counts_unroutable_entries_and_they_do_not_block_deliverable_ones(
    main_store: RedisJobStore, child_store: RedisJobStore, registry: StoreRegistry, clock: Any
) -> None:
    """H18: 501 entries for a parent store no process routes sit in front of a deliverable one."""
    nowhere = [
        EnqueueRequest(
            id=f"lost-{i:04d}",
            name="ChildJob",
            payload={"i": i},
            parent=ParentEnvelope("ghost-flow", "ghost-1", f"k{i:04d}", "nowhere", 1),
        )
        for i in range(501)
    ]
    child_store.enqueue_many(nowhere)
    for request in nowhere:
        child_store.cancel(request.id or "")
    assert child_store.outbox_depth() == 501

    pid = fanout_parent(main_store, ["only"], store_key="children")
    child_store.enqueue(
        EnqueueRequest(id="deliverable", name="Deliverable", parent=env(pid, "only"))
    )
    claimed = claim(child_store, token="t-d", names=["Deliverable"])
    assert isinstance(claimed, Claimed) and claimed.job.id == "deliverable"
    child_store.ack("deliverable", "t-d", Complete("ok"))
    assert child_store.outbox_depth() == 502
    assert child_store.unroutable_outbox() == {}

    assert relay_outbox(child_store, registry) == 1
    parent = main_store.get_job(pid)
    assert parent is not None and parent.state == "waiting", "the deliverable report was blocked"
    assert parent.flow is not None and parent.flow.completed == 1
    assert child_store.outbox_depth() == 501  # unroutable entries stay (never lost)
    unroutable = child_store.unroutable_outbox()
    assert set(unroutable) == {"nowhere"}
    assert unroutable["nowhere"][0] == 501
    assert unroutable["nowhere"][1] == clock()
    # Once the store becomes routable the backlog drains and the note is cleared.
    ghost_parent = main_store  # any store under that key will do: the reports match no flow
    routable = StoreRegistry()
    routable.register(ghost_parent, key="nowhere")
    assert relay_outbox(child_store, routable) == 501
    assert child_store.outbox_depth() == 0
    assert child_store.unroutable_outbox() == {}
