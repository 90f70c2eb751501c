"""BAT cases (conformance-cases.md §12) and enqueue_many invariants 9-14 (store-contract.md §4.2).

The store sends plain items in chunks of 500; the large tests seed 1,201 items so every
chunk boundary (500, 1000) is crossed.
"""

from __future__ import annotations

from typing import Any

from store import (
    BackoffPolicy,
    Claimed,
    Empty,
    EnqueueResult,
    KeepPolicy,
    ParentEnvelope,
    ScheduleRecord,
    TraceContext,
)
from tests.store.helpers import (
    Waiter,
    assert_chunked_set,
    claim,
    claim_empty,
    claim_job,
    counts_of,
    req,
)


def test_bat_01_batch_insert_with_positional_results(store):
    results = store.enqueue_many(
        [
            req(payload={"n": 1}),
            req(payload={"n": 2}, delay_ms=60000),
            req(id="batch-3", payload={"n": 3}, priority=5),
        ]
    )
    assert len(results) == 3
    assert all(r.duplicate is False for r in results)
    assert len({r.id for r in results}) == 3
    assert results[2].id == "batch-3"
    counts = store.counts()
    assert counts["waiting"] == 2
    assert counts["delayed"] == 1
    batch3 = store.get_job("batch-3")
    assert batch3.payload == {"n": 3}
    assert batch3.priority == 5
    delayed = store.get_job(results[1].id)
    assert delayed.state == "delayed"
    assert delayed.run_at == 60000
    assert store.get_job(results[0].id).payload == {"n": 1}
    assert claim_job(store).id == "batch-3"


def test_bat_03_repeats_of_one_id_behave_like_separate_enqueues(store):
    results = store.enqueue_many(
        [req(id="same", payload={"n": 1}), req(id="same", payload={"n": 2})]
    )
    assert [r.duplicate for r in results] == [False, True]
    assert results[1].id == "same"
    assert store.counts()["waiting"] == 1
    assert store.get_job("same").payload == {"n": 1}


def test_bat_04_per_item_dedupe_policies_apply_in_order(store):
    results = store.enqueue_many(
        [
            req(payload={"n": 1}, dedupe={"key": "k"}),
            req(payload={"n": 2}),
            req(payload={"n": 3}, dedupe={"key": "k"}),
        ]
    )
    assert [r.duplicate for r in results] == [False, False, True]
    assert results[2].id == results[0].id
    assert store.counts()["waiting"] == 2


def _rich(job_id: str) -> Any:
    return req(
        id=job_id,
        payload={"big": 1234567890123456, "nested": {"arr": [1, 2, 3]}},
        metadata={"tenant": "acme", "region": "us"},
        priority=3,
        attempts_max=4,
        backoff=BackoffPolicy(kind="fixed", delay_ms=2000),
        keep={"completed": {"count": 2}},
        timeout_ms=9000,
        trace=TraceContext(trace_id="trace-1", span_id="span-1", sampled=True, delayed=False),
        parent=ParentEnvelope(
            flow_name="rich-flow",
            flow_id="rich-parent",
            child_key="rich-child",
            parent_store_key="effect-mq/JobStore",
            depth=1,
        ),
    )


def _projection(job: Any) -> tuple[Any, ...]:
    return (
        job.name,
        job.queue,
        job.state,
        job.payload,
        job.metadata,
        job.priority,
        job.attempts_max,
        job.attempts_made,
        job.backoff,
        job.keep,
        job.timeout_ms,
        job.cancel_requested,
        job.trace,
        job.parent,
        job.flow,
        job.run_at,
        job.enqueued_at,
    )


def test_bat_06_single_and_batch_inserts_persist_every_field_and_list_matches(store):
    store.enqueue(_rich("rich-single"))
    assert store.enqueue_many([_rich("rich-batch")]) == [
        EnqueueResult(id="rich-batch", duplicate=False)
    ]
    reference = (
        "TestJob",
        "default",
        "waiting",
        {"big": 1234567890123456, "nested": {"arr": [1, 2, 3]}},
        {"tenant": "acme", "region": "us"},
        3,
        4,
        0,
        BackoffPolicy(kind="fixed", delay_ms=2000),
        KeepPolicy.coerce({"completed": {"count": 2}}),
        9000,
        False,
        TraceContext("trace-1", "span-1", True, False),
        ParentEnvelope("rich-flow", "rich-parent", "rich-child", "effect-mq/JobStore", 1),
        None,
        0,
        0,
    )
    single = store.get_job("rich-single")
    batch = store.get_job("rich-batch")
    assert _projection(single) == reference
    assert _projection(batch) == _projection(single)
    assert single.keep.failed is None and single.keep.cancelled is None
    assert type(single.payload["big"]) is int
    items = store.list(name="TestJob").items
    assert sorted(job.id for job in items) == ["rich-batch", "rich-single"]
    for job in items:
        assert _projection(job) == reference
        assert job == store.get_job(job.id)  # list returns complete records


