"""Property test: JSON payloads and exits round-trip exactly; non-JSON input writes nothing.

Arbitrary JSON values (nested lists and objects, integers far beyond 2**64, floats such as
1/3, 5e-324 and -0.0, unicode including astral characters, control characters and lone
surrogates) go through enqueue -> get_job -> claim -> ack(Complete(value)) -> exit and the
ledger, and through ``enqueue_many`` and ``list``.  "Exactly" means the canonical JSON text is
identical: 1 stays an int and 1.0 a float, True stays a bool, -0.0 keeps its sign, key order
is kept, and ``Complete(None)`` reads back as a ``null`` exit (not as "no exit").

Values JSON cannot hold (NaN, infinities, sets, bytes, arbitrary objects, Decimal, complex),
anywhere inside an otherwise valid payload, are refused with ``JobStoreError`` by ``enqueue``
and by ``enqueue_many`` (one bad item refuses the whole batch), and no key is written.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store import (
    MISSING,
    Claimed,
    Complete,
    EnqueueRequest,
    FakeClock,
    JobStoreError,
    RedisJobStore,
)
from tests.conftest import delete_prefix

PROPERTY_SETTINGS = settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

SPECIAL_FLOATS = [1 / 3, 2 / 3, 0.1, 1e-300, 5e-324, 1.7976931348623157e308, -0.0, 1e16, 2.5e-8]
SPECIAL_INTS = [2**53 + 1, -(2**63), 2**64, 10**30, 1234567890123456, -1]
TEXT = st.text(
    # every code point, lone surrogates and control characters included
    alphabet=st.characters(exclude_categories=()),
    max_size=12,
)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from(SPECIAL_INTS),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(SPECIAL_FLOATS),
    TEXT,
)
JSON_VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(TEXT, inner, max_size=5),
    ),
    max_leaves=30,
)


def canonical(value: Any) -> str:
    """Type- and order-exact text of a JSON value (ints vs floats, -0.0, bools, key order)."""
    return json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def same(a: Any, b: Any) -> bool:
    return canonical(a) == canonical(b)


@contextmanager
def fresh_store(redis_client: Any) -> Iterator[tuple[RedisJobStore, str]]:
    prefix = f"rt-{uuid.uuid4().hex[:12]}"
    store = RedisJobStore(redis_client, prefix=prefix, clock=FakeClock(1_000))
    try:
        yield store, prefix
    finally:
        store.close()
        delete_prefix(redis_client, prefix)


def keys_of(redis_client: Any, prefix: str) -> dict[str, Any]:
    """Every key of the store with a dump of its value (to prove nothing changed)."""
    out = {}
    for key in redis_client.scan_iter(match="{" + prefix + "}*", count=500):
        out[key] = redis_client.dump(key)
    return out


@PROPERTY_SETTINGS
@given(payload=JSON_VALUES, result=JSON_VALUES, more=st.lists(JSON_VALUES, max_size=4))
def test_payloads_and_exits_round_trip_exactly(
    redis_client: Any, payload: Any, result: Any, more: list[Any]
) -> None:
    with fresh_store(redis_client) as (store, _prefix):
        job_id = store.enqueue(EnqueueRequest(name="RT", queue="rt", payload=payload)).id
        record = store.get_job(job_id)
        assert record is not None and same(record.payload, payload)

        claimed = store.claim(queue="rt", names=["RT"], token="t", lock_duration_ms=60_000)
        assert isinstance(claimed, Claimed) and claimed.job.id == job_id
        assert same(claimed.job.payload, payload)

        store.ack(job_id, "t", Complete(result))
        done = store.get_job(job_id)
        assert done is not None and done.state == "completed"
        assert done.exit is not MISSING and same(done.exit, result)
        assert same(done.payload, payload)
        (attempt,) = store.get_attempts(job_id)
        assert attempt.outcome == "completed" and same(attempt.exit, result)

        ids = [
            r.id for r in store.enqueue_many([EnqueueRequest(name="M", payload=v) for v in more])
        ]
        for many_id, value in zip(ids, more, strict=True):
            stored = store.get_job(many_id)
            assert stored is not None and same(stored.payload, value)
        listed = {r.id: r for r in store.list(limit=100).items}
        assert same(listed[job_id].payload, payload) and same(listed[job_id].exit, result)


def test_the_classic_precision_traps_round_trip() -> None:
    """The contract's own examples (store-contract.md §1 rule 3), stated once explicitly."""
    for value in (1234567890123456, 1 / 3, [], {}, {"a": {"b": []}}, -0.0, 2**64, None):
        assert same(json.loads(canonical(value)), value)


BAD_LEAVES = st.sampled_from(
    [
        math.nan,
        math.inf,
        -math.inf,
        {1, 2},
        frozenset(),
        b"bytes",
        bytearray(b"x"),
        object(),
        Decimal("1.5"),
        complex(1, 2),
        {(1, 2): "tuple key"},
    ]
)
POISONED = st.recursive(
    BAD_LEAVES,
    lambda inner: st.one_of(
        # the bad value sits among valid siblings
        st.tuples(inner, st.lists(JSON_VALUES, max_size=2)).map(lambda t: [*t[1], t[0]]),
        st.tuples(TEXT, inner, st.dictionaries(TEXT, JSON_VALUES, max_size=2)).map(
            lambda t: {**t[2], t[0]: t[1]}
        ),
    ),
    max_leaves=6,
)


@PROPERTY_SETTINGS
@given(bad=POISONED, good=st.lists(JSON_VALUES, min_size=1, max_size=3), where=st.integers(0, 3))
def test_non_json_payloads_are_refused_and_nothing_is_written(
    redis_client: Any, bad: Any, good: list[Any], where: int
) -> None:
    with fresh_store(redis_client) as (store, prefix):
        store.enqueue(EnqueueRequest(name="Before", payload={"ok": 1}))
        before = keys_of(redis_client, prefix)
        counts = store.counts()
        with pytest.raises(JobStoreError):
            store.enqueue(EnqueueRequest(name="Bad", payload=bad))
        batch = [EnqueueRequest(name="Good", payload=v) for v in good]
        batch.insert(min(where, len(batch)), EnqueueRequest(name="Bad", payload=bad))
        with pytest.raises(JobStoreError):
            store.enqueue_many(batch)
        assert keys_of(redis_client, prefix) == before
        assert store.counts() == counts


def test_deep_nesting_beyond_the_encoder_is_refused_cleanly(redis_client: Any) -> None:
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    with fresh_store(redis_client) as (store, prefix):
        before = keys_of(redis_client, prefix)
        with pytest.raises(JobStoreError):
            store.enqueue(EnqueueRequest(name="Deep", payload=deep))
        assert keys_of(redis_client, prefix) == before


def test_non_string_object_keys_are_refused(redis_client: Any) -> None:
    with fresh_store(redis_client) as (store, _prefix), pytest.raises(JobStoreError):
        store.enqueue(EnqueueRequest(name="Keys", payload={1: "a", "1": "b"}))
