"""LST cases (conformance-cases.md §8) and list invariants 42-50 (store-contract.md §11).

Besides the catalogue cases this pins the port's own guarantees: keyset paging
over large tie groups (every row sharing one ``enqueued_at``) is lossless,
duplicate-free and exactly in (value, id) order with ids compared byte-wise;
malformed cursors are refused; the scan budget bounds each call and its
resume cursor loses nothing; ``list`` returns the same records as ``get_job``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pytest

from store import (
    Complete,
    EnqueueRequest,
    Fail,
    InvalidCursorError,
    JobRecord,
    ListIndexDisabledError,
    ListOrderUnsupportedError,
    ListResult,
    RedisJobStore,
    Retry,
)
from tests.store.helpers import (
    chunked_members,
    chunked_remove,
    claim_id,
    claim_job,
    extra_prefix,
    finish,
    req,
)

# ---------------------------------------------------------------------- helpers

ORDER_VALUE: dict[str, Callable[[JobRecord], int]] = {
    "enqueued_at": lambda job: job.enqueued_at,
    "run_at": lambda job: job.run_at,
    "finished_at": lambda job: job.finished_at or 0,
}


def ids_of(result: ListResult) -> list[str]:
    return [job.id for job in result.items]


def walk(
    store: RedisJobStore, *, limit: int, max_pages: int = 5000, **options: Any
) -> tuple[list[str], list[ListResult]]:
    """Follow cursors from the first page to the end; returns (ids in order, pages)."""
    ids: list[str] = []
    pages: list[ListResult] = []
    cursor = None
    for _ in range(max_pages):
        page = store.list(cursor=cursor, limit=limit, **options)
        pages.append(page)
        ids.extend(ids_of(page))
        if page.cursor is None:
            return ids, pages
        cursor = page.cursor
    raise AssertionError(f"no last page after {max_pages} pages")


def assert_exact_walk(
    store: RedisJobStore, expected: list[str], *, limit: int, **options: Any
) -> list[ListResult]:
    """Walk and check: exact order, no loss, no duplicates, full pages, cursor iff more."""
    got, pages = walk(store, limit=limit, **options)
    assert len(got) == len(set(got)), "duplicate rows across pages"
    assert got == expected
    seen = 0
    for k, page in enumerate(pages):
        assert page.truncated is False
        seen += len(page.items)
        more = seen < len(expected)
        assert (page.cursor is not None) == more, f"page {k}: cursor must be present iff more"
        if more:
            assert len(page.items) == limit, f"page {k} is short but not the last"
    assert seen == len(expected)
    return pages


def model_order(
    jobs: Iterable[JobRecord], order_by: str = "enqueued_at", order: str = "desc"
) -> list[str]:
    """The contract's order, computed independently: (value, id) with ids as UTF-8 bytes."""
    value = ORDER_VALUE[order_by]
    ranked = sorted(jobs, key=lambda job: (value(job), job.id.encode("utf-8")))
    if order == "desc":
        ranked.reverse()
    return [job.id for job in ranked]


def model_filter(
    jobs: Iterable[JobRecord],
    *,
    queue: str | None = None,
    name: str | None = None,
    states: list[str] | None = None,
    metadata: Mapping[str, str] | None = None,
) -> list[JobRecord]:
    return [
        job
        for job in jobs
        if (queue is None or job.queue == queue)
        and (name is None or job.name == name)
        and (states is None or job.state in states)
        and all(job.metadata.get(k) == v for k, v in (metadata or {}).items())
    ]


def all_records(store: RedisJobStore, ids: Iterable[str]) -> list[JobRecord]:
    records = [store.get_job(job_id) for job_id in ids]
    assert all(r is not None for r in records)
    return [r for r in records if r is not None]


# ---------------------------------------------------------------------- catalogue cases


def test_lst_02_an_empty_states_filter_matches_nothing(store):
    store.enqueue(req())
    result = store.list(states=[])
    assert result.items == []
    assert result.cursor is None
    # The empty filter is not "no filter" on any route.
    assert store.list(name="TestJob", states=[]).items == []
    assert store.list(queue="default", states=[]).items == []
    assert len(store.list().items) == 1