def test_bat_06_tick_insert_persists_every_field_like_enqueue(store):
    store.enqueue(_rich("rich-single"))
    store.upsert_schedule(
        ScheduleRecord(key="TestJob/parity", job_name="TestJob", every_ms=60_000, next_run_at=0)
    )
    assert store.tick_schedule("TestJob/parity", 0, 60_000, _rich("rich-tick")) is True
    single, tick = store.get_job("rich-single"), store.get_job("rich-tick")
    assert _projection(tick) == _projection(single)
    items = store.list(name="TestJob").items
    assert sorted(job.id for job in items) == ["rich-single", "rich-tick"]
    for job in items:
        assert _projection(job) == _projection(single)
        assert job == store.get_job(job.id)


def test_bat_07_enqueue_many_wakes_parked_takers(store):
    empty = claim_empty(store)
    waiter = Waiter(store, ["default"], empty.wake_token).start_parked()
    store.enqueue_many([req()])
    assert waiter.outcome() is True
    assert isinstance(claim(store), Claimed)


# ---------------------------------------------------------------- invariants 10-14


def test_inv_14_empty_batch_is_empty_list(store):
    assert store.enqueue_many([]) == []
    assert store.counts() == counts_of()


def test_inv_11_pre_existing_ids_reported_positionally_without_clobbering(store):
    store.enqueue(req(id="pre", payload={"n": "original"}, priority=1))
    results = store.enqueue_many(
        [
            req(id="new-a", payload={"n": "a"}),
            req(id="pre", payload={"n": "clobber"}, priority=9),
            req(id="new-b", payload={"n": "b"}),
        ]
    )
    assert results == [
        EnqueueResult("new-a", False),
        EnqueueResult("pre", True),
        EnqueueResult("new-b", False),
    ]
    pre = store.get_job("pre")
    assert pre.payload == {"n": "original"}
    assert pre.priority == 1
    assert store.counts() == counts_of(waiting=3)


def test_inv_10_priority_and_delay_survive_the_batch_path(store, clock):
    clock.set(1000)
    results = store.enqueue_many(
        [
            req(payload={"n": 0}),
            req(payload={"n": 1}, priority=2),
            req(payload={"n": 2}, delay_ms=500),
            req(payload={"n": 3}, priority=-1),
            req(payload={"n": 4}, priority=2),
        ]
    )
    assert store.get_job(results[2].id).run_at == 1500
    assert store.get_job(results[0].id).run_at == 1000
    assert store.get_job(results[0].id).enqueued_at == 1000
    order = [claim_job(store, token=f"t-{i}").id for i in range(4)]
    assert order == [results[1].id, results[4].id, results[0].id, results[3].id]
    assert isinstance(claim(store, token="t-x"), Empty)


def test_inv_04_in_one_chunk_a_user_j_id_never_collides_with_later_store_ids(store):
    # The chunk reserves its ordinals before it reads the items; an explicit "j-<n>" id
    # inside that range must not be overwritten by a store-assigned id of the same chunk.
    base = int(store.enqueue(req()).id[2:])
    taken = [f"j-{base + k}" for k in (2, 3, 5)]
    batch = [req(id=job_id, payload={"user": job_id}) for job_id in taken]
    batch += [req(payload={"auto": k}) for k in range(6)]
    results = store.enqueue_many(batch)
    assert [r.id for r in results[:3]] == taken
    assert not any(r.duplicate for r in results)
    ids = [r.id for r in results]
    assert len(set(ids)) == len(ids) == 9
    for job_id in taken:
        assert store.get_job(job_id).payload == {"user": job_id}
    for k, r in enumerate(results[3:]):
        assert store.get_job(r.id).payload == {"auto": k}
    assert store.counts()["waiting"] == 10


def test_batch_dedupe_and_id_duplicates_mixed(store):
    results = store.enqueue_many(
        [
            req(id="a", dedupe={"key": "k"}),
            req(id="b", dedupe={"key": "k"}),
            req(id="a"),
            req(id="c"),
        ]
    )
    assert results == [
        EnqueueResult("a", False),
        EnqueueResult("a", True),
        EnqueueResult("a", True),
        EnqueueResult("c", False),
    ]
    assert store.get_job("b") is None
    assert store.counts() == counts_of(waiting=2)


# ---------------------------------------------------------------- crossing chunk boundaries


def test_enqueue_many_1201_items_positional_fifo_and_exact_counts(store):
    requests = [req(payload={"i": i}) for i in range(1201)]
    results = store.enqueue_many(requests)
    assert len(results) == 1201
    assert all(r.duplicate is False for r in results)
    ids = [r.id for r in results]
    assert len(set(ids)) == 1201
    assert store.counts() == counts_of(waiting=1201)
    for i in (0, 1, 499, 500, 501, 999, 1000, 1001, 1200):
        assert store.get_job(ids[i]).payload == {"i": i}
    claimed = [claim_job(store, token=f"t-{n}").id for n in range(1201)]
    assert claimed == ids, "FIFO must follow batch order across chunks"
    assert isinstance(claim(store, token="t-end"), Empty)
    assert store.counts() == counts_of(active=1201)


