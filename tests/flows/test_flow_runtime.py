"""FLR — the flow runtime: workers, outbox relay and flow sweeper (conformance-cases.md §15;
runtime.md §7; store-contract.md §6).

The parent store has store key "main" (the test prefix), the child store "children"
(``<prefix>-children``).  Workers run in daemon threads on the fake clock; tests wait in real
time and move the clock with :func:`drive`/:func:`walk` whenever a timer-driven loop (relay
fallback, flow sweeper, heartbeat, schedules) has to get its turn.  The typed child failure of
the original (``SendFailure("bounced")``) is a ``RuntimeError("bounced")`` here: the failed row
carries ``{"type": "RuntimeError", "message": "bounced", ...}``.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from store import (
    ChildResult,
    EnqueueRequest,
    Flow,
    FlowState,
    Job,
    JobFailedError,
    ParentEnvelope,
    RedisJobStore,
    StoreRegistry,
    Unrecoverable,
    Worker,
    child_job_id,
    children,
    current_job,
)
from tests.flows.helpers import drive, outcomes, running, state_of, walk

TERMINAL = ("completed", "failed", "cancelled")


def _digest(
    registry: StoreRegistry,
    child_handler: Any,
    *,
    on_child_failure: str = "continue",
    child_store: str = "children",
) -> tuple[Job, Job, Flow]:
    """SendDigest (parent, store "main") and SendEmail (child, store "children", queue "email")."""
    send_digest = Job("SendDigest", store="main", registry=registry)
    send_email = Job(
        "SendEmail", store=child_store, queue="email", handler=child_handler, registry=registry
    )
    flow = Flow(
        "digest", parent=send_digest, children=[send_email], on_child_failure=on_child_failure
    )
    return send_digest, send_email, flow


def _sent_collect(flow: Flow, seen: dict[str, Any] | None = None) -> None:
    @flow.collect
    def collect(payload: Any, results: Any) -> dict[str, int]:
        if seen is not None:
            seen["counts"] = results.counts
            seen["all"] = results.all()
            seen["stream"] = list(results.stream())
            seen["runs"] = seen.get("runs", 0) + 1
        return {"sent": results.counts.completed, "failed": results.counts.failed}


def _parent_worker(
    store: RedisJobStore, jobs: list[Job], registry: StoreRegistry, **kw: Any
) -> Worker:
    return Worker(store, jobs, registry=registry, **kw)


# ---------------------------------------------------------------- FLR-01 .. FLR-10


def test_flr_01_fans_out_cross_store_reports_back_and_collects_typed_results(
    main_store: RedisJobStore, child_store: RedisJobStore, registry: StoreRegistry, clock: Any
) -> None:
    def send(payload: dict[str, str]) -> str:
        if payload["userId"].endswith("u2"):
            raise RuntimeError("bounced")
        return f"sent:{payload['userId']}"

    send_digest, send_email, flow = _digest(registry, send)

    @flow.fan_out
    def fan_out(payload: dict[str, str]) -> Any:
        return children(
            send_email, [(f"u{i}", {"userId": f"{payload['tenant']}-u{i}"}) for i in (1, 2, 3)]
        )

    seen: dict[str, Any] = {}
    _sent_collect(flow, seen)
    with running(
        _parent_worker(main_store, [send_digest], registry),
        Worker(child_store, [send_email], registry=registry),
        clock=clock,
    ):
        pid = flow.enqueue({"tenant": "acme"})
        drive(clock, lambda: state_of(main_store, pid) in TERMINAL, step_ms=200)
    assert send_digest.await_result(pid, timeout_s=1) == {"sent": 2, "failed": 1}
    everything = seen["all"]
    assert sorted(r.value for r in everything["completed"]) == ["sent:acme-u1", "sent:acme-u3"]
    assert everything["cancelled"] == []
    assert len(everything["failed"]) == 1
    failed = everything["failed"][0]
    assert (failed.key, failed.name, failed.outcome) == ("u2", "SendEmail", "failed")
    assert failed.error["type"] == "RuntimeError"
    assert failed.error["message"] == "bounced"
    assert sorted(r.outcome for r in seen["stream"]) == ["completed", "completed", "failed"]
    assert seen["counts"] == FlowState(pending=0, completed=2, failed=1, cancelled=0)
    assert seen["runs"] == 1
    assert child_store.counts()["completed"] == 2 and child_store.counts()["failed"] == 1
    for key in ("u1", "u2", "u3"):
        child = child_store.get_job(child_job_id("main", pid, key))
        assert child is not None, key
        assert child.id == f"flow/4.{len(pid)}/main/{pid}/{key}"
        assert child.name == "SendEmail" and child.queue == "email"
        assert child.parent == ParentEnvelope("digest", pid, key, "main", 1)
    assert outcomes(main_store, pid) == ["fanned-out", "completed"]
    assert child_store.outbox_depth() == 0


def test_flr_02_child_results_are_readable_outside_the_handler(
    main_store: RedisJobStore, child_store: RedisJobStore, registry: StoreRegistry, clock: Any
) -> None:
    send_digest, send_email, flow = _digest(registry, lambda payload: "ok")
    flow.fan_out(lambda payload: children(send_email, [("only", {"userId": "x"})]))
    _sent_collect(flow)
    with running(
        _parent_worker(main_store, [send_digest], registry),
        Worker(child_store, [send_email], registry=registry),
        clock=clock,
    ):
        pid = flow.enqueue({"tenant": "acme"})
        drive(clock, lambda: state_of(main_store, pid) == "completed", step_ms=200)
    results = flow.child_results(pid)
    assert results.counts == FlowState(pending=0, completed=1, failed=0, cancelled=0)
    assert results.all() == {
        "completed": [ChildResult("only", "SendEmail", "completed", value="ok")],
        "failed": [],
        "cancelled": [],
    }


def test_flr_03_fail_fast_settles_the_parent_and_cascades_cancels_into_the_child_store(
    main_store: RedisJobStore, child_store: RedisJobStore, registry: StoreRegistry, clock: Any
) -> None:
    def send(payload: dict[str, str]) -> str:
        if payload["userId"] == "bad":
            raise RuntimeError("bounced")
        current_job().sleep(10**9)  # "slow": never finishes unless interrupted
        return "never"

    send_digest, send_email, flow = _digest(registry, send, on_child_failure="fail")
    flow.fan_out(
        lambda payload: children(
            send_email, [("bad", {"userId": "bad"}), ("slow", {"userId": "slow"})]
        )
    )
    collected: list[Any] = []
    flow.collect(lambda payload, results: collected.append(results) or {"sent": 0, "failed": 0})
    with running(
        _parent_worker(main_store, [send_digest], registry),
        Worker(child_store, [send_email], registry=registry, concurrency=2),
        clock=clock,
    ):
        pid = flow.enqueue({"tenant": "acme"})
        slow_id = child_job_id("main", pid, "slow")
        drive(clock, lambda: state_of(main_store, pid) == "failed", step_ms=200)
        parent = main_store.get_job(pid)
        assert (
            parent is not None
            and parent.failed_reason is not None
            and "bad" in parent.failed_reason
        )
        with pytest.raises(JobFailedError) as failure:
            send_digest.await_result(pid, timeout_s=1)
        assert failure.value.error_type == "StoreFailure"  # failed store-side, no exit
        assert "bad" in failure.value.message
        drive(
            clock, lambda: state_of(child_store, slow_id) == "cancelled", step_ms=5000, timeout=30
        )
        drive(clock, lambda: main_store.flow_sweep_work(0).cascade == [], step_ms=5000, timeout=30)
    assert collected == []
    assert state_of(child_store, child_job_id("main", pid, "bad")) == "failed"
    assert main_store.get_job(pid).flow == FlowState(fail_fast=True, failed=1, cancelled=1)
    assert main_store.flow_owed_cascades(pid) == 0


def test_flr_04_children_complete_on_workers_without_routing_the_sweeper_delivers(
    main_store: RedisJobStore, child_store: RedisJobStore, registry: StoreRegistry, clock: Any
) -> None:
    """The child worker cannot reach the parent store (its registry holds only its own store),
    so its relay cannot deliver; the parent's flow sweeper reconciles from the child record."""
    send_digest, send_email, flow = _digest(registry, lambda payload: "ok")
    flow.fan_out(lambda payload: children(send_email, [("only", {"userId": "x"})]))
    _sent_collect(flow)
    child_only = StoreRegistry()
    child_only.register(child_store)
    with running(
        _parent_worker(main_store, [send_digest], registry),
        Worker(child_store, [send_email], registry=child_only),
        clock=clock,
    ):
        pid = flow.enqueue({"tenant": "acme"})
        only = child_job_id("main", pid, "only")
        drive(clock, lambda: state_of(child_store, only) == "completed", step_ms=200, timeout=10)
        walk(clock, 2000, step_ms=1000)
        assert state_of(child_store, only) == "completed"
        assert child_store.outbox_depth() == 1
        assert state_of(main_store, pid) == "waiting-children"
        drive(clock, lambda: state_of(main_store, pid) == "completed", step_ms=5000, timeout=30)
    assert send_digest.await_result(pid, timeout_s=1) == {"sent": 1, "failed": 0}
    assert main_store.get_job(pid).flow == FlowState(completed=1)