def test_lst_05_order_by_run_at_for_delayed_jobs_within_a_queue(store):
    late = store.enqueue(req(delay_ms=30000)).id
    soon = store.enqueue(req(delay_ms=5000)).id
    middle = store.enqueue(req(delay_ms=10000)).id
    store.enqueue(req())
    options = {"queue": "default", "states": ["delayed"], "order_by": "run_at", "order": "asc"}
    first = store.list(limit=2, **options)
    assert ids_of(first) == [soon, middle]
    assert first.cursor is not None
    second = store.list(limit=2, cursor=first.cursor, **options)
    assert ids_of(second) == [late]
    assert second.cursor is None


def test_lst_06_order_by_finished_at_across_terminal_states_with_name_and_queue(store, clock):
    first = store.enqueue(req()).id
    second = store.enqueue(req(name="OtherJob")).id
    third = store.enqueue(req()).id
    elsewhere = store.enqueue(req(queue="other")).id
    names = ["TestJob", "OtherJob"]
    for job_id, token in ((first, "t-1"), (second, "t-2"), (third, "t-3")):
        claim_id(store, job_id, names=names, token=token)
    claim_id(store, elsewhere, queue="other", token="t-4")
    for job_id, token, outcome in (
        (elsewhere, "t-4", Complete({"ok": True})),
        (third, "t-3", Complete({"ok": True})),
        (second, "t-2", Fail({"ok": False})),
        (first, "t-1", Complete({"ok": True})),
    ):
        store.ack(job_id, token, outcome)
        clock.advance(1000)

    by_finish = store.list(states=["completed", "failed"], order_by="finished_at", order="desc")
    assert ids_of(by_finish) == [first, second, third, elsewhere]
    # Proves order_by is honoured: enqueue order is the exact reverse here.
    assert ids_of(store.list()) == [elsewhere, third, second, first]
    assert ids_of(
        store.list(name="TestJob", states=["completed"], order_by="finished_at", order="desc")
    ) == [first, third, elsewhere]
    assert ids_of(
        store.list(queue="other", states=["completed"], order_by="finished_at", order="desc")
    ) == [elsewhere]


def test_lst_08_a_query_needing_a_disabled_index_dies_other_routes_serve(make_store, redis_client):
    store = make_store(indexes={"name": False})
    job_id = store.enqueue(req(name="A")).id
    finish(store, job_id, Complete(None), names=["A"])

    with pytest.raises(ListIndexDisabledError) as dead:
        store.list(name="A")
    assert dead.value.index == "name"
    assert "indexes.name" in str(dead.value)
    served = store.list(name="A", states=["completed"], order_by="finished_at")
    assert ids_of(served) == [job_id]
    assert ids_of(store.list(queue="default")) == [job_id]

    with extra_prefix(redis_client) as fresh:
        bare = make_store(prefix=fresh, indexes=False)
        with pytest.raises(ListIndexDisabledError) as dead_queue:
            bare.list(queue="default")
        assert dead_queue.value.index == "queue"
        assert "indexes.queue" in str(dead_queue.value)
        with pytest.raises(ListIndexDisabledError):
            bare.list(name="A")
        assert bare.list().items == []
        assert bare.list().cursor is None


@pytest.mark.parametrize(
    ("options", "order_by"),
    [
        ({"states": ["delayed"]}, "run_at"),
        ({"queue": "default"}, "run_at"),
        ({"queue": "default", "states": ["delayed", "waiting"]}, "run_at"),
        ({"queue": "default", "states": []}, "run_at"),
        ({"states": ["waiting", "completed"]}, "finished_at"),
        ({}, "finished_at"),
        ({"name": "TestJob"}, "finished_at"),
        ({"states": ["active"]}, "finished_at"),
    ],
)
def test_lst_09_order_by_outside_the_redis_matrix_dies(store, options, order_by):
    store.enqueue(req(delay_ms=100))
    with pytest.raises(ListOrderUnsupportedError) as dead:
        store.list(order_by=order_by, **options)
    assert dead.value.order_by == order_by


