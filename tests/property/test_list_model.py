"""Property test: ``list()`` paging against an in-memory model (hypothesis).

Random rows (names, queues, all seven states, metadata, timestamps drawn from tiny sets so
that ties are the rule, ids with non-ASCII characters and colons) are built for real through
the store's operations on a fake clock; random queries (filters, ``order_by``, ``order``, page
size, scan budget) are walked page by page following the cursors, truncated pages included.
Each walk must return exactly the model's rows in the model's order, ``(value, id)`` with ids
compared as UTF-8 bytes, without loss or duplicates, and ``ListOrderUnsupportedError`` must be
raised exactly where the model says the combination is unsupported.

Every example gets a fresh key prefix (created and deleted inside the test body: hypothesis
runs many examples per pytest call).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store import (
    ALL_STATES,
    TERMINAL_STATES,
    Cancelled,
    Claimed,
    Complete,
    EnqueueRequest,
    Fail,
    FakeClock,
    FanOut,
    FlowChildSpec,
    ListOrderUnsupportedError,
    ParentEnvelope,
    RedisJobStore,
)
from tests.conftest import delete_prefix

NAMES = ("send", "Ünï", "b")
QUEUES = ("q1", "q2", "ç")
ENQUEUED = (1000, 1001, 1002)
RUN_AT = (5000, 5001)
FINISHED = (9000, 9001, 9002)
METAS: tuple[dict[str, str], ...] = (
    {},
    {"t": "x"},
    {"t": "y"},
    {"t": "x", "k": "1"},
    {"k": "ü"},
)
#: Id characters: ASCII, Latin-1, BMP, astral, and ':' (the cursor separator).
ID_ALPHABET = "aZ0:-é€中😀~ \u00ff"

PROPERTY_SETTINGS = settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass(frozen=True)
class Row:
    id: str
    name: str
    queue: str
    state: str
    enqueued_at: int
    metadata: dict[str, str]
    run_at: int | None = None
    finished_at: int | None = None
    #: How a cancelled row got there: "ack" (claimed, acked Cancelled) or "cancel" (waiting).
    cancel_path: str = "cancel"


@dataclass(frozen=True)
class Query:
    queue: str | None
    name: str | None
    states: list[str] | None
    metadata: dict[str, str] | None
    order_by: str
    order: str
    limit: int
    scan_budget: int


@st.composite
def rows_strategy(draw: st.DrawFn) -> list[Row]:
    ids = draw(
        st.lists(
            st.text(alphabet=ID_ALPHABET, min_size=1, max_size=4),
            min_size=12,
            max_size=40,
            unique=True,
        )
    )
    rows = []
    for job_id in ids:
        state = draw(st.sampled_from(ALL_STATES))
        rows.append(
            Row(
                id=job_id,
                name=draw(st.sampled_from(NAMES)),
                queue=draw(st.sampled_from(QUEUES)),
                state=state,
                enqueued_at=draw(st.sampled_from(ENQUEUED)),
                metadata=draw(st.sampled_from(METAS)),
                run_at=draw(st.sampled_from(RUN_AT)) if state == "delayed" else None,
                finished_at=draw(st.sampled_from(FINISHED)) if state in TERMINAL_STATES else None,
                cancel_path=draw(st.sampled_from(("ack", "cancel"))),
            )
        )
    return rows


STATE_FILTERS = st.one_of(
    st.none(),
    st.sampled_from(
        [
            [],
            ["delayed"],
            ["delayed", "delayed"],
            ["completed"],
            ["failed", "completed"],
            ["cancelled", "failed", "completed"],
            ["waiting"],
            ["active", "waiting-children"],
        ]
    ),
    st.lists(st.sampled_from(ALL_STATES), max_size=4),
)
TERMINAL_FILTERS = st.lists(st.sampled_from(sorted(TERMINAL_STATES)), min_size=1, max_size=3)


def _often_none(values: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    """None half of the time (so most queries select something), else one of ``values``."""
    return st.one_of(st.none(), st.sampled_from(values))


@st.composite
def queries_strategy(draw: st.DrawFn) -> Query:
    """Mostly supported combinations (so pages have rows), sometimes anything at all."""
    order_by = draw(st.sampled_from(("enqueued_at", "enqueued_at", "run_at", "finished_at")))
    queue = draw(_often_none((*QUEUES, "nope")))
    states = draw(STATE_FILTERS)
    if draw(st.integers(0, 4)):  # 4 in 5: a combination the store serves
        if order_by == "finished_at":
            states = draw(TERMINAL_FILTERS)
        elif order_by == "run_at":
            queue = draw(st.sampled_from(QUEUES))
            states = ["delayed"]
    return Query(
        queue=queue,
        name=draw(_often_none((*NAMES, "nobody"))),
        states=states,
        metadata=draw(_often_none((*METAS, {"t": "z"}))),
        order_by=order_by,
        order=draw(st.sampled_from(("asc", "desc"))),
        limit=draw(st.integers(1, 6)),
        scan_budget=draw(st.integers(1, 12)),
    )


QUERIES = queries_strategy()


# ---------------------------------------------------------------- the model


def unsupported(q: Query) -> bool:
    """Where the contract says the store refuses the (filters, order_by) combination."""
    if q.order_by == "finished_at":
        return q.states is None or any(s not in TERMINAL_STATES for s in q.states)
    if q.order_by == "run_at":
        return q.queue is None or not q.states or any(s != "delayed" for s in q.states)
    return False


def order_value(row: Row, order_by: str) -> int:
    if order_by == "finished_at":
        assert row.finished_at is not None
        return row.finished_at
    if order_by == "run_at":
        assert row.run_at is not None
        return row.run_at
    return row.enqueued_at


def expected(rows: list[Row], q: Query) -> list[str]:
    def keep(row: Row) -> bool:
        if q.queue is not None and row.queue != q.queue:
            return False
        if q.name is not None and row.name != q.name:
            return False
        if q.states is not None and row.state not in q.states:
            return False
        return all(row.metadata.get(k) == v for k, v in (q.metadata or {}).items())

    chosen = [r for r in rows if keep(r)]
    chosen.sort(
        key=lambda r: (order_value(r, q.order_by), r.id.encode("utf-8")),
        reverse=q.order == "desc",
    )
    return [r.id for r in chosen]


# ---------------------------------------------------------------- building the rows for real


@contextmanager
def fresh_store(redis_client: Any) -> Iterator[tuple[RedisJobStore, FakeClock]]:
    prefix = f"prop-{uuid.uuid4().hex[:12]}"
    clock = FakeClock(500)
    store = RedisJobStore(redis_client, prefix=prefix, clock=clock)
    try:
        yield store, clock
    finally:
        store.close()
        delete_prefix(redis_client, prefix)


def request(row: Row, **extra: Any) -> EnqueueRequest:
    return EnqueueRequest(
        name=row.name, queue=row.queue, id=row.id, metadata=row.metadata, payload=None, **extra
    )


def build(store: RedisJobStore, clock: FakeClock, rows: list[Row]) -> None:
    """Create every row in its state, at its timestamps.

    Rows that must be claimed come first, each claimed right after its enqueue, so the only
    runnable job of its (queue, name) is that row; runnable and delayed rows come after.
    """
    claimed = [
        r
        for r in rows
        if r.state in ("active", "completed", "failed", "waiting-children")
        or (r.state == "cancelled" and r.cancel_path == "ack")
    ]
    later = [r for r in rows if r not in claimed]
    for k, row in enumerate(claimed):
        clock.set(row.enqueued_at)
        store.enqueue(request(row))
        result = store.claim(
            queue=row.queue, names=[row.name], token=f"t{k}", lock_duration_ms=10**9
        )
        assert isinstance(result, Claimed) and result.job.id == row.id
        if row.state == "active":
            continue
        if row.state == "waiting-children":
            child = EnqueueRequest(
                name="Child",
                id=f"child-{k}",
                parent=ParentEnvelope("prop", row.id, "c", store.store_key, 1),
            )
            spec = FlowChildSpec(child_key="c", store_key="elsewhere", request=child)
            store.ack(row.id, f"t{k}", FanOut(False, [spec]))
            continue
        assert row.finished_at is not None
        clock.set(row.finished_at)
        outcome = {"completed": Complete(1), "failed": Fail(2), "cancelled": Cancelled()}
        store.ack(row.id, f"t{k}", outcome[row.state])
    for row in later:
        clock.set(row.enqueued_at)
        if row.state == "delayed":
            assert row.run_at is not None
            store.enqueue(request(row, delay_ms=row.run_at - row.enqueued_at))
        else:
            store.enqueue(request(row))
        if row.state == "cancelled":
            assert row.finished_at is not None
            clock.set(row.finished_at)
            store.cancel(row.id)
    for row in rows:  # the build itself is right
        record = store.get_job(row.id)
        assert record is not None and record.state == row.state, (row, record)
        assert record.enqueued_at == row.enqueued_at
        if row.run_at is not None:
            assert record.run_at == row.run_at
        if row.finished_at is not None:
            assert record.finished_at == row.finished_at


def walk(store: RedisJobStore, q: Query, bound: int) -> tuple[list[str], int]:
    """Every page of ``q`` following cursors; returns (ids in order, pages)."""
    ids: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = store.list(
            queue=q.queue,
            name=q.name,
            states=q.states,
            metadata=q.metadata,
            order_by=q.order_by,
            order=q.order,
            cursor=cursor,
            limit=q.limit,
            scan_budget=q.scan_budget,
        )
        pages += 1
        assert len(page.items) <= q.limit
        if page.truncated:
            assert page.cursor is not None, "a truncated page must say where to continue"
        ids.extend(r.id for r in page.items)
        if page.cursor is None:
            return ids, pages
        assert pages <= bound, f"paging does not end: {pages} pages, {len(ids)} rows so far"
        cursor = page.cursor


@PROPERTY_SETTINGS
@given(rows=rows_strategy(), queries=st.lists(QUERIES, min_size=1, max_size=6))
def test_list_pages_match_the_model(redis_client: Any, rows: list[Row], queries: list[Query]):
    with fresh_store(redis_client) as (store, clock):
        build(store, clock, rows)
        for q in queries:
            if unsupported(q):
                with pytest.raises(ListOrderUnsupportedError):
                    walk(store, q, bound=1)
                continue
            want = expected(rows, q)
            got, _pages = walk(store, q, bound=4 * len(rows) + 8)
            assert len(got) == len(set(got)), f"duplicates across pages for {q}"
            assert got == want, f"{q}\n got {got}\nwant {want}"


@PROPERTY_SETTINGS
@given(rows=rows_strategy(), q=QUERIES)
def test_a_walk_is_the_same_whatever_the_page_size(redis_client: Any, rows: list[Row], q: Query):
    """Page size and scan budget only cut the walk differently, never change what it returns."""
    if unsupported(q):
        return
    with fresh_store(redis_client) as (store, clock):
        build(store, clock, rows)
        bound = 4 * len(rows) + 8
        one_by_one, _ = walk(
            store, Query(**{**q.__dict__, "limit": 1, "scan_budget": 1}), bound=bound
        )
        all_at_once, pages = walk(
            store, Query(**{**q.__dict__, "limit": 1000, "scan_budget": 5000}), bound=bound
        )
        assert pages == 1
        assert one_by_one == all_at_once == expected(rows, q)
