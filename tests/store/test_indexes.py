"""The list indexes' lifecycle (store-contract.md §7.3, redis-layout.md §8) and its operator tools.

Boot reconcile: full rebuild without a marker, tail heal with one, marker-only
deletion when disabled; and the operator tools: ``index_status``,
``reclaim_index`` (SCAN + UNLINK in batches, glob-safe), ``reindex``.  The data
sets cross every 500-item batch boundary (ZSCAN pages, rebuild chunks, tail
pages, SCAN/pipeline/UNLINK batches).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from store import (
    InvalidRequestError,
    JobStoreError,
    RedisJobStore,
)
from store.chunks import CHUNK_CAPACITY, split_chunk_key
from store.indexes import (
    IndexStatus,
    ReclaimResult,
    glob_escape,
    index_pattern,
    index_status,
    ready_marker,
    reclaim_index,
    reindex,
)
from tests.store.helpers import assert_chunked_set, chunked_remove, req

ROWS = 1250  # > 2 x 500: crosses every batch boundary at least twice
QUEUES = ("q0", "q1", "q2")


def seed_distinct_names(store: RedisJobStore, rows: int = ROWS) -> list[str]:
    """``rows`` jobs, each with its own name (so ``rows`` name zsets), over three queues."""
    results = store.enqueue_many(
        [req(name=f"N{i}", queue=QUEUES[i % 3], payload={"i": i}) for i in range(rows)]
    )
    return [r.id for r in results]


def all_index_keys(client: Any, store: RedisJobStore, kind: str) -> set[str]:
    """Every key of the kind's indexes: directories and chunks (store/chunks.py)."""
    return set(client.scan_iter(match=index_pattern(store, kind), count=1000))


def index_keys(client: Any, store: RedisJobStore, kind: str) -> set[str]:
    """The kind's index sets: their directories, one per name or queue."""
    return {k for k in all_index_keys(client, store, kind) if split_chunk_key(k) is None}


def members(client: Any, key: str) -> set[str]:
    return set(client.zrange(key, 0, -1))


def listed_ids(store: RedisJobStore, **options: Any) -> list[str]:
    out: list[str] = []
    cursor = None
    while True:
        page = store.list(cursor=cursor, limit=500, **options)
        out.extend(job.id for job in page.items)
        if page.cursor is None:
            return out
        cursor = page.cursor


@contextlib.contextmanager
def literal_prefix(client: Any, value: str) -> Iterator[str]:
    """A prefix full of glob characters, cleaned up with an escaped pattern."""
    try:
        yield value
    finally:
        pattern = glob_escape("{" + value + "}") + "*"
        keys = list(client.scan_iter(match=pattern, count=500))
        for start in range(0, len(keys), 500):
            client.unlink(*keys[start : start + 500])


# ---------------------------------------------------------------------- boot reconcile


def test_rolling_deploy_full_rebuild_when_there_is_no_marker(make_store, redis_client, clock):
    old_writer = make_store(indexes={"name": False})
    ids = seed_distinct_names(old_writer)
    clock.advance(10)
    late = old_writer.enqueue(req(name="N7")).id
    assert not redis_client.exists(old_writer.keys.byname("N7"))
    assert redis_client.get(old_writer.keys.index_ready("name")) is None

    clock.set(500_000)
    reader = make_store()
    assert listed_ids(reader, name="N7") == [late, ids[7]]
    assert all(listed_ids(reader, name=f"N{i}") == [ids[i]] for i in (0, 499, 500, 1000, 1249))
    assert len(index_keys(redis_client, reader, "name")) == ROWS
    assert redis_client.get(reader.keys.index_ready("name")) == "500000"


def test_rolling_deploy_tail_heal_picks_up_rows_of_index_less_writers(
    make_store, redis_client, clock
):
    old_writer = make_store(indexes={"name": False})
    ancient = old_writer.enqueue(req(name="Old")).id
    clock.set(100_000)
    first_new = make_store()  # full rebuild; marker 100000
    assert redis_client.get(first_new.keys.index_ready("name")) == "100000"
    assert listed_ids(first_new, name="Old") == [ancient]
    # A hole below marker - 60 s: a tail heal must leave it, a full rebuild would not.
    chunked_remove(redis_client, first_new.keys.byname("Old"), ancient)

    clock.advance(1_000)
    written_late = seed_distinct_names(old_writer)  # still running old code: no index writes
    assert not redis_client.exists(first_new.keys.byname("N0"))
    assert listed_ids(first_new, name="N600") == []

    clock.advance(30_000)
    last_new = make_store()
    assert redis_client.get(last_new.keys.index_ready("name")) == "131000"
    for i in (0, 499, 500, 999, 1000, 1249):
        assert listed_ids(last_new, name=f"N{i}") == [written_late[i]]
    # "Old" lost its only member and stays unhealed; the listing drops the emptied
    # chunk's directory entry, and with it the set.
    assert listed_ids(last_new, name="Old") == []
    assert len(index_keys(redis_client, last_new, "name")) == ROWS