def test_lst_09_routing_comes_before_the_disabled_index_check(make_store):
    # With every index off, an unsupported order must still be reported as such.
    store = make_store(indexes=False)
    with pytest.raises(ListOrderUnsupportedError):
        store.list(name="A", order_by="run_at", states=["delayed"])
    with pytest.raises(ListOrderUnsupportedError):
        store.list(queue="q", order_by="finished_at", states=["waiting"])
    assert store.list(queue="q", order_by="run_at", states=["delayed"]).items == []


def test_lst_10_boot_rebuilds_a_markerless_index_and_the_marker_limits_later_boots(
    make_store, redis_client, prefix, clock
):
    writer = make_store(indexes=False)
    a1 = writer.enqueue(req(name="A")).id
    clock.advance(1000)
    b1 = writer.enqueue(req(name="B", queue="other")).id
    clock.advance(1000)
    a2 = writer.enqueue(req(name="A", queue="other")).id
    writer.enqueue_many([req(name="Bulk", payload={"i": i}) for i in range(1100)])
    keys = writer.keys
    assert not redis_client.exists(keys.byname("A"), keys.byname("Bulk"), keys.byqueue("other"))

    clock.set(122000)
    reader = make_store()
    assert ids_of(reader.list(name="A", order="asc")) == [a1, a2]
    assert ids_of(reader.list(queue="other", order="asc")) == [b1, a2]
    assert len(chunked_members(redis_client, keys.byname("Bulk"))) == 1100
    assert len(chunked_members(redis_client, keys.byqueue("default"))) == 1101
    assert redis_client.get(keys.index_ready("name")) == "122000"
    assert redis_client.get(keys.index_ready("queue")) == "122000"

    chunked_remove(redis_client, keys.byname("A"), a1)
    clock.advance(5000)
    third = make_store()
    # The hole is older than marker - 60 s: the tail heal does not rescan it.
    assert ids_of(third.list(name="A")) == [a2]
    assert redis_client.get(keys.index_ready("name")) == "127000"


def test_lst_11_a_boot_with_a_marker_heals_unindexed_rows_inside_the_tail_window(
    make_store, redis_client, clock
):
    first = make_store()
    old = first.enqueue(req(name="A")).id
    clock.advance(200000)
    second = make_store()
    assert redis_client.get(second.keys.index_ready("name")) == "200000"
    fresh = second.enqueue(req(name="A")).id
    chunked_remove(redis_client, second.keys.byname("A"), old, fresh)
    clock.advance(5000)
    third = make_store()
    assert ids_of(third.list(name="A")) == [fresh]
    assert redis_client.get(third.keys.index_ready("name")) == "205000"


def test_lst_13_an_orphan_index_member_is_skipped_and_removed_per_structure(
    store, redis_client, clock
):
    ghost = store.enqueue(req(name="A")).id
    clock.advance(10)
    kept = store.enqueue(req(name="A")).id
    keys = store.keys
    redis_client.delete(keys.job(ghost))

    assert ids_of(store.list(name="A")) == [kept]
    assert ghost not in chunked_members(redis_client, keys.byname("A"))
    assert ghost in chunked_members(redis_client, keys.all)
    assert ghost in chunked_members(redis_client, keys.byqueue("default"))

    assert ids_of(store.list()) == [kept]
    assert ghost not in chunked_members(redis_client, keys.all)
    assert ghost in chunked_members(redis_client, keys.byqueue("default"))

    assert ids_of(store.list(queue="default")) == [kept]
    assert ghost not in chunked_members(redis_client, keys.byqueue("default"))


# ---------------------------------------------------------------------- invariants 42-50