def test_enqueue_many_1201_items_with_duplicates_and_dedupe_across_chunks(store):
    for i in (499, 500, 1000):
        store.enqueue(req(id=f"e-{i:04d}", payload={"pre": i}))
    requests = []
    for i in range(1201):
        dedupe = {"key": "shared"} if i % 250 == 0 else None
        delay = 1000 if i % 400 == 399 else 0
        requests.append(req(id=f"e-{i:04d}", payload={"i": i}, dedupe=dedupe, delay_ms=delay))
    results = store.enqueue_many(requests)
    assert len(results) == 1201
    expected = []
    for i in range(1201):
        if i in (499, 500, 1000):
            expected.append(EnqueueResult(f"e-{i:04d}", True))  # explicit id wins first
        elif i in (250, 750):
            expected.append(EnqueueResult("e-0000", True))  # deduped onto item 0
        else:
            expected.append(EnqueueResult(f"e-{i:04d}", False))
    assert results == expected
    for i in (499, 500, 1000):
        assert store.get_job(f"e-{i:04d}").payload == {"pre": i}
    assert store.get_job("e-0250") is None and store.get_job("e-0750") is None
    delayed_ids = {f"e-{i:04d}" for i in range(1201) if i % 400 == 399}
    inserted = 1201 - 3 - 2
    assert store.counts() == counts_of(
        waiting=3 + inserted - len(delayed_ids), delayed=len(delayed_ids)
    )
    for job_id in delayed_ids:
        assert store.get_job(job_id).state == "delayed"
    expected_order = ["e-0499", "e-0500", "e-1000"] + [
        r.id for r in results if not r.duplicate and r.id not in delayed_ids
    ]
    claimed = [claim_job(store, token=f"t-{n}").id for n in range(len(expected_order))]
    assert claimed == expected_order
    assert isinstance(claim(store, token="t-end"), Empty)


# ---------------------------------------------------------------- chunked sets, batch order


def _listed(store, **options: Any) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        page = store.list(cursor=cursor, limit=200, order="asc", **options)
        ids += [job.id for job in page.items]
        cursor = page.cursor
        if cursor is None:
            return ids


def test_auto_id_batches_reach_the_chunked_sets_in_order_across_a_power_of_ten(store, clock):
    # A batch of auto ids skips the sort while its ordinals keep one number of digits;
    # one that crosses 999 -> 1000 ('j-1000' sorts before 'j-999') is sorted, and the
    # next batch, in the same millisecond, interleaves with it ('j-1201' < 'j-999').
    # Two names and two queues put part of each batch in each index set.
    clock.set(5_000)
    store.client.set(store.keys.seq, 700)
    keys = store.keys
    expected: dict[str, list[str]] = {}
    for _ in range(2):
        items = [
            req(name=f"n{i % 2}", queue=f"q{i % 3 > 0:d}", payload={"i": i}) for i in range(500)
        ]
        for item, result in zip(items, store.enqueue_many(items), strict=True):
            assert not result.duplicate
            for key in ("all", f"name:{item.name}", f"queue:{item.queue}"):
                expected.setdefault(key, []).append(result.id)
        # After each batch: every set holds its rows, in chunks that keep the order.
        for key, rows in expected.items():
            if key == "all":
                directory = keys.all
            elif key.startswith("name:"):
                directory = keys.byname(key[5:])
            else:
                directory = keys.byqueue(key[6:])
            members = assert_chunked_set(store.client, directory, keys.index_counts)
            assert set(members) == set(rows), key
            assert set(members.values()) == {5_000.0}, key
    assert expected["all"][0] == "j-701" and expected["all"][-1] == "j-1700"
    # Listed oldest first: one millisecond, so ids as bytes.
    by_bytes = sorted(expected["all"], key=str.encode)
    assert _listed(store) == by_bytes
    assert _listed(store, name="n1") == sorted(expected["name:n1"], key=str.encode)
    assert _listed(store, queue="q0") == sorted(expected["queue:q0"], key=str.encode)


def test_a_batch_with_explicit_ids_out_of_order_is_sorted_into_the_chunked_sets(store, clock):
    clock.set(5_000)
    ids = [f"id-{n:03d}" for n in range(300)][::-1] + [None] * 200
    results = store.enqueue_many([req(id=job_id, payload={"n": 1}) for job_id in ids])
    members = assert_chunked_set(store.client, store.keys.all, store.keys.index_counts)
    assert set(members) == {r.id for r in results}
    assert _listed(store) == sorted(members, key=str.encode)