def test_a_tail_heal_over_full_chunks_splits_none_of_them(make_store, redis_client, clock):
    """Re-adding members a set already holds (every boot heals the last 60 s) leaves its
    chunks as they were: a full chunk is split only for a member that is new to it."""
    writer = make_store()
    writer.enqueue_many([req(payload={"i": i}) for i in range(4 * CHUNK_CAPACITY)])
    directories = [writer.keys.all, writer.keys.byname("TestJob"), writer.keys.byqueue("default")]
    before = {d: redis_client.zrange(d, 0, -1, withscores=True) for d in directories}
    assert all(len(entries) == 4 for entries in before.values())  # four full chunks each
    clock.advance(1_000)
    make_store()  # boot: the tail heal re-indexes all 256 rows
    assert {d: redis_client.zrange(d, 0, -1, withscores=True) for d in directories} == before
    for directory in directories:
        assert_chunked_set(redis_client, directory, writer.keys.index_counts)


def test_tail_heal_reaches_exactly_60_s_below_the_marker(make_store, redis_client, clock):
    """The margin covers index-less writers whose clocks lag behind the marker's."""
    clock.set(1_000_000)
    make_store()  # marker 1000000
    old_writer = make_store(indexes={"name": False})
    # old_writer's boot dropped the name marker; restamp it as an enabled sibling would.
    redis_client.set(old_writer.keys.index_ready("name"), "1000000")
    lagging = {}
    for lag in (0, 30_000, 59_999, 60_000, 60_001, 120_000):
        clock.set(1_000_000 - lag)
        lagging[lag] = old_writer.enqueue(req(name=f"Lag{lag}")).id
    clock.set(1_010_000)
    healer = make_store()
    for lag, job_id in lagging.items():
        expected = [job_id] if lag <= 60_000 else []
        assert listed_ids(healer, name=f"Lag{lag}") == expected, lag


def test_marker_equals_the_boot_clock_for_both_kinds(make_store, redis_client, clock):
    clock.set(1_733_000_000_123)
    store = make_store()
    for kind in ("name", "queue"):
        assert redis_client.get(store.keys.index_ready(kind)) == "1733000000123"
        assert ready_marker(store, kind) == 1_733_000_000_123


def test_disabling_deletes_only_the_marker_never_the_zsets(make_store, redis_client, clock):
    store = make_store()
    seed_distinct_names(store)
    before = {
        key: members(redis_client, key) for key in all_index_keys(redis_client, store, "name")
    }
    queue_before = {
        key: members(redis_client, key) for key in all_index_keys(redis_client, store, "queue")
    }
    assert len(before) == 2 * ROWS  # a directory and one chunk per name

    clock.advance(1000)
    make_store(indexes={"name": False})
    assert redis_client.get(store.keys.index_ready("name")) is None
    assert redis_client.get(store.keys.index_ready("queue")) == "1000"
    assert {key: members(redis_client, key) for key in before} == before
    assert {key: members(redis_client, key) for key in queue_before} == queue_before

    make_store(indexes=False)
    assert redis_client.get(store.keys.index_ready("queue")) is None
    assert {key: members(redis_client, key) for key in before} == before
    assert {key: members(redis_client, key) for key in queue_before} == queue_before


def test_re_enabling_does_a_full_rebuild(make_store, redis_client, clock):
    ids = seed_distinct_names(make_store())
    clock.set(1_000_000)
    store = make_store()  # moves both markers past the rows' tail window
    # Holes far below any tail window: only a full rebuild refills them.
    for i in (3, 600, 1200):
        chunked_remove(redis_client, store.keys.byname(f"N{i}"), ids[i])
        chunked_remove(redis_client, store.keys.byqueue(QUEUES[i % 3]), ids[i])
    clock.advance(10_000_000)
    make_store(indexes={"name": False})
    clock.advance(1)
    again = make_store()
    for i in (3, 600, 1200):
        assert listed_ids(again, name=f"N{i}") == [ids[i]]
    # The queue kind stayed enabled (marker kept): tail heal only, holes stay.
    assert ids[600] not in listed_ids(again, queue=QUEUES[0])
    assert redis_client.get(again.keys.index_ready("name")) == "11000001"
    assert redis_client.get(again.keys.index_ready("queue")) == "11000001"