def test_inv_42_filters_combine_with_and_and_default_order_is_newest_first(store, clock):
    made: dict[str, str] = {}
    for label, overrides in (
        ("a-q1-x", {"name": "A", "queue": "q1", "metadata": {"tenant": "x", "tier": "gold"}}),
        ("b-q1-x", {"name": "B", "queue": "q1", "metadata": {"tenant": "x"}}),
        ("a-q2-y", {"name": "A", "queue": "q2", "metadata": {"tenant": "y", "tier": "gold"}}),
        ("a-q1-y", {"name": "A", "queue": "q1", "metadata": {"tenant": "y"}}),
        ("b-q2-x", {"name": "B", "queue": "q2", "metadata": {"tenant": "x", "tier": "gold"}}),
        ("a-q1-x-late", {"name": "A", "queue": "q1", "metadata": {"tenant": "x"}, "delay_ms": 50}),
    ):
        made[label] = store.enqueue(req(**overrides)).id
        clock.advance(10)
    claim_id(store, made["a-q1-x"], queue="q1", names=["A"])

    def labels(**options: Any) -> list[str]:
        by_id = {v: k for k, v in made.items()}
        return [by_id[i] for i in ids_of(store.list(**options))]

    newest_first = list(reversed(made))
    assert labels() == newest_first
    assert labels(name="A") == ["a-q1-x-late", "a-q1-y", "a-q2-y", "a-q1-x"]
    assert labels(queue="q2") == ["b-q2-x", "a-q2-y"]
    assert labels(states=["delayed"]) == ["a-q1-x-late"]
    assert labels(states=["active", "delayed"]) == ["a-q1-x-late", "a-q1-x"]
    assert labels(metadata={"tenant": "x"}) == ["a-q1-x-late", "b-q2-x", "b-q1-x", "a-q1-x"]
    assert labels(metadata={"tenant": "x", "tier": "gold"}) == ["b-q2-x", "a-q1-x"]
    assert labels(metadata={}) == newest_first
    assert labels(metadata={"tenant": "nobody"}) == []
    assert labels(name="A", queue="q1") == ["a-q1-x-late", "a-q1-y", "a-q1-x"]
    assert labels(name="A", queue="q1", metadata={"tenant": "x"}) == ["a-q1-x-late", "a-q1-x"]
    assert labels(name="A", queue="q1", states=["waiting"]) == ["a-q1-y"]
    assert labels(queue="q1", states=["waiting", "active"], metadata={"tier": "gold"}) == ["a-q1-x"]
    assert labels(name="B", queue="q1", states=["delayed"]) == []
    assert labels(name="nobody") == []
    assert labels(queue="nowhere") == []


def test_inv_43_keyset_pagination_walks_everything_and_the_last_page_has_no_cursor(store, clock):
    ids = []
    for n in range(23):
        ids.append(store.enqueue(req(payload={"n": n})).id)
        if n % 4 == 0:
            clock.advance(1)  # a mix of distinct and tied enqueue times
    expected = model_order(all_records(store, ids))
    for limit in (1, 5, 22, 23, 24):
        assert_exact_walk(store, expected, limit=limit)
    last = store.list(limit=23)
    assert len(last.items) == 23 and last.cursor is None


def test_limit_defaults_to_50_and_is_clamped_to_at_least_1(store):
    store.enqueue_many([req(payload={"n": n}) for n in range(60)])
    assert len(store.list().items) == 50
    assert store.list().cursor is not None
    for limit in (0, -5):
        page = store.list(limit=limit)
        assert len(page.items) == 1
        assert page.cursor is not None


def test_inv_45_all_rows_on_one_timestamp_page_losslessly_both_ways(store):
    ids = [r.id for r in store.enqueue_many([req(payload={"n": n}) for n in range(25)])]
    records = all_records(store, ids)
    assert len({job.enqueued_at for job in records}) == 1
    desc = model_order(records, order="desc")
    # Plain string comparison: within one millisecond "j-9" sorts after "j-10" ascending.
    assert desc == sorted(ids, reverse=True)
    got_desc, _ = walk(store, limit=4)
    got_asc, _ = walk(store, limit=4, order="asc")
    assert got_desc == desc
    assert got_asc == list(reversed(got_desc))