def test_flr_05_children_keep_completing_through_a_parent_store_outage(
    main_store: RedisJobStore, child_store: RedisJobStore, registry: StoreRegistry, clock: Any
) -> None:
    from store import JobStoreError

    down = threading.Event()
    real_record = main_store.record_child_results
    refused: list[int] = []

    def record(reports: Any) -> Any:
        if down.is_set():
            refused.append(len(reports))
            raise JobStoreError("injected: parent store unreachable")
        return real_record(reports)

    main_store.record_child_results = record  # type: ignore[method-assign]
    send_digest, send_email, flow = _digest(registry, lambda payload: f"sent:{payload['userId']}")
    flow.fan_out(
        lambda payload: children(send_email, [("u1", {"userId": "u1"}), ("u2", {"userId": "u2"})])
    )
    _sent_collect(flow)
    down.set()
    with running(
        _parent_worker(main_store, [send_digest], registry),
        Worker(child_store, [send_email], registry=registry),
        clock=clock,
    ):
        pid = flow.enqueue({"tenant": "acme"})
        ids = [child_job_id("main", pid, k) for k in ("u1", "u2")]
        drive(
            clock,
            lambda: all(state_of(child_store, i) == "completed" for i in ids),
            step_ms=200,
            timeout=10,
        )
        walk(clock, 12000, step_ms=1000)
        assert [state_of(child_store, i) for i in ids] == ["completed", "completed"]
        assert child_store.outbox_depth() == 2
        assert state_of(main_store, pid) == "waiting-children"
        assert refused, "the relay never tried the parent store"
        down.clear()
        drive(clock, lambda: state_of(main_store, pid) == "completed", step_ms=5000, timeout=30)
        drive(clock, lambda: child_store.outbox_depth() == 0, step_ms=5000, timeout=30)
    assert send_digest.await_result(pid, timeout_s=1) == {"sent": 2, "failed": 0}
    assert main_store.get_job(pid).flow == FlowState(completed=2)