# ---------------------------------------------------------------------- index_status


def test_index_status_figures_are_exact(make_store, redis_client, clock):
    clock.set(42_000)
    store = make_store()
    seed_distinct_names(store)
    store.enqueue_many([req(name="N1", queue="q9") for _ in range(5)])
    status = {s.kind: s for s in index_status(store)}
    assert status["name"] == IndexStatus("name", True, 42_000, ROWS, ROWS + 5, [])
    assert status["queue"] == IndexStatus("queue", True, 42_000, 4, ROWS + 5, [])


def test_index_status_warns_about_inconsistent_states(make_store, redis_client, clock):
    store = make_store()
    seed_distinct_names(store, 20)
    redis_client.delete(store.keys.index_ready("queue"))
    status = {s.kind: s for s in index_status(store)}
    assert status["queue"].ready_at is None
    assert status["queue"].warnings == [
        "enabled but no ready marker: the next store boot rebuilds it"
    ]
    assert status["name"].warnings == []

    off = make_store(indexes={"name": False})
    status = {s.kind: s for s in index_status(off)}
    assert status["name"].enabled is False
    assert status["name"].ready_at is None
    assert status["name"].zsets == 20 and status["name"].members == 20
    assert len(status["name"].warnings) == 1
    assert status["name"].warnings[0].startswith("disabled but 20 zsets remain")
    assert "reclaim_indexes" in status["name"].warnings[0]

    make_store()  # a sibling with the index on stamps the marker again
    status = {s.kind: s for s in index_status(off)}
    assert any("another store of this prefix has it enabled" in w for w in status["name"].warnings)


def test_index_status_on_an_empty_prefix(make_store):
    store = make_store(indexes=False)
    assert index_status(store) == [
        IndexStatus("name", False, None, 0, 0, []),
        IndexStatus("queue", False, None, 0, 0, []),
    ]


# ---------------------------------------------------------------------- reclaim_index


def test_reclaim_refuses_while_enabled_unless_forced(make_store, redis_client):
    store = make_store()
    seed_distinct_names(store, 10)
    with pytest.raises(InvalidRequestError) as refused:
        reclaim_index(store, "name")
    assert "indexes.name" in str(refused.value)
    with pytest.raises(InvalidRequestError):
        reclaim_index(store, "name", dry_run=True)
    assert len(index_keys(redis_client, store, "name")) == 10
    assert redis_client.get(store.keys.index_ready("name")) is not None

    result = reclaim_index(store, "name", force=True)
    assert (result.sets, result.keys, result.members) == (10, 20, 10)
    assert all_index_keys(redis_client, store, "name") == set()
    assert not any(
        field.startswith(store.keys.byname(""))
        for field in redis_client.hkeys(store.keys.index_counts)
    )
    assert redis_client.get(store.keys.index_ready("name")) is None


def test_reclaim_rejects_an_unknown_kind(make_store):
    store = make_store(indexes=False)
    with pytest.raises(InvalidRequestError):
        reclaim_index(store, "state")
    with pytest.raises(InvalidRequestError):
        reindex(store, "byname")