def test_inv_46_enqueued_at_ascending_with_cursors(store, clock):
    ids = []
    for n in range(7):
        ids.append(store.enqueue(req(payload={"n": n})).id)
        clock.advance(100)
    pages = assert_exact_walk(store, ids, limit=3, order="asc")
    assert [ids_of(p) for p in pages] == [ids[0:3], ids[3:6], ids[6:7]]
    assert pages[0].cursor == f"200:{ids[2]}"


def test_inv_47_run_at_ascending_over_delayed_jobs_excludes_immediate_ones(store, clock):
    delayed = []
    for delay in (9000, 3000, 3000, 7000, 1000, 5000):
        delayed.append(store.enqueue(req(delay_ms=delay)).id)
        store.enqueue(req())  # immediate: never listed by run_at
        store.enqueue(req(queue="elsewhere", delay_ms=delay))  # another queue
        clock.advance(10)
    expected = model_order(all_records(store, delayed), "run_at", "asc")
    assert_exact_walk(
        store,
        expected,
        limit=2,
        queue="default",
        states=["delayed"],
        order_by="run_at",
        order="asc",
    )
    assert_exact_walk(
        store,
        list(reversed(expected)),
        limit=4,
        queue="default",
        states=["delayed"],
        order_by="run_at",
    )


def test_inv_48_finished_at_merges_states_and_ties_break_by_id_across_sources(store, clock):
    """One finish instant for everything: the 3-way merge must still order by id, byte-wise."""
    ids = [
        r.id
        for r in store.enqueue_many(
            [req(id=f"{style}{n}") for n, style in zip(range(60), itertools.cycle("aZé:日"))]
        )
    ]
    clock.advance(5000)
    for n, job_id in enumerate(ids):
        if n % 3 == 2:
            store.cancel(job_id)
            continue
        claim_id(store, job_id, token=f"t-{n}")
        store.ack(job_id, f"t-{n}", Complete(n) if n % 3 == 0 else Fail(n))
    records = all_records(store, ids)
    assert len({job.finished_at for job in records}) == 1
    terminal = ["completed", "failed", "cancelled"]
    for order in ("desc", "asc"):
        expected = model_order(records, "finished_at", order)
        assert_exact_walk(
            store, expected, limit=7, states=terminal, order_by="finished_at", order=order
        )
        two = model_order(
            model_filter(records, states=["failed", "cancelled"]), "finished_at", order
        )
        assert_exact_walk(
            store,
            two,
            limit=4,
            states=["failed", "cancelled"],
            order_by="finished_at",
            order=order,
            name="TestJob",
        )


# ---------------------------------------------------------------------- route matrix