def _nested(registry: StoreRegistry, leaf_handler: Any) -> tuple[Job, Job, Job, Flow, Flow]:
    """Outer flow digest: SendDigest (main) -> 2x SendBatch (children, queue "batches");
    inner flow batch: SendBatch -> 2x SendEmail (children, queue "email")."""
    send_digest = Job("SendDigest", store="main", registry=registry)
    send_batch = Job("SendBatch", store="children", queue="batches", registry=registry)
    send_email = Job(
        "SendEmail", store="children", queue="email", handler=leaf_handler, registry=registry
    )
    outer = Flow("digest", parent=send_digest, children=[send_batch])
    inner = Flow("batch", parent=send_batch, children=[send_email])
    outer.fan_out(lambda payload: children(send_batch, [(g, {"group": g}) for g in ("g1", "g2")]))
    inner.fan_out(
        lambda payload: children(
            send_email, [(f"{payload['group']}-e{i}", {"userId": f"e{i}"}) for i in (1, 2)]
        )
    )
    return send_digest, send_batch, send_email, outer, inner


def test_flr_06_cancelling_the_outer_flow_cascades_through_a_mid_flight_inner_flow(
    main_store: RedisJobStore, child_store: RedisJobStore, registry: StoreRegistry, clock: Any
) -> None:
    def leaf(payload: Any) -> str:
        current_job().sleep(10**9)  # never finishes unless interrupted
        return "never"

    send_digest, send_batch, send_email, outer, inner = _nested(registry, leaf)
    outer.collect(lambda payload, results: {"sent": 0, "failed": 0})
    inner.collect(lambda payload, results: 0)
    with running(
        _parent_worker(main_store, [send_digest], registry),
        Worker(child_store, [send_batch, send_email], registry=registry, concurrency=4),
        clock=clock,
    ):
        pid = outer.enqueue({"tenant": "acme"})
        inner_ids = [child_job_id("main", pid, g) for g in ("g1", "g2")]
        leaf_ids = [
            child_job_id("children", i, f"{g}-e{n}")
            for i, g in zip(inner_ids, ("g1", "g2"), strict=True)
            for n in (1, 2)
        ]
        drive(
            clock,
            lambda: (
                [state_of(child_store, i) for i in inner_ids] == ["waiting-children"] * 2
                and [state_of(child_store, i) for i in leaf_ids] == ["active"] * 4
            ),
            step_ms=200,
            timeout=15,
        )
        main_store.cancel(pid)
        assert state_of(main_store, pid) == "cancelled"
        drive(
            clock,
            lambda: [state_of(child_store, i) for i in inner_ids + leaf_ids] == ["cancelled"] * 6,
            step_ms=5000,
            timeout=40,
            message="the cancel cascaded to the inner parents and their leaves",
        )
        drive(
            clock,
            lambda: (
                main_store.flow_sweep_work(0).cascade == []
                and child_store.flow_sweep_work(0).cascade == []
            ),
            step_ms=5000,
            timeout=30,
        )
    assert main_store.get_job(pid).flow == FlowState(cancelled=2)
    for inner_id in inner_ids:
        assert child_store.get_job(inner_id).flow == FlowState(cancelled=2)
        assert child_store.flow_owed_cascades(inner_id) == 0
    assert main_store.flow_owed_cascades(pid) == 0