def test_reclaim_dry_run_measures_and_the_real_run_deletes_exactly_the_kind(
    make_store, redis_client, clock
):
    writer = make_store()
    ids = seed_distinct_names(writer)
    name_keys = all_index_keys(redis_client, writer, "name")
    queue_keys = all_index_keys(redis_client, writer, "queue")
    assert len(name_keys) == 2 * ROWS  # a directory and one chunk per name
    assert len(index_keys(redis_client, writer, "queue")) == 3
    expected_bytes = sum(redis_client.memory_usage(key) for key in name_keys)

    off = make_store(indexes={"name": False})
    # An enabled sibling restamps the name marker: a dry run keeps it, a real run drops it.
    clock.advance(5)
    make_store(indexes={"queue": True})
    assert redis_client.get(off.keys.index_ready("name")) == "5"
    everything_before = set(redis_client.scan_iter(match="{" + off.prefix + "}*", count=1000))
    progress: list[ReclaimResult] = []
    dry = reclaim_index(off, "name", dry_run=True, progress=progress.append)
    assert dry == ReclaimResult(
        2 * ROWS, ROWS, expected_bytes, dry_run=True, complete=True, sets=ROWS
    )
    assert dry.bytes_freed > 0
    assert set(redis_client.scan_iter(match="{" + off.prefix + "}*", count=1000)) == (
        everything_before
    )
    assert redis_client.get(off.keys.index_ready("name")) == "5"
    assert [p.keys for p in progress] == [500, 1000, 1500, 2000, 2 * ROWS]

    progress.clear()
    result = reclaim_index(off, "name", progress=progress.append)
    assert result == ReclaimResult(
        2 * ROWS, ROWS, expected_bytes, dry_run=False, complete=True, sets=ROWS
    )
    assert [p.keys for p in progress] == [500, 1000, 1500, 2000, 2 * ROWS]
    # Every key is a directory or a chunk of one member.
    assert [p.members + p.sets for p in progress] == [500, 1000, 1500, 2000, 2 * ROWS]
    remaining = set(redis_client.scan_iter(match="{" + off.prefix + "}*", count=1000))
    assert remaining == everything_before - name_keys - {off.keys.index_ready("name")}
    assert queue_keys <= remaining
    assert redis_client.get(off.keys.index_ready("queue")) == "5"
    # Rows and other listings are untouched.
    assert off.get_job(ids[0]) is not None
    assert len(listed_ids(off, queue="q1")) == len(ids[1::3])

    again = reclaim_index(off, "name")
    assert again == ReclaimResult(0, 0, 0, dry_run=False, complete=True)


def test_reclaim_leaves_other_prefixes_alone_even_with_glob_characters(redis_client, clock):
    tag = uuid.uuid4().hex[:10]
    # Unescaped, "{t-<tag>-[1]*?\z}:byname:*" would match the neighbour's keys and
    # miss the store's own: "[1]" matches "1", "*" and "?" anything, "\z" a "z".
    glob_value = f"t-{tag}-[1]*?\\z"
    neighbour_value = f"t-{tag}-1abcz"
    with (
        literal_prefix(redis_client, glob_value) as glob_prefix,
        literal_prefix(redis_client, neighbour_value) as neighbour_prefix,
    ):
        globby = RedisJobStore(redis_client, prefix=glob_prefix, clock=clock)
        neighbour = RedisJobStore(redis_client, prefix=neighbour_prefix, clock=clock)
        try:
            seed_distinct_names(globby, 600)
            seed_distinct_names(neighbour, 30)
            unescaped = "{" + glob_value + "}:byname:*"
            neighbour_keys = index_keys(redis_client, neighbour, "name")
            assert neighbour_keys <= set(redis_client.scan_iter(match=unescaped, count=1000))
            assert index_pattern(globby, "name") == ("{t-" + tag + "-\\[1\\]\\*\\?\\\\z}:byname:*")
            own = all_index_keys(redis_client, globby, "name")
            assert len(own) == 1200

            off = RedisJobStore(
                redis_client, prefix=glob_prefix, clock=clock, indexes={"name": False}
            )
            try:
                assert index_status(off)[0].zsets == 600
                assert reclaim_index(off, "name", dry_run=True).keys == 1200
                result = reclaim_index(off, "name")
            finally:
                off.close()
            assert (result.sets, result.keys, result.members) == (600, 1200, 600)
            assert all(not redis_client.exists(key) for key in own)
            assert index_keys(redis_client, neighbour, "name") == neighbour_keys
            assert len(neighbour_keys) == 30
            assert redis_client.get(neighbour.keys.index_ready("name")) is not None
        finally:
            globby.close()
            neighbour.close()


def test_reclaim_stop_ends_between_batches_and_keeps_the_marker(make_store, redis_client):
    store = make_store()
    seed_distinct_names(store)
    off = make_store(indexes={"name": False})
    redis_client.set(off.keys.index_ready("name"), "77")  # as if a sibling had stamped it
    calls: list[int] = []

    def stop() -> bool:
        calls.append(1)
        return True

    result = reclaim_index(off, "name", stop=stop)
    assert calls == [1]
    assert result.complete is False
    assert result.keys == 500 and result.members + result.sets == 500
    assert len(index_keys(redis_client, off, "name")) == ROWS - result.sets
    assert redis_client.get(off.keys.index_ready("name")) == "77"
    finished = reclaim_index(off, "name")
    assert (finished.keys, finished.complete) == (2 * ROWS - 500, True)
    assert redis_client.get(off.keys.index_ready("name")) is None


