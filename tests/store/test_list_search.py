"""Payload and id-prefix predicates of the list queries (the dashboard's search).

The async store runs these too (tests/aio/test_conformance.py).

``payload={"path": "value"}`` and ``id_prefix=`` are residual filters: checked per examined
row inside the budgeted list script, on whatever structure the other filters route to, so a
search at any size is one bounded call plus "continue" cursors that lose nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from store import Claimed, Fail, InvalidRequestError, RedisJobStore
from store.insights import error_group_id
from tests.store.helpers import req


def ids(result: Any) -> list[str]:
    return [job.id for job in result.items]


def walk_all(fetch: Any, **options: Any) -> tuple[list[str], int]:
    """Every match, following cursors (truncated pages included); returns (ids, calls)."""
    found: list[str] = []
    cursor, calls = None, 0
    while True:
        page = fetch(cursor=cursor, **options)
        calls += 1
        found.extend(ids(page))
        cursor = page.cursor
        if cursor is None:
            return found, calls
        assert calls < 1000


PAYLOADS = {
    "a": {"order": {"id": 42, "lines": [{"sku": "X-1"}, {"sku": "Y-2"}]}, "tags": ["urgent", "eu"]},
    "b": {"order": {"id": "42"}, "tags": []},
    "c": {"order": {"id": 43, "paid": True, "note": None, "total": 12.5}},
    "d": {"user": {"email": "ann@example.com"}, "0": "zero-key"},
    "e": [{"sku": "Z-9"}, 7],
}


@pytest.fixture
def seeded(store: RedisJobStore) -> RedisJobStore:
    for job_id, payload in PAYLOADS.items():
        store.enqueue(req(id=f"job-{job_id}", payload=payload))
    return store


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"order.id": "42"}, ["job-a", "job-b"]),  # the integer 42 and the string "42"
        ({"order.id": "43"}, ["job-c"]),
        ({"order.lines.1.sku": "Y-2"}, ["job-a"]),  # 0-based array index
        ({"order.lines.sku": "X-1"}, []),  # no implicit walk into arrays of objects
        ({"tags": "urgent"}, ["job-a"]),  # an array matches when one item does
        ({"order.paid": "true"}, ["job-c"]),
        ({"order.note": "null"}, ["job-c"]),
        ({"order.total": "12.5"}, ["job-c"]),
        ({"user.email": "ann@example.com"}, ["job-d"]),
        ({"0": "zero-key"}, ["job-d"]),  # an object key that looks like an index
        ({"0.sku": "Z-9"}, ["job-e"]),  # a top-level array
        ({"1": "7"}, ["job-e"]),
        ({"order.id": "42", "tags": "eu"}, ["job-a"]),  # predicates combine with AND
        ({"order.id": "4"}, []),  # exact, not a substring
        ({"missing.path": "x"}, []),
    ],
)
def test_payload_predicates(seeded: RedisJobStore, payload: dict[str, str], expected: list[str]):
    got = ids(seeded.list(payload=payload, order="asc", limit=50))
    assert got == expected


def test_id_prefix_and_payload_compose_with_the_other_filters(store: RedisJobStore):
    for i in range(30):
        store.enqueue(
            req(id=f"inv-{i:02d}", name="Invoice" if i % 2 else "Refund", payload={"n": i % 3})
        )
    got = ids(store.list(id_prefix="inv-1", name="Invoice", order="asc", limit=50))
    assert got == [f"inv-{i}" for i in range(11, 20, 2)]
    got = ids(store.list(id_prefix="inv-", payload={"n": "0"}, states=["waiting"], limit=50))
    assert sorted(got) == sorted(f"inv-{i:02d}" for i in range(0, 30, 3))
    # By state (the waiting sets in claim order) too.
    page = store.list_by_state(["waiting"], payload={"n": "2"}, order="asc", limit=50)
    assert ids(page) == [f"inv-{i:02d}" for i in range(2, 30, 3)]
    page = store.list_by_state(["waiting"], id_prefix="inv-2", order="asc", limit=50)
    assert ids(page) == [f"inv-{i}" for i in range(20, 30)]


def test_a_search_is_bounded_and_its_continue_cursors_lose_nothing(store: RedisJobStore):
    store.enqueue_many(
        [
            req(id=f"bulk-{i:04d}", payload={"k": "needle" if i % 97 == 5 else "hay"})
            for i in range(600)
        ]
    )
    expected = [f"bulk-{i:04d}" for i in range(600) if i % 97 == 5]
    first = store.list(payload={"k": "needle"}, order="asc", limit=50, scan_budget=100)
    assert first.truncated and first.scanned == 100 and first.cursor
    found, calls = walk_all(
        lambda **kw: store.list(
            payload={"k": "needle"}, order="asc", limit=50, scan_budget=100, **kw
        )
    )
    assert found == expected
    assert calls >= 6  # 600 rows at 100 per call


def test_payload_search_reads_long_payloads_kept_in_pieces(store: RedisJobStore):
    big = {"blob": "x" * 5000, "ref": "R-77"}
    store.enqueue(req(id="long", payload=big))
    store.enqueue(req(id="short", payload={"ref": "R-78"}))
    assert ids(store.list(payload={"ref": "R-77"})) == ["long"]


def test_a_payload_that_is_not_json_never_matches(store: RedisJobStore, redis_client: Any):
    store.enqueue(req(id="odd", payload={"a": "1"}))
    redis_client.hset(store.keys.job("odd"), "payload", "not json {")
    assert ids(store.list(payload={"a": "1"})) == []


def test_error_group_jobs_filter_by_payload(store: RedisJobStore):
    for i in range(4):
        store.enqueue(req(id=f"f-{i}", payload={"card": f"c{i % 2}"}))
    for i in range(4):
        claimed = store.claim(
            queue="default", names=["TestJob"], token=f"t{i}", lock_duration_ms=30000
        )
        assert isinstance(claimed, Claimed)
        store.ack(
            claimed.job.id, f"t{i}", Fail({"error": {"type": "CardError", "message": "declined"}})
        )
    group = error_group_id("CardError", "", "declined")
    page = store.list_by_error(group, payload={"card": "c1"}, limit=10)
    assert sorted(ids(page)) == ["f-1", "f-3"]


@pytest.mark.parametrize(
    "payload",
    [
        {"": "x"},
        {"a..b": "x"},
        {".a": "x"},
        {"a" * 201: "x"},
        {".".join("abcdefghi"): "x"},
        {"a": "v" * 1001},
        {"a": 1},
        {f"k{i}": "v" for i in range(9)},
        "a=1",
    ],
)
def test_bad_payload_filters_are_refused_before_any_read(store: RedisJobStore, payload: Any):
    with pytest.raises(InvalidRequestError):
        store.list(payload=payload)
    with pytest.raises(InvalidRequestError):
        store.list_by_state(["failed"], payload=payload)


def test_bad_id_prefixes_are_refused(store: RedisJobStore):
    with pytest.raises(InvalidRequestError):
        store.list(id_prefix="x" * 513)
    with pytest.raises(InvalidRequestError):
        store.list(id_prefix=7)  # type: ignore[arg-type]
