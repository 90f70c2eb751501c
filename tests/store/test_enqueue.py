"""ENQ cases (conformance-cases.md §2) and enqueue invariants 1-8 (store-contract.md §11)."""

from __future__ import annotations

import dataclasses
import inspect
import threading
from typing import Any

import pytest

from store import (
    MISSING,
    Cancelled,
    Claimed,
    Complete,
    Empty,
    EnqueueResult,
    Fail,
    JobStoreError,
    TraceContext,
)
from tests.store.helpers import (
    claim,
    claim_empty,
    claim_id,
    claim_job,
    counts_of,
    extra_prefix,
    finish,
    req,
)


def test_enq_01_enqueue_lands_in_waiting(store):
    result = store.enqueue(req())
    assert result.duplicate is False
    assert store.counts()["waiting"] == 1
    claimed = claim(store)
    assert isinstance(claimed, Claimed)
    assert claimed.job.id == result.id
    assert claimed.job.state == "active"
    assert claimed.job.payload == {"n": 1}


def test_enq_04_metadata_round_trips(store):
    result = store.enqueue(req(metadata={"employerId": "emp-1", "region": "us"}))
    job = store.get_job(result.id)
    assert job is not None
    assert job.metadata == {"employerId": "emp-1", "region": "us"}


def test_enq_05_trace_round_trips_and_absent_trace_stays_absent(store):
    trace = TraceContext(trace_id="trace-abc", span_id="span-def", sampled=True, delayed=False)
    with_trace = store.enqueue(req(trace=trace))
    without = store.enqueue(req())
    first = store.get_job(with_trace.id)
    second = store.get_job(without.id)
    assert first.trace == trace
    assert first.trace.sampled is True and first.trace.delayed is False
    assert second.trace is None


def test_enq_05_trace_given_as_dict(store):
    result = store.enqueue(
        req(
            trace={
                "trace_id": "trace-abc",
                "span_id": "span-def",
                "sampled": False,
                "delayed": True,
            }
        )
    )
    assert store.get_job(result.id).trace == TraceContext("trace-abc", "span-def", False, True)


def test_enq_07_generator_collisions_are_retried(make_store):
    calls = {"n": 0}

    def generator(_request: Any) -> str:
        calls["n"] += 1
        return f"u-{calls['n']}" if calls["n"] % 3 == 0 else "dup"

    store = make_store(id_generator=generator)
    store.enqueue(req(id="dup"))
    assert calls["n"] == 0, "an explicit id must bypass the generator"
    result = store.enqueue(req())
    assert result == EnqueueResult(id="u-3", duplicate=False)
    assert store.get_job("u-3") is not None
    assert store.get_job("dup").payload == {"n": 1}


def test_enq_08_generator_that_cannot_produce_a_unique_id_fails(make_store):
    store = make_store(id_generator=lambda _request: "constant")
    first = store.enqueue(req())
    assert first.id == "constant"
    with pytest.raises(JobStoreError) as info:
        store.enqueue(req(payload={"n": 2}))
    assert "unique job id" in str(info.value)
    assert store.counts() == counts_of(waiting=1)
    assert store.get_job("constant").payload == {"n": 1}


def test_enq_09_redis_generator_bounded_to_five_draws(make_store):
    state = {"n": 0, "calls": 0}

    def generator(request: Any) -> str:
        state["n"] += 1
        state["calls"] += 1
        return f"job_{request.name}_{state['n']}"

    store = make_store(id_generator=generator)
    assert store.enqueue(req(name="Gen")).id == "job_Gen_1"
    assert store.enqueue(req(name="Gen", id="mine")).id == "mine"
    assert state["n"] == 1, "the generator must not be called for explicit ids"
    for n in range(2, 6):
        assert store.enqueue(req(name="Gen", id=f"job_Gen_{n}")).duplicate is False
    state["n"] = 0
    state["calls"] = 0
    with pytest.raises(JobStoreError):
        store.enqueue(req(name="Gen"))
    assert state["calls"] == 5
    assert store.counts()["waiting"] == 6