# ---------------------------------------------------------------------- reindex


def test_reindex_refills_old_holes_and_stamps_the_marker_with_its_start_time(
    make_store, redis_client, clock
):
    ids = seed_distinct_names(make_store())
    clock.set(500_000)
    store = make_store()  # marker 500000: the rows are far outside any tail window
    holes = (0, 499, 500, 999, 1249)
    for i in holes:
        chunked_remove(redis_client, store.keys.byname(f"N{i}"), ids[i])
    clock.advance(1000)
    booted = make_store()
    assert all(listed_ids(booted, name=f"N{i}") == [] for i in holes), "boot must not heal them"

    clock.advance(1000)
    seen: list[int] = []

    def progress(rows: int) -> None:
        seen.append(rows)
        clock.advance(10)  # time passes during the rebuild

    rows = reindex(booted, "name", progress=progress)
    assert rows == ROWS
    # ZSCAN's COUNT is a hint: pages vary, but no call carries more than 500 ids.
    steps = [b - a for a, b in zip([0, *seen], seen, strict=False)]
    assert seen[-1] == ROWS and len(seen) >= 3
    assert all(0 < step <= 500 for step in steps)
    # Stamped with the time the rebuild started, not when it ended.
    assert redis_client.get(store.keys.index_ready("name")) == "502000"
    assert clock() == 502_000 + 10 * len(seen)
    for i in holes:
        assert listed_ids(booted, name=f"N{i}") == [ids[i]]
    assert redis_client.get(store.keys.index_ready("queue")) == "501000"


def test_reindex_drops_the_marker_before_scanning(make_store, redis_client, monkeypatch):
    """A crash half way must leave no marker, so the next boot redoes the full build."""
    store = make_store()
    seed_distinct_names(store, 600)

    def crash(*_args: Any, **_kwargs: Any) -> int:
        raise JobStoreError("boom")

    monkeypatch.setattr("store.indexes.rebuild_index", crash)
    with pytest.raises(JobStoreError):
        reindex(store, "queue")
    assert redis_client.get(store.keys.index_ready("queue")) is None
    assert redis_client.get(store.keys.index_ready("name")) is not None


def test_reindex_refuses_a_disabled_kind(make_store, redis_client):
    store = make_store(indexes={"queue": False})
    with pytest.raises(InvalidRequestError) as refused:
        reindex(store, "queue")
    assert "indexes.queue" in str(refused.value)
    assert redis_client.get(store.keys.index_ready("queue")) is None


# ---------------------------------------------------------------------- errors


@pytest.fixture
def dead_client() -> Iterator[Any]:
    client = redis.Redis(
        host="127.0.0.1",
        port=1,
        decode_responses=True,
        socket_connect_timeout=0.5,
        retry=Retry(NoBackoff(), 0),
    )
    yield client
    client.close()


@pytest.mark.parametrize(
    "call",
    [
        lambda s: index_status(s),
        lambda s: reclaim_index(s, "name", force=True),
        lambda s: reclaim_index(s, "name", force=True, dry_run=True),
        lambda s: reindex(s, "name"),
        lambda s: ready_marker(s, "queue"),
    ],
)
def test_redis_errors_reach_callers_as_job_store_error(
    make_store, dead_client, monkeypatch, call: Callable[[RedisJobStore], Any]
):
    store = make_store()
    monkeypatch.setattr(store, "client", dead_client)
    with pytest.raises(JobStoreError) as failed:
        call(store)
    assert isinstance(failed.value.cause, redis.RedisError)


def test_glob_escape_escapes_every_special_character():
    assert glob_escape("a*b?c[d]e\\f{g}") == "a\\*b\\?c\\[d\\]e\\\\f{g}"


def test_a_key_name_that_is_not_utf8_reaches_callers_as_job_store_error(make_store, redis_url):
    store = make_store(indexes={"name": False})
    raw = redis.Redis.from_url(redis_url, decode_responses=False)
    try:
        raw.zadd(store.keys.byname("").encode() + b"\xff", {b"j-1": 0})
        with pytest.raises(JobStoreError):
            index_status(store)
        with pytest.raises(JobStoreError):
            reclaim_index(store, "name", dry_run=True)
    finally:
        raw.delete(store.keys.byname("").encode() + b"\xff")
        raw.close()
