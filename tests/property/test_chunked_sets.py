"""Property test: the chunked sets (``all``, the name and queue indexes) against a model.

Random programs of inserts (single and bulk, user ids with ties in enqueue time and ids
that sort against their numbers: "j-10" before "j-9"), removals (single, and runs that empty
and merge chunks) and retention run through the store on a fake clock.  After every step
each chunked set must hold its invariants (tests/store/helpers.py ``assert_chunked_set``:
chunks of 1..64 members, listpack-encoded, first member = bound, ordered, exact size) and
hold exactly the model's rows; walks of ``list()`` in both orders and page sizes, following
the cursors, must return the model's order ((enqueued_at, id), ids as bytes).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store import EnqueueRequest, FakeClock, RedisJobStore
from store.chunks import CHUNK_CAPACITY
from tests.conftest import delete_prefix
from tests.store.helpers import assert_chunked_set

NAMES = ("a", "b")
QUEUES = ("q1", "q2")

SETTINGS = settings(
    max_examples=25,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

step = st.one_of(
    # (op, size, tick): bulk inserts of up to 300 rows, single inserts, removals
    st.tuples(st.just("bulk"), st.integers(1, 300), st.integers(0, 1)),
    st.tuples(st.just("one"), st.integers(1, 40), st.integers(0, 1)),
    st.tuples(st.just("remove"), st.integers(1, 200), st.integers(0, 3)),
    st.tuples(st.just("remove_run"), st.integers(1, 200), st.integers(0, 3)),
)


@contextmanager
def fresh_store(redis_client: Any) -> Iterator[tuple[RedisJobStore, FakeClock]]:
    prefix = f"t-cz-{uuid.uuid4().hex[:10]}"
    clock = FakeClock(1_000)
    store = RedisJobStore(redis_client, prefix=prefix, clock=clock)
    try:
        yield store, clock
    finally:
        store.close()
        delete_prefix(redis_client, prefix)


def walk(store: RedisJobStore, order: str, limit: int, **filters: Any) -> list[str]:
    out: list[str] = []
    cursor = None
    while True:
        page = store.list(order=order, limit=limit, cursor=cursor, **filters)
        out.extend(job.id for job in page.items)
        if page.cursor is None:
            return out
        cursor = page.cursor


def check(store: RedisJobStore, client: Any, model: dict[str, tuple[int, str, str]]) -> None:
    keys = store.keys
    sets = {keys.all: set(model)}
    for name in NAMES:
        sets[keys.byname(name)] = {i for i, (_, n, _) in model.items() if n == name}
    for queue in QUEUES:
        sets[keys.byqueue(queue)] = {i for i, (_, _, q) in model.items() if q == queue}
    for directory, expected in sets.items():
        members = assert_chunked_set(client, directory, keys.index_counts)
        assert set(members) == expected, directory
        assert all(members[i] == model[i][0] for i in members)


@given(st.lists(step, min_size=1, max_size=14), st.randoms(use_true_random=False))
@SETTINGS
def test_chunked_sets_match_the_model(redis_client: Any, program: list, rnd: Any) -> None:
    with fresh_store(redis_client) as (store, clock):
        model: dict[str, tuple[int, str, str]] = {}
        serial = 0
        for op, size, tick in program:
            clock.advance(tick)
            if op in ("bulk", "one"):
                requests = []
                for _ in range(size):
                    serial += 1
                    name, queue = rnd.choice(NAMES), rnd.choice(QUEUES)
                    # User ids in a tie group of one clock ms sort as bytes, not numbers.
                    job_id = rnd.choice((f"j-{serial}", f"u{serial}", f"é{serial % 17}-{serial}"))
                    requests.append(EnqueueRequest(id=job_id, name=name, queue=queue))
                    model[job_id] = (clock.now_ms(), name, queue)
                if op == "bulk":
                    store.enqueue_many(requests)
                else:
                    for request in requests:
                        store.enqueue(request)
            elif model:
                ordered = sorted(model, key=lambda i: (model[i][0], i.encode()))
                if op == "remove":
                    victims = rnd.sample(ordered, min(size, len(ordered)))
                else:  # a run of neighbours: empties chunks and makes them merge
                    start = rnd.randrange(len(ordered))
                    victims = ordered[start : start + size]
                for job_id in victims:
                    store.remove(job_id)
                    del model[job_id]
            check(store, redis_client, model)
        expected = sorted(model, key=lambda i: (model[i][0], i.encode()))
        for order, limit in (("asc", 7), ("desc", 50), ("asc", 500)):
            want = expected if order == "asc" else expected[::-1]
            assert walk(store, order, limit) == want
            for name in NAMES:
                assert walk(store, order, limit, name=name) == [
                    i for i in want if model[i][1] == name
                ]
            assert walk(store, order, limit, queue="q2") == [i for i in want if model[i][2] == "q2"]


def test_bulk_inserts_that_interleave_the_tail_merge_it_or_go_in_one_by_one(
    redis_client: Any,
) -> None:
    """Two bulk inserts in one millisecond whose ids interleave: the second merges the
    chunks it falls into (at most 8, lib/chunks.lua CZ_TAIL) or, behind a longer tail,
    adds the members chunk by chunk (cz_add_spread).  Either way every invariant holds and
    the order is the model's."""
    with fresh_store(redis_client) as (store, _clock):
        model: dict[str, tuple[int, str, str]] = {}

        def bulk(ids: list[str]) -> None:
            store.enqueue_many([EnqueueRequest(id=i, name="a", queue="q1") for i in ids])
            model.update(dict.fromkeys(ids, (1000, "a", "q1")))
            check(store, redis_client, model)

        bulk([f"m{n:05d}" for n in range(0, 600, 2)])  # 5 chunks at one score
        assert redis_client.zcard(store.keys.all) == 5
        bulk([f"m{n:05d}" for n in range(1, 400, 2)])  # falls into them (<= 8): merged
        # Rewritten full: no chunk was split in two on the way.
        assert redis_client.zcard(store.keys.all) == -(-len(model) // CHUNK_CAPACITY)
        bulk([f"z{n:05d}" for n in range(0, 2400, 2)])  # 19 more chunks, same score
        bulk([f"z{n:05d}" for n in range(1, 100, 2)])  # a tail of 19 chunks: spread
        expected = sorted(model, key=lambda i: (model[i][0], i.encode()))
        assert walk(store, "asc", 500) == expected
        assert walk(store, "desc", 77, name="a") == expected[::-1]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_batches_at_one_enqueue_time_spread_into_the_chunks(redis_client: Any, seed: int) -> None:
    """Batches that share one enqueue time with many earlier ones (a clock that does not
    move; store-assigned ids across a power of ten; random ids): each batch falls into
    chunks all over the set, far past the tail a merge rewrites, and goes in group by
    group: chunks that overflow are rewritten as even ones (lib/chunks.lua
    cz_add_group), and reading the directory ahead or searching it finds the next."""
    rnd = random.Random(seed)
    with fresh_store(redis_client) as (store, clock):
        model: dict[str, tuple[int, str, str]] = {}
        serial = 0
        for batch in range(14):
            if batch == 9:
                clock.advance(1)  # a later time: an append, then interleaving again
            requests = []
            for _ in range(rnd.choice((1, 40, 300, 500))):
                serial += 1
                shape = rnd.randrange(3)
                job_id = (
                    uuid.UUID(int=rnd.getrandbits(128)).hex
                    if shape == 0
                    else f"j-{serial}"
                    if shape == 1
                    else f"o-{rnd.randrange(10 ** rnd.randrange(1, 7))}-{serial}"
                )
                name, queue = rnd.choice(NAMES), rnd.choice(QUEUES)
                requests.append(EnqueueRequest(id=job_id, name=name, queue=queue))
                model[job_id] = (clock.now_ms(), name, queue)
            if len(requests) == 1:
                store.enqueue(requests[0])  # a single insert: the head, folded later
            else:
                store.enqueue_many(requests)
            check(store, redis_client, model)
        # Spread far past the tail: many chunks, none over the cap (check's invariants).
        assert redis_client.zcard(store.keys.all) > 3 * 8
        expected = sorted(model, key=lambda i: (model[i][0], i.encode()))
        assert walk(store, "asc", 500) == expected
        assert walk(store, "desc", 61, queue="q1") == [
            i for i in expected[::-1] if model[i][2] == "q1"
        ]