def test_enq_10_same_prefix_shares_other_prefix_isolated_claims_atomic(make_store, redis_client):
    a = make_store()
    b = make_store()
    with extra_prefix(redis_client) as other:
        c = make_store(prefix=other)
        result = a.enqueue(req())
        assert b.get_job(result.id) is not None
        assert b.get_job(result.id).payload == {"n": 1}
        assert c.get_job(result.id) is None
        assert c.counts()["waiting"] == 0
        assert c.counts() == counts_of()

        barrier = threading.Barrier(2)
        results: dict[str, Any] = {}

        def contend(store: Any, token: str) -> None:
            barrier.wait()
            results[token] = claim(store, token=token)

        threads = [
            threading.Thread(target=contend, args=(a, "t-a")),
            threading.Thread(target=contend, args=(b, "t-b")),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        kinds = sorted(type(r).__name__ for r in results.values())
        assert kinds == ["Claimed", "Empty"]
        winner = next(r for r in results.values() if isinstance(r, Claimed))
        assert winner.job.id == result.id


# ---------------------------------------------------------------- invariants 1-8


def test_inv_02_delayed_not_claimable_before_run_at_inclusive_at_run_at(store, clock):
    result = store.enqueue(req(delay_ms=5000))
    job = store.get_job(result.id)
    assert job.state == "delayed"
    assert job.run_at == 5000
    clock.set(4999)
    empty = claim_empty(store)
    assert empty.next_run_at == 5000
    clock.set(5000)
    assert claim_job(store, token="t-2").id == result.id


@pytest.mark.parametrize("delay", [0, -5000])
def test_non_positive_delay_lands_waiting_with_run_at_now(store, clock, delay):
    clock.set(7000)
    result = store.enqueue(req(delay_ms=delay))
    job = store.get_job(result.id)
    assert job.state == "waiting"
    assert job.run_at == 7000
    assert job.enqueued_at == 7000
    assert store.counts() == counts_of(waiting=1)


def _drive_to(store: Any, job_id: str, state: str) -> None:
    if state in ("waiting", "delayed"):  # both are created by the enqueue itself
        return
    claim_id(store, job_id, token="t-drive")
    if state == "active":
        return
    outcome = {
        "completed": Complete({"ok": 1}),
        "failed": Fail({"bad": 1}),
        "cancelled": Cancelled(),
    }
    store.ack(job_id, "t-drive", outcome[state])


@pytest.mark.parametrize(
    "state", ["waiting", "delayed", "active", "completed", "failed", "cancelled"]
)
def test_inv_03_reenqueue_of_existing_id_is_a_noop_in_any_state(store, state):
    delay = 60000 if state == "delayed" else 0
    store.enqueue(req(id="X", payload={"n": 1}, priority=2, delay_ms=delay, metadata={"a": "1"}))
    _drive_to(store, "X", state)
    before = store.get_job("X")
    counts_before = store.counts()
    ledger_before = store.get_attempts("X")
    assert before.state == state

    result = store.enqueue(
        req(id="X", payload={"n": 99}, priority=9, metadata={"a": "2"}, queue="other")
    )
    assert result == EnqueueResult(id="X", duplicate=True)
    assert store.get_job("X") == before
    assert store.counts() == counts_before
    assert store.counts("other") == counts_of()
    assert store.get_attempts("X") == ledger_before


def test_inv_04_store_assigned_ids_never_collide_with_user_ids(store):
    store.enqueue(req(id="j-1", payload={"n": "user"}))
    store.enqueue(req(id="j-2", payload={"n": "user2"}))
    auto = [store.enqueue(req(payload={"n": i})) for i in range(3)]
    ids = [r.id for r in auto]
    assert all(not r.duplicate for r in auto)
    assert len(set(ids)) == 3
    assert "j-1" not in ids and "j-2" not in ids
    assert store.get_job("j-1").payload == {"n": "user"}
    assert store.get_job("j-2").payload == {"n": "user2"}
    assert store.counts()["waiting"] == 5


def test_default_ids_are_distinct_and_shaped_j_n(store):
    ids = [store.enqueue(req()).id for _ in range(5)]
    assert len(set(ids)) == 5
    for job_id in ids:
        assert job_id.startswith("j-") and job_id[2:].isdigit()


def test_enqueue_record_fields_at_insert(store, clock):
    clock.set(1234)
    result = store.enqueue(
        req(
            payload={"x": [1, 2]},
            priority=4,
            attempts_max=3,
            timeout_ms=900,
            backoff={"kind": "exponential", "delay_ms": 100, "factor": 3},
            delay_ms=100,
        )
    )
    job = store.get_job(result.id)
    assert job.id == result.id
    assert job.name == "TestJob"
    assert job.queue == "default"
    assert job.state == "delayed"
    assert job.priority == 4
    assert job.attempts_max == 3
    assert job.attempts_made == 0
    assert job.stalled_count == 0
    assert job.timeout_ms == 900
    assert job.backoff is not None and job.backoff.kind == "exponential"
    assert job.backoff.delay_ms == 100 and job.backoff.factor == 3
    assert job.keep is None
    assert job.cancel_requested is False
    assert job.dedupe_key is None
    assert job.parent is None
    assert job.flow is None
    assert job.enqueued_at == 1234
    assert job.run_at == 1334
    assert job.processed_at is None
    assert job.finished_at is None
    assert job.failed_reason is None
    assert job.exit is MISSING
    assert store.get_attempts(result.id) == []


def test_get_job_of_unknown_id_is_none(store):
    assert store.get_job("nope") is None


def test_absent_payload_is_stored_as_null(store):
    result = store.enqueue(req(payload=None))
    assert store.get_job(result.id).payload is None


def test_enqueue_is_claimable_only_from_its_queue_and_name(store):
    result = store.enqueue(req(queue="q1", name="A"))
    assert isinstance(claim(store, queue="default", names=["A"]), Empty)
    assert isinstance(claim(store, queue="q1", names=["B"]), Empty)
    assert claim_job(store, queue="q1", names=["A"]).id == result.id


def test_completed_job_is_not_reclaimed(store):
    result = store.enqueue(req())
    finish(store, result.id, Complete(None))
    assert isinstance(claim(store, token="t-again"), Empty)


def test_enqueue_request_hand_written_init_matches_its_declared_fields():
    # EnqueueRequest spells its __init__ out for speed; it must not drift from the fields.
    from store import BackoffPolicy, EnqueueRequest

    params = inspect.signature(EnqueueRequest).parameters
    fields = dataclasses.fields(EnqueueRequest)
    assert list(params) == [f.name for f in fields]
    for f in fields:
        param = params[f.name]
        assert param.kind is inspect.Parameter.KEYWORD_ONLY, f.name
        if f.default is not dataclasses.MISSING:
            assert param.default == f.default, f.name
        elif f.default_factory is not dataclasses.MISSING:
            assert param.default is None, f.name  # None stands for a fresh default
            assert getattr(EnqueueRequest(name="x"), f.name) == f.default_factory(), f.name
        else:
            assert param.default is inspect.Parameter.empty, f.name

    built = EnqueueRequest(name="x", backoff={"kind": "fixed", "delay_ms": 5})
    assert built.backoff == BackoffPolicy("fixed", 5)
    assert dataclasses.replace(built, queue="q") == EnqueueRequest(
        name="x", queue="q", backoff=BackoffPolicy("fixed", 5)
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.name = "y"  # type: ignore[misc]
    with pytest.raises(TypeError):
        EnqueueRequest("x")  # type: ignore[misc]