def test_flr_07_flows_nest_an_inner_flow_settles_and_reports_upward(
    main_store: RedisJobStore, child_store: RedisJobStore, registry: StoreRegistry, clock: Any
) -> None:
    send_digest, send_batch, send_email, outer, inner = _nested(registry, lambda payload: "ok")
    inner.collect(lambda payload, results: results.counts.completed)
    outer.collect(
        lambda payload, results: {
            "sent": sum(r.value for r in results.all()["completed"]),
            "failed": results.counts.failed,
        }
    )
    with running(
        _parent_worker(main_store, [send_digest], registry),
        Worker(child_store, [send_batch, send_email], registry=registry, concurrency=4),
        clock=clock,
    ):
        pid = outer.enqueue({"tenant": "acme"})
        drive(clock, lambda: state_of(main_store, pid) in TERMINAL, step_ms=200, timeout=15)
    assert send_digest.await_result(pid, timeout_s=1) == {"sent": 4, "failed": 0}
    for g in ("g1", "g2"):
        inner_job = child_store.get_job(child_job_id("main", pid, g))
        assert inner_job is not None
        assert inner_job.state == "completed"
        assert inner_job.exit == 2
        assert inner_job.parent is not None and inner_job.parent.flow_name == "digest"
        assert inner_job.parent.depth == 1
        assert inner_job.flow is not None and inner_job.flow.pending == 0
        leaf = child_store.get_job(child_job_id("children", inner_job.id, f"{g}-e1"))
        assert leaf is not None and leaf.parent is not None
        assert (leaf.parent.flow_name, leaf.parent.parent_store_key, leaf.parent.depth) == (
            "batch",
            "children",
            2,
        )


def test_flr_08_the_nesting_depth_cap_fails_runaway_flows_unrecoverably(
    main_store: RedisJobStore, child_store: RedisJobStore, registry: StoreRegistry, clock: Any
) -> None:
    send_digest, send_email, flow = _digest(registry, lambda payload: "ok")
    flow.fan_out(lambda payload: children(send_email, [("only", {"userId": "x"})]))
    _sent_collect(flow)
    pid = main_store.enqueue(
        EnqueueRequest(
            name="SendDigest",
            payload={"tenant": "acme"},
            attempts_max=3,
            parent=ParentEnvelope("runaway", "outer-flow-id", "k", "elsewhere", 8),
        )
    ).id
    with running(
        _parent_worker(main_store, [send_digest], registry),
        Worker(child_store, [send_email], registry=registry),
        clock=clock,
    ):
        drive(clock, lambda: state_of(main_store, pid) in TERMINAL, step_ms=500, timeout=10)
        walk(clock, 3000, step_ms=1000)
    job = main_store.get_job(pid)
    assert job is not None
    assert job.state == "failed"
    assert job.attempts_made == 1
    assert job.flow is None
    assert job.exit["error"]["type"] == "FlowDefinitionError"
    assert child_store.counts()["waiting"] == 0 and child_store.counts()["completed"] == 0


