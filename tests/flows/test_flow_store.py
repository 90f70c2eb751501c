"""FLW — flows at the store level, parent side (conformance-cases.md §13), plus the hazards the
port fixes (redis-layout.md §11 H7, H14, H15; store-contract.md §4.4 FanOut chunking).

All on the fake clock of tests/conftest.py; no worker.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from store import (
    MISSING,
    CascadeChild,
    Claimed,
    Complete,
    Empty,
    EnqueueRequest,
    Fail,
    FanOut,
    FlowChildRecord,
    InvalidRequestError,
    JobNotPromotableError,
    JobNotRetryableError,
    JobStoreError,
    LockLostError,
    RedisJobStore,
)
from tests.flows.helpers import (
    CHILD_STORE_KEY,
    Waiter,
    cascade_keys,
    claim,
    fanout_parent,
    flow_state,
    outcomes,
    pair,
    record1,
    report,
    row_map,
    rows,
    spec,
    state_of,
)


def _row(flow_id: str, key: str, **overrides: Any) -> FlowChildRecord:
    fields: dict[str, Any] = {
        "flow_id": flow_id,
        "child_key": key,
        "name": "ChildJob",
        "store_key": CHILD_STORE_KEY,
        "child_job_id": f"flow/main/{flow_id}/{key}",
        "status": "pending",
        "exit": MISSING,
        "failed_reason": None,
        "cascaded": False,
    }
    fields.update(overrides)
    return FlowChildRecord(**fields)


# ---------------------------------------------------------------- FLW-01 .. FLW-25


def test_flw_01_fan_out_parks_the_parent_with_manifest_rows_and_ledger(
    store: RedisJobStore,
) -> None:
    pid = fanout_parent(store)
    job = store.get_job(pid)
    assert job is not None
    assert job.state == "waiting-children"
    assert job.flow == flow_state(pending=2)
    assert job.attempts_made == 0
    assert outcomes(store, pid) == ["fanned-out"]
    page = store.list_child_results(pid)
    assert page.cursor is None
    assert page.items == [_row(pid, "a"), _row(pid, "b")]
    assert isinstance(claim(store, token="t-again"), Empty)  # parked parents are never claimable
    assert store.counts()["waiting-children"] == 1
    # The FanOut does not enqueue the children.
    assert store.get_job(f"flow/main/{pid}/a") is None
    assert store.get_job(f"flow/main/{pid}/b") is None


def test_flw_02_fan_out_is_lock_token_guarded_and_validates_child_ids(store: RedisJobStore) -> None:
    pid = store.enqueue(EnqueueRequest(name="TestJob", payload={"parent": True})).id
    assert isinstance(claim(store, token="t-owner"), Claimed)
    with pytest.raises(LockLostError):
        store.ack(pid, "t-wrong", FanOut(False, [spec(pid, "a")]))
    bad = spec(pid, "a", id=None)
    with pytest.raises(JobStoreError):
        store.ack(pid, "t-owner", FanOut(False, [bad]))
    job = store.get_job(pid)
    assert job is not None and job.state == "active" and job.flow is None
    assert rows(store, pid) == []
    store.ack(pid, "t-owner", FanOut(False, [spec(pid, "a")]))
    assert state_of(store, pid) == "waiting-children"


def test_flw_03_empty_fan_out_settles_straight_to_runnable_collect(store: RedisJobStore) -> None:
    pid = fanout_parent(store, children=[])
    job = store.get_job(pid)
    assert job is not None
    assert job.state == "waiting"
    assert job.flow == flow_state()
    claimed = claim(store, token="t-resume")
    assert isinstance(claimed, Claimed)
    assert claimed.job.id == pid
    assert claimed.job.flow == flow_state()


def test_flw_04_empty_fan_out_wakes_takers_parked_on_the_parents_queue(
    store: RedisJobStore, clock: Any
) -> None:
    pid = store.enqueue(EnqueueRequest(name="TestJob", payload={"parent": True})).id
    assert isinstance(claim(store, token="t-parent"), Claimed)
    idle = claim(store, token="t-idle")
    assert isinstance(idle, Empty)
    waiter = Waiter(store, ["default"], idle.wake_token)
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive(), "the taker woke before anything happened"
    clock.advance(1)
    store.ack(pid, "t-parent", FanOut(False, []))
    clock.advance(1)
    started = time.monotonic()
    assert waiter.outcome() is True
    assert time.monotonic() - started < 3


def test_flw_06_record_child_results_wakes_a_taker_parked_on_the_parents_queue(
    store: RedisJobStore, clock: Any
) -> None:
    pid = fanout_parent(store, ["only"])
    idle = claim(store, token="t-idle")
    assert isinstance(idle, Empty)
    waiter = Waiter(store, ["default"], idle.wake_token)
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive(), "the taker woke before the report"
    clock.advance(1)
    assert pair(record1(store, report(pid, "only", "completed"))) == (True, True)
    clock.advance(1)
    started = time.monotonic()
    assert waiter.outcome() is True
    assert time.monotonic() - started < 3


def test_flw_07_concurrent_last_reports_settle_the_parent_exactly_once(
    store: RedisJobStore,
) -> None:
    for _ in range(5):  # several rounds: a race needs chances
        pid = fanout_parent(store)
        barrier = threading.Barrier(4)
        results: list[Any] = []
        lock = threading.Lock()

        def go(
            key: str,
            pid: str = pid,
            barrier: threading.Barrier = barrier,
            results: list[Any] = results,
            lock: threading.Lock = lock,
        ) -> None:
            barrier.wait()
            result = record1(store, report(pid, key, "completed"))
            with lock:
                results.append(result)

        threads = [threading.Thread(target=go, args=(k,)) for k in ("a", "b", "a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert len(results) == 4
        assert sum(r.applied for r in results) == 2
        assert sum(r.parent_settled for r in results) == 1
        assert state_of(store, pid) == "waiting"
        # Drain the resumed parent so the next round's claim takes its own parent.
        job = claim(store, token="t-drain")
        assert isinstance(job, Claimed) and job.job.id == pid
        store.ack(pid, "t-drain", Complete(None))


def test_flw_08_fail_fast_settles_the_parent_terminally_and_marks_remaining_rows(
    store: RedisJobStore,
) -> None:
    pid = fanout_parent(store, ["a", "b", "c"], fail_fast=True)
    assert pair(record1(store, report(pid, "a", "completed"))) == (True, False)
    assert pair(record1(store, report(pid, "b", "failed"))) == (True, True)
    job = store.get_job(pid)
    assert job is not None
    assert job.state == "failed"
    assert job.failed_reason is not None and "b" in job.failed_reason
    assert job.exit is MISSING
    c = row_map(store, pid)["c"]
    assert (c.status, c.cascaded) == ("cancelled", False)
    assert job.flow == flow_state(fail_fast=True, completed=1, failed=1, cancelled=1)
    assert pair(record1(store, report(pid, "c", "completed"))) == (False, False)
    assert store.get_job(pid).flow == flow_state(fail_fast=True, completed=1, failed=1, cancelled=1)


def test_flw_10_cancelling_a_waiting_children_parent_settles_it_and_marks_pending_rows(
    store: RedisJobStore,
) -> None:
    pid = fanout_parent(store)
    record1(store, report(pid, "a", "completed"))
    store.cancel(pid)
    late = record1(store, report(pid, "b", "completed"))
    job = store.get_job(pid)
    assert job is not None and job.state == "cancelled"
    assert job.flow == flow_state(completed=1, cancelled=1)
    by_key = row_map(store, pid)
    assert by_key["a"].status == "completed"
    assert (by_key["b"].status, by_key["b"].cascaded) == ("cancelled", False)
    assert pair(late) == (False, False)


def test_flw_12_promote_and_retry_reject_a_waiting_children_parent(store: RedisJobStore) -> None:
    pid = fanout_parent(store)
    with pytest.raises(JobNotPromotableError):
        store.promote(pid)
    with pytest.raises(JobNotRetryableError):
        store.retry(pid)
    assert state_of(store, pid) == "waiting-children"


def test_flw_13_retrying_a_fail_fast_failed_parent_re_enters_collect_with_its_manifest(
    store: RedisJobStore,
) -> None:
    pid = fanout_parent(store, ["a", "b"], fail_fast=True)
    record1(store, report(pid, "a", "failed"))
    assert state_of(store, pid) == "failed"
    store.retry(pid)
    job = store.get_job(pid)
    assert job is not None
    assert job.state == "waiting"
    assert job.flow is not None
    assert job.flow == flow_state(fail_fast=True, failed=1, cancelled=1)
    assert len(rows(store, pid)) == 2


def test_flw_14_a_second_fan_out_converges_on_the_persisted_manifest(store: RedisJobStore) -> None:
    pid = fanout_parent(store, ["a"])
    record1(store, report(pid, "a", "completed"))
    assert state_of(store, pid) == "waiting"
    claimed = claim(store, token="t-double")
    assert isinstance(claimed, Claimed) and claimed.job.id == pid
    store.ack(pid, "t-double", FanOut(False, [spec(pid, "x"), spec(pid, "y")]))
    assert [r.child_key for r in rows(store, pid)] == ["a"]
    job = store.get_job(pid)
    assert job is not None
    assert job.state == "waiting"
    assert job.flow == flow_state(completed=1)


def test_flw_16_flow_sweep_work_yields_cascade_work_until_rows_are_marked_cascaded(
    store: RedisJobStore,
) -> None:
    pid = fanout_parent(store, ["a", "b"], fail_fast=True)
    record1(store, report(pid, "a", "failed"))
    work = store.flow_sweep_work(30000)
    assert work.reconcile == []
    assert len(work.cascade) == 1
    assert work.cascade[0].flow_id == pid
    assert work.cascade[0].children == [CascadeChild("b", CHILD_STORE_KEY, f"flow/main/{pid}/b")]
    store.mark_children_cascaded(pid, ["b"])
    assert store.flow_sweep_work(30000).cascade == []
    assert row_map(store, pid)["b"].cascaded is True
    store.mark_children_cascaded(pid, ["b", "ghost"])  # idempotent, unknown keys ignored
    assert store.flow_sweep_work(30000).cascade == []


def test_flw_17_automatic_retention_spares_a_settled_parent_that_still_owes_cascades(
    store: RedisJobStore, clock: Any
) -> None:
    keep = {"failed": {"count": 1}}
    pid = fanout_parent(store, ["a", "b"], fail_fast=True, keep=keep)
    record1(store, report(pid, "a", "failed"))
    assert row_map(store, pid)["b"].cascaded is False

    def fail_peer(n: int) -> str:
        clock.advance(10)
        peer = store.enqueue(EnqueueRequest(name="TestJob", keep=keep, payload={"peer": n})).id
        claimed = claim(store, token=f"t-peer{n}")
        assert isinstance(claimed, Claimed) and claimed.job.id == peer
        store.ack(peer, f"t-peer{n}", Fail({"boom": n}))
        return peer

    fail_peer(1)
    parent = store.get_job(pid)
    assert parent is not None and parent.state == "failed"
    assert len(rows(store, pid)) == 2
    store.mark_children_cascaded(pid, ["b"])
    peer2 = fail_peer(2)
    assert store.get_job(pid) is None
    assert store.list_child_results(pid).items == []
    assert state_of(store, peer2) == "failed"


def test_flw_18_list_child_results_paginates_in_child_key_order(store: RedisJobStore) -> None:
    pid = fanout_parent(store, ["c", "a", "b"])
    first = store.list_child_results(pid, limit=2)
    assert [r.child_key for r in first.items] == ["a", "b"]
    assert first.cursor is not None
    second = store.list_child_results(pid, cursor=first.cursor, limit=2)
    assert [r.child_key for r in second.items] == ["c"]
    assert second.cursor is None
    assert store.list_child_results("no-such-flow").items == []
    assert [r.child_key for r in store.list_child_results(pid, limit=0).items] == [
        "a"
    ]  # clamped to 1


def test_flw_19_remove_refuses_a_waiting_children_parent_and_deletes_rows_with_a_settled_one(
    store: RedisJobStore,
) -> None:
    pid = fanout_parent(store, ["a"])
    assert store.remove(pid) is False
    assert state_of(store, pid) == "waiting-children"
    assert pair(record1(store, report(pid, "a", "failed", exit=MISSING))) == (True, True)
    assert state_of(store, pid) == "waiting"  # continue policy: collect runs next
    store.cancel(pid)
    assert store.remove(pid) is True
    assert store.get_job(pid) is None
    assert store.list_child_results(pid).items == []


def test_flw_20_store_side_child_failures_carry_failed_reason_on_the_row(
    store: RedisJobStore,
) -> None:
    pid = fanout_parent(store, ["a"])
    reason = "job stalled more than allowable limit"
    record1(store, report(pid, "a", "failed", exit=MISSING, failed_reason=reason))
    row = row_map(store, pid)["a"]
    assert row.status == "failed"
    assert row.exit is MISSING
    assert row.failed_reason == reason
    assert row.cascaded is True


def test_flw_21_a_batch_applies_positionally_and_keeps_counters_exact(store: RedisJobStore) -> None:
    pid = fanout_parent(store, ["a", "b", "c"])
    results = store.record_child_results(
        [
            report(pid, "a", "completed"),
            report(pid, "a", "completed"),
            report(pid, "ghost", "completed"),
            report(pid, "b", "failed"),
        ]
    )
    assert [pair(r) for r in results] == [
        (True, False),
        (False, False),
        (False, False),
        (True, False),
    ]
    job = store.get_job(pid)
    assert job is not None and job.state == "waiting-children"
    assert job.flow == flow_state(pending=1, completed=1, failed=1)


def test_flw_22_a_batch_that_empties_pending_settles_once_on_its_last_applied_report(
    store: RedisJobStore,
) -> None:
    pid = fanout_parent(store)
    results = store.record_child_results(
        [report(pid, "a", "completed"), report(pid, "b", "completed")]
    )
    assert [pair(r) for r in results] == [(True, False), (True, True)]
    assert state_of(store, pid) == "waiting"


def test_flw_23_fail_fast_wins_inside_a_batch_after_every_batch_mate_applied(
    store: RedisJobStore,
) -> None:
    pid = fanout_parent(store, ["a", "b", "c"], fail_fast=True)
    results = store.record_child_results(
        [report(pid, "b", "failed"), report(pid, "c", "completed")]
    )
    assert [pair(r) for r in results] == [(True, True), (True, False)]
    job = store.get_job(pid)
    assert job is not None and job.state == "failed"
    assert job.failed_reason is not None and "b" in job.failed_reason
    assert job.flow == flow_state(fail_fast=True, completed=1, failed=1, cancelled=1)
    by_key = row_map(store, pid)
    assert by_key["c"].status == "completed"
    assert (by_key["a"].status, by_key["a"].cascaded) == ("cancelled", False)


def test_flw_24_a_batch_may_span_flows_and_settles_each_independently(store: RedisJobStore) -> None:
    first = fanout_parent(store, ["a"], token="t-first")
    second = fanout_parent(store, ["b"], token="t-second")
    results = store.record_child_results(
        [report(first, "a", "completed"), report(second, "b", "completed")]
    )
    assert [pair(r) for r in results] == [(True, True), (True, True)]
    assert state_of(store, first) == "waiting"
    assert state_of(store, second) == "waiting"


def test_flw_25_a_cancelled_child_report_moves_the_cancelled_counter(store: RedisJobStore) -> None:
    pid = fanout_parent(store)
    assert pair(record1(store, report(pid, "a", "cancelled", exit=MISSING))) == (True, False)
    assert store.get_job(pid).flow == flow_state(pending=1, cancelled=1)
    row = row_map(store, pid)["a"]
    assert (row.status, row.cascaded) == ("cancelled", True)


# ---------------------------------------------------------------- hazards the port fixes


def test_duplicate_child_keys_are_refused_before_anything_is_written(store: RedisJobStore) -> None:
    """H14: duplicate keys would collapse into one row but count twice in flow_pending."""
    pid = store.enqueue(EnqueueRequest(name="TestJob", payload={"parent": True})).id
    assert isinstance(claim(store, token="t-dup"), Claimed)
    calls: list[str] = []
    original = store._run

    def spy(script: str, *args: Any) -> Any:
        calls.append(script)
        return original(script, *args)

    store._run = spy  # type: ignore[method-assign]
    with pytest.raises(InvalidRequestError):
        store.ack(pid, "t-dup", FanOut(False, [spec(pid, "dup"), spec(pid, "x"), spec(pid, "dup")]))
    assert calls == [], f"a refused FanOut ran scripts: {calls}"
    job = store.get_job(pid)
    assert job is not None
    assert job.state == "active"
    assert job.flow is None
    assert outcomes(store, pid) == []
    assert rows(store, pid) == []
    # The same ack with unique keys then lands.
    store.ack(pid, "t-dup", FanOut(False, [spec(pid, "dup"), spec(pid, "x")]))
    assert store.get_job(pid).flow == flow_state(pending=2)


def _spy_fan_out(store: RedisJobStore) -> list[tuple[str, str, int]]:
    """Record every fan_out script call as (final, clear, n)."""
    calls: list[tuple[str, str, int]] = []
    original = store._run

    def spy(script: str, *args: Any) -> Any:
        if script == "fan_out":
            calls.append((str(args[3]), str(args[4]), int(args[7])))
        return original(script, *args)

    store._run = spy  # type: ignore[method-assign]
    return calls


def test_fan_out_of_1201_children_stages_in_three_chunks_and_settles_with_exact_counters(
    store: RedisJobStore,
) -> None:
    keys = [f"k{i:04d}" for i in range(1201)]
    pid = store.enqueue(EnqueueRequest(name="TestJob", payload={"parent": True})).id
    assert isinstance(claim(store, token="t-big"), Claimed)
    calls = _spy_fan_out(store)
    store.ack(pid, "t-big", FanOut(False, [spec(pid, k) for k in keys]))
    staging = [(final, n) for final, clear, n in calls if clear == "0"]
    assert staging == [("0", 500), ("0", 500), ("1", 201)], calls
    job = store.get_job(pid)
    assert job is not None and job.state == "waiting-children"
    assert job.flow == flow_state(pending=1201)
    assert outcomes(store, pid) == ["fanned-out"]
    all_rows = rows(store, pid, page=1000)
    assert [r.child_key for r in all_rows] == keys
    assert {r.status for r in all_rows} == {"pending"}

    outcome_of = {
        k: ("completed" if i < 1000 else "failed" if i < 1150 else "cancelled")
        for i, k in enumerate(keys)
    }
    results = store.record_child_results([report(pid, k, outcome_of[k]) for k in keys])
    assert sum(r.applied for r in results) == 1201
    assert [i for i, r in enumerate(results) if r.parent_settled] == [1200]
    job = store.get_job(pid)
    assert job is not None and job.state == "waiting"
    assert job.flow == flow_state(completed=1000, failed=150, cancelled=51)
    assert job.flow.total == 1201
    final_rows = row_map(store, pid)
    assert len(final_rows) == 1201
    assert all(final_rows[k].status == outcome_of[k] and final_rows[k].cascaded for k in keys)
    # Redelivery of the whole batch applies nothing.
    again = store.record_child_results([report(pid, k, "completed") for k in keys])
    assert not any(r.applied or r.parent_settled for r in again)
    assert store.get_job(pid).flow == flow_state(completed=1000, failed=150, cancelled=51)


def test_cancelling_a_parked_parent_with_1201_pending_children_flips_every_row(
    store: RedisJobStore, clock: Any
) -> None:
    """H15: the flips run in bounded pages, yet all 1,201 rows are flipped before cancel returns;
    retention keeps the parent while it owes cascades."""
    keep = {"cancelled": {"count": 0}}
    keys = [f"k{i:04d}" for i in range(1201)]
    pid = fanout_parent(store, keys, keep=keep)
    assert store.get_job(pid).flow == flow_state(pending=1201)
    store.cancel(pid)
    job = store.get_job(pid)
    assert job is not None, "retention deleted a parent that owes 1,201 cascades"
    assert job.state == "cancelled"
    assert job.flow == flow_state(cancelled=1201)
    all_rows = rows(store, pid)
    assert len(all_rows) == 1201
    assert all(r.status == "cancelled" and r.cascaded is False for r in all_rows)
    assert store.flow_owed_cascades(pid) == 1201
    assert len(cascade_keys(store.flow_sweep_work(0))) == 1000  # bounded by the default limit
    work = store.flow_sweep_work(0, limit=5000)
    assert work.reconcile == []
    assert sorted(k for _, k in cascade_keys(work)) == keys
    assert {f for f, _ in cascade_keys(work)} == {pid}
    # Reports arriving after the settle apply nothing.
    assert not any(
        r.applied
        for r in store.record_child_results([report(pid, k, "completed") for k in keys[:10]])
    )

    # Retention (keep count 0 of cancelled TestJobs) still spares it ...
    def cancel_peer(n: int) -> str:
        clock.advance(10)
        peer = store.enqueue(EnqueueRequest(name="TestJob", keep=keep, payload={"peer": n})).id
        store.cancel(peer)
        return peer

    cancel_peer(1)
    assert state_of(store, pid) == "cancelled"
    store.mark_children_cascaded(pid, keys[:600])
    assert store.flow_owed_cascades(pid) == 601
    cancel_peer(2)
    assert state_of(store, pid) == "cancelled"
    # ... until every cascade was delivered.
    store.mark_children_cascaded(pid, keys[600:])
    assert store.flow_owed_cascades(pid) == 0
    assert store.flow_sweep_work(0, limit=5000).cascade == []
    cancel_peer(3)
    assert store.get_job(pid) is None
    # The rows go too: the first page with the parent, the rest by the sweeper's bounded GC.
    for _ in range(10):
        if not store.list_child_results(pid).items:
            break
        store.flow_sweep_work(30000, limit=500)
    assert store.list_child_results(pid).items == []


def test_cascade_rows_a_sweeper_cannot_act_on_rotate_and_do_not_starve_others(
    store: RedisJobStore, clock: Any
) -> None:
    """H7: 20 cascade rows of an unreachable store sort first; the reachable one still comes."""
    pid = store.enqueue(EnqueueRequest(name="TestJob", payload={"parent": True})).id
    assert isinstance(claim(store, token="t-h7"), Claimed)
    specs = [spec(pid, f"a{i:02d}", store_key="unreachable") for i in range(20)]
    specs.append(spec(pid, "z", store_key="reachable"))
    store.ack(pid, "t-h7", FanOut(False, specs))
    store.cancel(pid)
    assert store.flow_owed_cascades(pid) == 21

    seen_reachable_at: int | None = None
    for n in range(1, 5):
        work = store.flow_sweep_work(30000, limit=10)
        returned = [child for c in work.cascade for child in c.children]
        assert len(returned) <= 10
        reachable = [c.child_key for c in returned if c.store_key == "reachable"]
        if reachable:
            store.mark_children_cascaded(pid, reachable)  # only what this sweeper can act on
            seen_reachable_at = n
            break
        clock.advance(30000)
    assert seen_reachable_at is not None and seen_reachable_at <= 3, (
        "the reachable cascade was starved"
    )
    # The unreachable rows are not dropped: still owed, still offered.
    assert store.flow_owed_cascades(pid) == 20
    clock.advance(30000)
    offered: set[str] = set()
    for _ in range(3):
        offered |= {k for _, k in cascade_keys(store.flow_sweep_work(30000, limit=10))}
        clock.advance(30000)
    assert offered == {f"a{i:02d}" for i in range(20)}


def test_a_crashed_chunked_fan_out_is_cleared_by_the_next_attempts_first_chunk(
    store: RedisJobStore, clock: Any
) -> None:
    """store-contract §4.4: a crash mid-staging leaves the job active; stall recovery and a
    second attempt with other keys leave exactly the second manifest."""
    pid = store.enqueue(EnqueueRequest(name="TestJob", payload={"parent": True}, attempts_max=3)).id
    assert isinstance(claim(store, token="t-crash", lock_duration_ms=1000), Claimed)
    original = store._run
    staged = []

    def crash_after_first_chunk(script: str, *args: Any) -> Any:
        reply = original(script, *args)
        if script == "fan_out" and int(args[7]) > 0:
            staged.append(int(args[7]))
            raise JobStoreError("simulated crash after the first staging chunk")
        return reply

    store._run = crash_after_first_chunk  # type: ignore[method-assign]
    with pytest.raises(JobStoreError):
        store.ack(pid, "t-crash", FanOut(False, [spec(pid, f"old-{i:04d}") for i in range(1200)]))
    store._run = original  # type: ignore[method-assign]
    assert staged == [500]
    job = store.get_job(pid)
    assert job is not None and job.state == "active" and job.flow is None
    assert len(rows(store, pid)) == 500  # staged, uncommitted

    # Staged rows of a live (active) parent are not offered for reconcile.
    assert store.flow_sweep_work(0).reconcile == []
    clock.advance(2000)
    assert [(r.id, r.failed) for r in store.recover_stalled(1)] == [(pid, False)]
    claimed = claim(store, token="t-again")
    assert isinstance(claimed, Claimed) and claimed.job.id == pid and claimed.job.flow is None
    new_keys = [f"new-{i:04d}" for i in range(1200)]
    store.ack(pid, "t-again", FanOut(False, [spec(pid, k) for k in new_keys]))
    assert [r.child_key for r in rows(store, pid)] == new_keys
    job = store.get_job(pid)
    assert job is not None and job.state == "waiting-children"
    assert job.flow == flow_state(pending=1200)
    results = store.record_child_results([report(pid, k, "completed") for k in new_keys])
    assert sum(r.parent_settled for r in results) == 1
    assert store.get_job(pid).flow == flow_state(completed=1200)


def test_reconcile_returns_stale_pending_rows_with_their_full_spec_and_re_arms_them(
    store: RedisJobStore, clock: Any
) -> None:
    """store-contract §4.19 flowSweepWork: the sweeper re-enqueues from storage alone, so the
    stored spec must round-trip every request field; returned rows wait another pending age."""
    pid = store.enqueue(EnqueueRequest(name="TestJob", payload={"parent": True})).id
    assert isinstance(claim(store, token="t-rec"), Claimed)
    rich = {
        "queue": "mail",
        "payload": {"to": ["x@example.com"], "n": 12345678901234567, "ratio": 0.5, "empty": []},
        "metadata": {"tenant": "acme"},
        "priority": 7,
        "attempts_max": 4,
        "backoff": {"kind": "exponential", "delay_ms": 500, "factor": 3},
        "keep": {"completed": {"count": 10}, "failed": {"age_ms": 60000}},
        "timeout_ms": 9000,
        "trace": {"trace_id": "t" * 32, "span_id": "s" * 16, "sampled": True},
    }
    specs = [spec(pid, k, **rich) for k in ("a", "b")]
    store.ack(pid, "t-rec", FanOut(False, specs))
    assert store.flow_sweep_work(30000).reconcile == []  # not stale yet
    clock.advance(30000)
    work = store.flow_sweep_work(30000)
    assert len(work.reconcile) == 1 and work.reconcile[0].flow_id == pid
    returned = {c.child_key: c for c in work.reconcile[0].children}
    assert set(returned) == {"a", "b"}
    for original in specs:
        back = returned[original.child_key]
        assert back.store_key == original.store_key
        assert back.request == original.request
    assert store.flow_sweep_work(30000).reconcile == []  # re-armed
    clock.advance(29999)
    assert store.flow_sweep_work(30000).reconcile == []
    clock.advance(1)
    record1(store, report(pid, "a", "completed"))
    again = store.flow_sweep_work(30000).reconcile
    assert [(f.flow_id, [c.child_key for c in f.children]) for f in again] == [(pid, ["b"])]
    # Rows of a settled parent are never offered for reconcile.
    store.cancel(pid)
    clock.advance(60000)
    assert store.flow_sweep_work(30000).reconcile == []


def test_a_flow_parents_events_park_and_settle(store: RedisJobStore) -> None:
    """Fan-out parks the parent (waiting-children, with its pending count); the last child
    report makes it runnable again (waiting); an empty fan-out goes straight to waiting."""
    pid = fanout_parent(store, ["a", "b"])
    record1(store, report(pid, "a", "completed"))
    record1(store, report(pid, "b", "completed"))
    empty = fanout_parent(store, [], token="t-empty", queue="other")
    kinds = {
        job_id: [(e.type, e.data) for e in store.events("0", count=1000) if e.job_id == job_id]
        for job_id in (pid, empty)
    }
    assert kinds[pid] == [
        ("enqueued", None),
        ("active", None),
        ("waiting-children", {"pending": 2}),
        ("waiting", None),
    ]
    assert kinds[empty] == [("enqueued", None), ("active", None), ("waiting", None)]
