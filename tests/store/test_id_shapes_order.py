"""Ids of every shape land in the right order in every list (issue 28).

The chunked sets keep (enqueued_at, id as bytes); ids that do not sort like their arrival
(random uuid4 and ULID ids, business ids whose digit count varies, store-assigned ids that
cross a power of ten) and batches that share an enqueue time with earlier ones insert in
the middle of what is there.  Each case enqueues three rounds (two at one time, the third a
millisecond later), by single ``enqueue`` (through the head and its folds) or by
``enqueue_many``, spread over two names and two queues, then reads every list the store
serves -- all jobs, by name, by queue, by both, both orders, in pages -- the waiting
listing in claim order, and the claims themselves, against orders computed here.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from store import Claimed, Empty
from tests.store.helpers import assert_chunked_set, claim, req

ROUND = 150  # more than the head's 128 rows: single inserts fold mid-round
TIMES = (5_000, 5_000, 5_001)  # the second round shares the first one's time

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _ulid(rng: random.Random, ms: int) -> str:
    value = (ms << 80) | rng.getrandbits(80)
    return "".join(CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


def _shapes() -> dict[str, Callable[[random.Random, int], str | None]]:
    return {
        "uuid4": lambda rng, i: str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "ulid": lambda rng, i: _ulid(rng, 1_700_000_000_000 + i // 7),
        "mixed-width": lambda rng, i: f"order-{rng.randint(1, 10 ** rng.randint(1, 7))}-{i}",
        "store-assigned": lambda rng, i: None,
    }


def _pages(fetch: Callable[..., Any], limit: int = 64, **options: Any) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        page = fetch(cursor=cursor, limit=limit, **options)
        ids += [job.id for job in page.items]
        cursor = page.cursor
        if cursor is None:
            return ids


@pytest.mark.parametrize("mode", ["single", "bulk"])
@pytest.mark.parametrize("shape", sorted(_shapes()))
def test_ids_of_every_shape_keep_the_order_of_every_list(store, clock, shape, mode):
    rng = random.Random(f"{shape}-{mode}")
    make_id = _shapes()[shape]
    if shape == "store-assigned":
        store.client.set(store.keys.seq, 10_000 - ROUND)  # 'j-9851' ... 'j-10300'
    jobs: list[tuple[int, str, str, str]] = []  # (enqueued_at, id, name, queue), arrival order
    for round_no, now in enumerate(TIMES):
        clock.set(now)
        items = []
        for k in range(ROUND):
            i = round_no * ROUND + k
            items.append(
                req(id=make_id(rng, i), name=f"n{i % 2}", queue=f"q{i % 3 % 2}", payload={"i": i})
            )
        if mode == "bulk":
            results = store.enqueue_many(items)
        else:
            results = [store.enqueue(item) for item in items]
        for item, result in zip(items, results, strict=True):
            assert not result.duplicate
            jobs.append((now, result.id, item.name, item.queue))
    ids = [job_id for _, job_id, _, _ in jobs]
    assert len(set(ids)) == len(ids)
    if shape == "store-assigned":
        assert ids[0] == "j-9851" and ids[-1] == "j-10300"

    def expected(name: str | None = None, queue: str | None = None) -> list[str]:
        rows = [(t, i.encode()) for t, i, n, q in jobs if name in (None, n) and queue in (None, q)]
        return [i.decode() for _, i in sorted(rows)]

    # Every chunked set keeps its invariants and holds exactly its jobs.
    keys = store.keys
    for directory, name, queue in [
        (keys.all, None, None),
        *[(keys.byname(n), n, None) for n in ("n0", "n1")],
        *[(keys.byqueue(q), None, q) for q in ("q0", "q1")],
    ]:
        members = assert_chunked_set(store.client, directory, keys.index_counts)
        assert sorted(members) == sorted(expected(name, queue)), directory

    # Every list, both orders, in pages that cross chunk boundaries.
    for name, queue in [(None, None), ("n0", None), (None, "q1"), ("n1", "q0")]:
        options = {k: v for k, v in (("name", name), ("queue", queue)) if v}
        want = expected(name, queue)
        assert _pages(store.list, order="asc", **options) == want, (name, queue)
        assert _pages(store.list, order="desc", **options) == want[::-1], (name, queue)

    # Waiting jobs are taken in arrival order, whatever their ids: the waiting listing
    # (asc = next to be claimed first) and the claims agree with it.
    for name, queue in [("n0", "q0"), ("n1", "q1")]:
        fifo = [i for _, i, n, q in jobs if n == name and q == queue]
        listed = _pages(
            store.list_by_state, states=["waiting"], queue=queue, name=name, order="asc"
        )
        assert listed == fifo, (name, queue)
        taken = []
        for k in range(len(fifo)):
            got = claim(store, queue=queue, names=[name], token=f"t-{k}")
            assert isinstance(got, Claimed), got
            taken.append(got.job.id)
        assert taken == fifo, (name, queue)
        assert isinstance(claim(store, queue=queue, names=[name], token="t-end"), Empty)