def _chain(registry: StoreRegistry, levels: int) -> tuple[list[Job], Job, dict[str, int]]:
    """Level1 -> Level2 -> ... -> Level<levels> -> Leaf, each level a flow, all in store "main"."""
    runs: Counter[str] = Counter()

    def leaf_handler(payload: Any) -> str:
        runs["Leaf"] += 1
        return f"leaf at depth {current_job().record.parent.depth}"

    leaf = Job("Leaf", store="main", handler=leaf_handler, registry=registry)
    jobs = [
        Job(f"Level{k}", store="main", attempts=3, registry=registry) for k in range(1, levels + 1)
    ]
    for k, parent in enumerate(jobs):
        child = jobs[k + 1] if k + 1 < len(jobs) else leaf
        flow = Flow(f"level{k + 1}", parent=parent, children=[child])
        flow.fan_out(lambda payload, child=child: children(child, [("x", {})]))

        def collect(payload: Any, results: Any) -> str:
            if results.counts.failed:
                raise Unrecoverable("a child failed")
            return "ok"

        flow.collect(collect)
    return jobs, leaf, runs


def test_flr_08_nesting_up_to_depth_8_works(
    main_store: RedisJobStore, registry: StoreRegistry, clock: Any
) -> None:
    jobs, leaf, runs = _chain(registry, 8)
    with running(Worker(main_store, [*jobs, leaf], registry=registry, concurrency=2), clock=clock):
        top = jobs[0].enqueue({})
        drive(clock, lambda: state_of(main_store, top) in TERMINAL, step_ms=200, timeout=20)
    assert jobs[0].await_result(top, timeout_s=1) == "ok"
    assert runs["Leaf"] == 1
    job_id = top
    for k in range(1, 8):
        job_id = child_job_id("main", job_id, "x")
        record = main_store.get_job(job_id)
        assert record is not None and record.name == f"Level{k + 1}"
        assert record.parent is not None and record.parent.depth == k
        assert record.state == "completed"
    leaf_record = main_store.get_job(child_job_id("main", job_id, "x"))
    assert (
        leaf_record is not None and leaf_record.parent is not None and leaf_record.parent.depth == 8
    )
    assert leaf_record.exit == "leaf at depth 8"


def test_flr_08_depth_9_fails_unrecoverably(
    main_store: RedisJobStore, registry: StoreRegistry, clock: Any
) -> None:
    jobs, leaf, runs = _chain(registry, 9)
    with running(Worker(main_store, [*jobs, leaf], registry=registry, concurrency=2), clock=clock):
        top = jobs[0].enqueue({})
        drive(clock, lambda: state_of(main_store, top) in TERMINAL, step_ms=200, timeout=20)
    assert state_of(main_store, top) == "failed"
    assert runs["Leaf"] == 0
    job_id = top
    for _ in range(8):
        job_id = child_job_id("main", job_id, "x")
    deepest = main_store.get_job(job_id)
    assert deepest is not None and deepest.name == "Level9"
    assert deepest.parent is not None and deepest.parent.depth == 8
    assert deepest.state == "failed"
    assert deepest.attempts_made == 1  # unrecoverable: attempts=3 not burnt
    assert deepest.flow is None
    assert deepest.exit["error"]["type"] == "FlowDefinitionError"


def test_flr_09_a_scheduled_parent_fans_out_with_no_flow_awareness_in_the_schedule_row(
    main_store: RedisJobStore, child_store: RedisJobStore, registry: StoreRegistry, clock: Any
) -> None:
    send_digest, send_email, flow = _digest(registry, lambda payload: "ok")
    flow.fan_out(lambda payload: children(send_email, [("only", {"userId": "x"})]))
    _sent_collect(flow)

    def scheduled() -> list[Any]:
        return main_store.list(name="SendDigest").items

    with running(
        _parent_worker(main_store, [send_digest], registry),
        Worker(child_store, [send_email], registry=registry),
        clock=clock,
    ):
        flow.schedule("hourly", every_ms=3_600_000, payload={"tenant": "acme"})
        walk(clock, 31 * 60_000, step_ms=60_000)
        assert scheduled() == []  # first occurrence one interval from now
        drive(clock, scheduled, step_ms=60_000, timeout=20)
        job_id = scheduled()[0].id
        drive(clock, lambda: state_of(main_store, job_id) in TERMINAL, step_ms=500, timeout=15)
    assert job_id.startswith("sched/SendDigest/hourly/")
    job = main_store.get_job(job_id)
    assert job is not None and job.state == "completed"
    assert job.flow == FlowState(fail_fast=False, pending=0, completed=1, failed=0, cancelled=0)
    assert job.exit == {"sent": 1, "failed": 0}
    (schedule,) = main_store.list_schedules()
    assert (schedule.key, schedule.job_name, schedule.payload) == (
        "SendDigest/hourly",
        "SendDigest",
        {"tenant": "acme"},
    )