@pytest.fixture
def matrix(store, clock) -> list[JobRecord]:
    """~40 jobs over 2 names, 2 queues, 2 metadata values and every reachable state."""
    ids: list[str] = []
    for n in range(24):
        ids.append(
            store.enqueue(
                req(
                    name="AB"[n % 2],
                    queue=("q1", "q2")[(n // 2) % 2],
                    metadata={"k": "xy"[(n // 4) % 2]},
                    delay_ms=(0, 0, 500, 300)[n % 4] if n % 3 else 0,
                )
            ).id
        )
        if n % 5:
            clock.advance(7)  # some enqueue times tie
    ids.extend(
        r.id
        for r in store.enqueue_many(
            [req(name="AB"[n % 2], queue="q1", metadata={"k": "x"}) for n in range(8)]
            + [req(name="A", queue="q2", delay_ms=50_000) for _ in range(4)]  # run_at ties
            + [req(name="B", queue="q1", metadata={"k": "y"}, delay_ms=50_000) for _ in range(3)]
            + [req(name="A", queue="q1", metadata={"k": "y"}, delay_ms=40_000) for _ in range(2)]
        )
    )
    clock.advance(1000)  # the first loop's delayed jobs are due now
    tokens = (f"m-{n}" for n in itertools.count())
    outcomes = itertools.cycle(
        # Five outcomes over two alternating names: every (name, outcome) pair occurs.
        [Complete(1), Fail(2), Retry(10_000, 3), Complete(4), Fail(5)]
    )
    for queue in ("q1", "q2"):
        for n in range(7):
            token = next(tokens)
            job = claim_job(store, queue=queue, names=["A", "B"], token=token)
            if n == 6:
                continue  # stays active
            store.ack(job.id, token, next(outcomes))
            if n % 2:
                clock.advance(3)  # some finish times tie
    store.cancel(ids[-1])
    for job_id in ids[5:7]:
        job = store.get_job(job_id)
        if job.state in ("waiting", "delayed"):
            store.cancel(job_id)
    records = all_records(store, ids)
    states = {job.state for job in records}
    assert {"waiting", "delayed", "active", "completed", "failed", "cancelled"} <= states
    return records


def _matrix_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for queue, name, states, metadata in itertools.product(
        (None, "q1"), (None, "A"), (None, ["waiting", "completed"]), (None, {"k": "x"})
    ):
        cases.append(
            {
                "order_by": "enqueued_at",
                "queue": queue,
                "name": name,
                "states": states,
                "metadata": metadata,
            }
        )
    for queue in ("q1", "q2"):
        for name, metadata in itertools.product((None, "A"), (None, {"k": "y"})):
            cases.append(
                {
                    "order_by": "run_at",
                    "queue": queue,
                    "name": name,
                    "states": ["delayed"],
                    "metadata": metadata,
                }
            )
    for states, name, queue, metadata in itertools.product(
        (["completed"], ["failed", "cancelled"], ["completed", "failed", "cancelled"]),
        (None, "B"),
        (None, "q2"),
        (None, {"k": "x"}),
    ):
        cases.append(
            {
                "order_by": "finished_at",
                "queue": queue,
                "name": name,
                "states": states,
                "metadata": metadata,
            }
        )
    return cases


def _case_id(case: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in case.items() if v is not None)


@pytest.mark.parametrize("case", _matrix_cases(), ids=_case_id)
def test_route_matrix_serves_every_supported_combination_exactly(store, matrix, case):
    """Invariants 42, 43, 46-48: each served (filters, order_by) pair equals the model."""
    filters = {k: v for k, v in case.items() if k != "order_by"}
    selected = model_filter(matrix, **filters)
    options = {k: v for k, v in case.items() if v is not None}
    for order in ("desc", "asc"):
        expected = model_order(selected, case["order_by"], order)
        assert_exact_walk(store, expected, limit=2, order=order, **options)
        assert_exact_walk(store, expected, limit=50, order=order, **options)


def test_route_matrix_finished_at_with_no_states_left_is_an_empty_page(store, matrix):
    result = store.list(states=[], order_by="finished_at")
    assert result.items == [] and result.cursor is None


# ---------------------------------------------------------------------- large tie groups

#: Id shapes whose byte order differs from a naive numeric or case-folded order;
#: several are non-ASCII (2-, 3- and 4-byte UTF-8) and several contain colons.
ID_STYLES = ("j-", "J-", "é", "ß:", "日本:", "😀", "a:b:", "~", "z", "Ω", "\u00ff", "\U0010fffd")
BULK = 1260


@pytest.fixture
def bulk(store) -> list[JobRecord]:
    """1,260 rows from one enqueue_many call: every row shares one enqueued_at."""
    requests = []
    for i in range(BULK):
        requests.append(
            EnqueueRequest(
                id=f"{ID_STYLES[i % len(ID_STYLES)]}{i}",
                name=("A", "B", "C")[i % 3],
                queue=("q1", "q2")[i % 2],
                payload={"i": i},
                metadata={"k": str(i % 4), "tenant": "t"},
                delay_ms=1000 if i % 5 == 0 else 0,
            )
        )
    results = store.enqueue_many(requests)
    assert all(not r.duplicate for r in results)
    for i, r in enumerate(results):
        if i % 7 == 3 and i % 5:
            store.cancel(r.id)
    records = all_records(store, [r.id for r in results])
    assert len({job.enqueued_at for job in records}) == 1
    return records


BULK_FILTERS: dict[str, dict[str, Any]] = {
    "none": {},
    "name": {"name": "B"},
    "queue": {"queue": "q2"},
    "states": {"states": ["delayed", "cancelled"]},
    "metadata": {"metadata": {"k": "1"}},
    "all-four": {"name": "A", "queue": "q1", "states": ["waiting"], "metadata": {"k": "2"}},
}


@pytest.mark.parametrize("limit", [50, 77, 500, 501])
@pytest.mark.parametrize("filter_name", list(BULK_FILTERS))
def test_paging_through_one_big_tie_group_is_exact_in_both_orders(store, bulk, filter_name, limit):
    filters = BULK_FILTERS[filter_name]
    selected = model_filter(bulk, **filters)
    assert selected, "the filter must select something"
    desc = model_order(selected, order="desc")
    # For these ids plain str order is UTF-8 byte order (code point order).
    assert desc == sorted((job.id for job in selected), reverse=True)
    assert_exact_walk(store, desc, limit=limit, **filters)
    asc_pages = assert_exact_walk(store, list(reversed(desc)), limit=limit, order="asc", **filters)
    asc = [job_id for page in asc_pages for job_id in ids_of(page)]
    encoded = [job_id.encode("utf-8") for job_id in asc]
    assert all(a < b for a, b in itertools.pairwise(encoded)), "ascending must be byte-wise"


def test_list_records_are_identical_to_get_job_for_every_row(store, bulk):
    ids, pages = walk(store, limit=77)
    assert len(ids) == BULK
    for page in pages:
        for job in page.items:
            assert job == store.get_job(job.id)


def test_list_returns_full_records_in_every_state(store, clock):
    rich = {
        "metadata": {"tenant": "acme", "colon:key": "v:1"},
        "payload": {"big": 1234567890123456, "third": 1 / 3, "empty": [], "nested": {"a": [1]}},
        "priority": 5,
        "attempts_max": 3,
        "backoff": {"kind": "exponential", "delay_ms": 100, "factor": 2.0},
        "keep": {"completed": {"count": 10}, "failed": {"age_ms": 60000}},
        "timeout_ms": 2500,
        "trace": {"trace_id": "tr", "span_id": "sp", "sampled": True},
        "parent": {
            "flow_name": "f",
            "flow_id": "p-1",
            "child_key": "c",
            "parent_store_key": "main",
        },
    }
    ids = [store.enqueue(req(name=f"N{n}", **rich)).id for n in range(6)]
    deduped = store.enqueue(req(name="D", dedupe={"key": "dk"}, **rich)).id
    delayed = store.enqueue(req(name="L", delay_ms=5000, **rich)).id
    finish(store, ids[0], Complete({"exit": [1, None]}), names=["N0"])
    finish(store, ids[1], Fail(None), names=["N1"])
    claim_id(store, ids[2], names=["N2"], token="t-2")
    store.ack(ids[2], "t-2", Retry(100, {"why": "x"}))
    claim_id(store, ids[3], names=["N3"], token="t-3")
    store.cancel(ids[3])  # active with a cancel request
    store.cancel(ids[4])
    clock.advance(1)
    every = [*ids, deduped, delayed]
    listed = store.list(limit=100).items
    assert {job.id for job in listed} == set(every)
    for job in listed:
        assert job == store.get_job(job.id)
    assert {job.state for job in listed} >= {
        "completed",
        "failed",
        "delayed",
        "active",
        "cancelled",
        "waiting",
    }
    terminal = store.list(states=["completed", "failed", "cancelled"], order_by="finished_at")
    for job in terminal.items:
        assert job == store.get_job(job.id)


# ---------------------------------------------------------------------- cursors


@pytest.mark.parametrize(
    "cursor",
    ["abc", "12", ":x", "1.5:x", "x:1", "1e3:x", "12:", " 12:x", "x" * 100_000, "9" * 40 + ":x"],
)
def test_a_malformed_cursor_is_refused_with_a_message(store, cursor):
    store.enqueue(req())
    with pytest.raises(InvalidCursorError) as refused:
        store.list(cursor=cursor)
    assert isinstance(refused.value, ValueError)
    message = str(refused.value)
    assert "cursor" in message
    assert len(message) < 1000, "the message must not echo a huge cursor"


def test_a_cursor_whose_id_holds_colons_splits_at_the_first_colon(store):
    ids = [store.enqueue(req(id=f"x:{n}:y")).id for n in range(5)]
    first = store.list(limit=2)
    assert first.cursor == f"0:{ids[3]}"
    assert ids_of(store.list(limit=10, cursor=first.cursor)) == [ids[2], ids[1], ids[0]]


def test_a_cursor_past_the_last_row_returns_an_empty_last_page(store):
    store.enqueue(req(id="b"))
    for cursor, order in (("0:a", "desc"), ("0:c", "asc"), ("-1:zzz", "desc"), ("5:a", "asc")):
        page = store.list(cursor=cursor, order=order)
        assert page.items == [] and page.cursor is None
    assert ids_of(store.list(cursor="1:a")) == ["b"]


# ---------------------------------------------------------------------- scan budget


def test_scan_budget_bounds_a_residual_only_scan_and_its_cursor_resumes_losslessly(store):
    hits = {5, 650, 1000}
    requests = [
        req(id=f"r{i:05d}", metadata={"hit": "1"} if i in hits else {"hit": "0"})
        for i in range(1200)
    ]
    store.enqueue_many(requests)
    expected = [f"r{i:05d}" for i in sorted(hits, reverse=True)]

    first = store.list(metadata={"hit": "1"}, scan_budget=100)
    # Newest first: rows r01199..r01100 hold no match, so the page is empty but resumable.
    assert first.items == []
    assert first.truncated is True
    assert first.scanned == 100
    assert first.cursor is not None
    found: list[str] = []
    cursor = None
    calls = 0
    truncated_calls = 0
    while True:
        page = store.list(metadata={"hit": "1"}, scan_budget=100, cursor=cursor)
        calls += 1
        assert page.scanned <= 100
        found.extend(ids_of(page))
        if page.truncated:
            truncated_calls += 1
            assert page.scanned == 100
            assert page.cursor is not None
        if page.cursor is None:
            break
        cursor = page.cursor
        assert calls < 100
    assert found == expected
    assert truncated_calls == 11
    assert calls == 12


def test_scan_budget_truncates_with_no_items_and_a_cursor(store):
    store.enqueue_many([req(id=f"r{i:05d}", metadata={"hit": "0"}) for i in range(1200)])
    store.enqueue_many([req(id=f"a{i}", metadata={"hit": "1"}) for i in range(3)])
    # The three matches sort last in descending order (same instant, "a" < "r").
    page = store.list(metadata={"hit": "1"}, scan_budget=100)
    assert page.items == []
    assert page.truncated is True
    assert page.scanned == 100
    assert page.cursor is not None
    found, pages = walk(store, limit=50, metadata={"hit": "1"}, scan_budget=100)
    assert found == ["a2", "a1", "a0"]
    assert sum(p.scanned for p in pages) == 1203
    assert pages[-1].cursor is None and pages[-1].truncated is False
    asc, _ = walk(store, limit=2, metadata={"hit": "1"}, scan_budget=100, order="asc")
    assert asc == ["a0", "a1", "a2"]


def test_a_full_page_reports_how_many_rows_it_examined(store):
    store.enqueue_many([req(payload={"n": n}) for n in range(10)])
    page = store.list(limit=4)
    assert page.scanned == 5  # four rows plus the look-ahead that proves more exist
    assert page.truncated is False
    last = store.list(limit=4, cursor=store.list(limit=8).cursor)
    assert len(last.items) == 2 and last.cursor is None and last.scanned == 2


def test_a_page_larger_than_the_scan_budget_is_not_cut_short(store):
    store.enqueue_many([EnqueueRequest(name="A") for _ in range(1201)])
    page = store.list(limit=1100, scan_budget=100)
    assert len(page.items) == 1100
    assert page.truncated is False
    assert page.cursor is not None
    rest = store.list(limit=1100, scan_budget=100, cursor=page.cursor)
    assert len(rest.items) == 101 and rest.cursor is None