def test_flr_10_duplicate_child_keys_fail_the_fan_out_unrecoverably(
    main_store: RedisJobStore, child_store: RedisJobStore, registry: StoreRegistry, clock: Any
) -> None:
    send_digest, send_email, flow = _digest(registry, lambda payload: "ok")
    flow.fan_out(
        lambda payload: children(send_email, [("dup", {"userId": "a"}), ("dup", {"userId": "b"})])
    )
    _sent_collect(flow)
    with running(
        _parent_worker(main_store, [send_digest], registry),
        Worker(child_store, [send_email], registry=registry),
        clock=clock,
    ):
        pid = flow.enqueue({"tenant": "acme"}, attempts=3)
        drive(clock, lambda: state_of(main_store, pid) in TERMINAL, step_ms=500, timeout=10)
        walk(clock, 3000, step_ms=1000)
    job = main_store.get_job(pid)
    assert job is not None
    assert job.state == "failed"
    assert job.attempts_made == 1
    assert job.flow is None
    assert main_store.list_child_results(pid).items == []
    assert sum(child_store.counts().values()) == 0


# ---------------------------------------------------------------- cross-store, large


def test_1200_children_over_two_child_stores_settle_and_collect_sees_each_result_once(
    main_store: RedisJobStore, extra_store: Any, registry: StoreRegistry, clock: Any
) -> None:
    store_a = extra_store("children-a", "children-a")
    store_b = extra_store("children-b", "children-b")
    calls: Counter[str] = Counter()
    lock = threading.Lock()

    def handler(tag: str) -> Any:
        def run(payload: dict[str, int]) -> str:
            with lock:
                calls[f"{tag}{payload['i']:04d}"] += 1
            return f"{tag}:{payload['i']}"

        return run

    send_digest = Job("Digest", store="main", registry=registry)
    email_a = Job("EmailA", store="children-a", handler=handler("a"), registry=registry)
    email_b = Job("EmailB", store="children-b", handler=handler("b"), registry=registry)
    flow = Flow("split", parent=send_digest, children=[email_a, email_b])

    @flow.fan_out
    def fan_out(payload: Any) -> Any:
        return [
            children(email_a, [(f"a{i:04d}", {"i": i}) for i in range(600)]),
            children(email_b, [(f"b{i:04d}", {"i": i}) for i in range(600)]),
        ]

    seen: dict[str, Any] = {}
    _sent_collect(flow, seen)
    with running(
        Worker(main_store, [send_digest], registry=registry),
        Worker(store_a, [email_a], registry=registry, concurrency=4),
        Worker(store_b, [email_b], registry=registry, concurrency=4),
        clock=clock,
    ):
        pid = flow.enqueue({})
        drive(clock, lambda: state_of(main_store, pid) in TERMINAL, step_ms=100, timeout=90)
    assert send_digest.await_result(pid, timeout_s=1) == {"sent": 1200, "failed": 0}
    expected = {f"a{i:04d}": f"a:{i}" for i in range(600)} | {
        f"b{i:04d}": f"b:{i}" for i in range(600)
    }
    completed = seen["all"]["completed"]
    assert len(completed) == 1200
    assert {r.key: r.value for r in completed} == expected
    assert {r.name for r in completed if r.key.startswith("a")} == {"EmailA"}
    assert {r.name for r in completed if r.key.startswith("b")} == {"EmailB"}
    assert seen["all"]["failed"] == [] and seen["all"]["cancelled"] == []
    streamed = [r.key for r in seen["stream"]]
    assert len(streamed) == 1200 and set(streamed) == set(expected)
    assert seen["counts"] == FlowState(pending=0, completed=1200, failed=0, cancelled=0)
    assert main_store.get_job(pid).flow == FlowState(completed=1200)
    assert calls == Counter(dict.fromkeys(expected, 1)), "a child ran twice or never"
    assert store_a.counts()["completed"] == 600 and store_b.counts()["completed"] == 600
    assert store_a.outbox_depth() == 0 and store_b.outbox_depth() == 0
