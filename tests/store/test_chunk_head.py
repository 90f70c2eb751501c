"""The chunked sets' head (store/chunks.py, lua/lib/chunks.lua): a single insert
appends its row to ``ixpend``; the rows join the chunks when the head reaches 128 rows
and before any script reads or changes the chunks.  Every reader sees them throughout."""

from __future__ import annotations

from store import EnqueueRequest
from store.chunks import HEAD_ROWS, sizes
from store.consistency import check_store
from store.indexes import reclaim_index
from store.layout import LAYOUT, layout_key, migrate
from tests.store.helpers import assert_chunked_set, chunked_members, head_members

ROW = 5  # items of one head row


def _sets(store, name="A", queue="default"):
    return [store.keys.all, store.keys.byname(name), store.keys.byqueue(queue)]


def _listed(store, **filters):
    return [j.id for j in store.list(limit=500, order="asc", **filters).items]


def _one_per_ms(store, clock, n, name="A"):
    """Enqueue n jobs one by one, a millisecond apart (so they list in insertion order)."""
    ids = []
    for _ in range(n):
        clock.advance(1)
        ids.append(store.enqueue(EnqueueRequest(name=name)).id)
    return ids


def _bytewise(ids):
    """Ids of one enqueued_at in the sets' order."""
    return sorted(ids, key=str.encode)


def test_single_inserts_wait_in_the_head_and_every_reader_sees_them(store, redis_client, clock):
    ids = _one_per_ms(store, clock, HEAD_ROWS - 1)
    assert redis_client.llen(store.keys.index_pending) == ROW * (HEAD_ROWS - 1)
    assert redis_client.zcard(store.keys.all) == 0  # no chunk yet
    assert redis_client.hget(store.keys.index_counts, store.keys.all) is None
    # Sizes add the head's rows: the counts are right before any fold.
    assert sizes(redis_client, store.keys, _sets(store)) == [HEAD_ROWS - 1] * 3
    for directory in _sets(store):
        assert set(chunked_members(redis_client, directory)) == set(ids)
    # A listing folds the head first, and lists every row in order.
    assert _listed(store) == ids
    assert _listed(store, name="A") == ids
    assert _listed(store, queue="default") == ids
    assert redis_client.llen(store.keys.index_pending) == 0
    for directory in _sets(store):
        assert set(assert_chunked_set(redis_client, directory, store.keys.index_counts)) == set(ids)
        assert int(redis_client.hget(store.keys.index_counts, directory)) == HEAD_ROWS - 1


def test_the_insert_that_fills_the_head_folds_it(store, redis_client, clock):
    ids = _one_per_ms(store, clock, HEAD_ROWS - 1)
    assert redis_client.llen(store.keys.index_pending) == ROW * (HEAD_ROWS - 1)
    ids += _one_per_ms(store, clock, 1)
    assert redis_client.llen(store.keys.index_pending) == 0
    for directory in _sets(store):
        assert head_members(redis_client, directory) == {}
        members = assert_chunked_set(redis_client, directory, store.keys.index_counts)
        assert set(members) == set(ids)
    # And the head never holds 128 rows: 300 more inserts leave 300 % 128 in it.
    ids += _one_per_ms(store, clock, 300)
    assert redis_client.llen(store.keys.index_pending) == ROW * ((HEAD_ROWS + 300) % HEAD_ROWS)
    for directory in _sets(store):
        assert set(assert_chunked_set(redis_client, directory, store.keys.index_counts)) == set(ids)
    assert _listed(store) == ids


def test_head_rows_out_of_order_are_sorted_into_the_chunks(store, redis_client, clock):
    # Explicit ids and a clock that goes back: the head's rows are not in the sets' order.
    clock.set(1_000_000)
    store.enqueue(EnqueueRequest(name="A", id="m"))
    store.enqueue(EnqueueRequest(name="A", id="b"))
    clock.set(999_000)
    store.enqueue(EnqueueRequest(name="A", id="z"))
    clock.set(1_000_000)
    store.enqueue(EnqueueRequest(name="A", id="a"))
    auto = store.enqueue(EnqueueRequest(name="A")).id
    # Chunks already hold rows around them (a bulk insert folds the head first).
    clock.set(999_500)
    bulk = [r.id for r in store.enqueue_many([EnqueueRequest(name="A") for _ in range(3)])]
    assert redis_client.llen(store.keys.index_pending) == 0
    expected = ["z", *_bytewise(bulk), *_bytewise(["a", "b", "m", auto])]
    for directory in _sets(store):
        members = assert_chunked_set(redis_client, directory, store.keys.index_counts)
        assert sorted(members, key=lambda m: (members[m], m.encode())) == expected
    assert _listed(store) == expected


def test_store_assigned_ids_across_a_power_of_ten_fold_in_byte_order(store, redis_client, clock):
    # j-99 and j-100 in one millisecond: as bytes "j-100" < "j-99", unlike their seqs.
    redis_client.set(store.keys.seq, 97)
    ids = [store.enqueue(EnqueueRequest(name="A")).id for _ in range(4)]
    assert ids == ["j-98", "j-99", "j-100", "j-101"]
    assert _listed(store) == ["j-100", "j-101", "j-98", "j-99"]
    for directory in _sets(store):
        assert_chunked_set(redis_client, directory, store.keys.index_counts)


def test_a_job_removed_while_its_row_is_in_the_head_leaves_every_set(store, redis_client):
    ids = [store.enqueue(EnqueueRequest(name="A")).id for _ in range(3)]
    assert redis_client.llen(store.keys.index_pending) == 3 * ROW
    assert store.remove(ids[1])
    assert redis_client.llen(store.keys.index_pending) == 0
    for directory in _sets(store):
        members = assert_chunked_set(redis_client, directory, store.keys.index_counts)
        assert set(members) == {ids[0], ids[2]}
    assert _listed(store) == _bytewise([ids[0], ids[2]])


def test_head_rows_follow_the_index_flags_they_were_written_with(make_store, redis_client):
    store = make_store(indexes=False)
    ids = [store.enqueue(EnqueueRequest(name="A")).id for _ in range(3)]
    assert sizes(redis_client, store.keys, _sets(store)) == [3, 0, 0]
    assert _listed(store) == _bytewise(ids)
    assert redis_client.exists(store.keys.byname("A"), store.keys.byqueue("default")) == 0
    assert set(assert_chunked_set(redis_client, store.keys.all, store.keys.index_counts)) == set(
        ids
    )


def test_mqcheck_finds_a_store_with_rows_in_the_head_consistent(store, redis_client):
    [store.enqueue(EnqueueRequest(name="A")) for _ in range(5)]
    store.enqueue_many([EnqueueRequest(name="B") for _ in range(3)])
    [store.enqueue(EnqueueRequest(name="A")) for _ in range(2)]
    assert redis_client.llen(store.keys.index_pending) == 2 * ROW
    report = check_store(store)
    assert report.found == {}, report.samples
    assert report.consistent and report.jobs == 10
    assert redis_client.llen(store.keys.index_pending) == 0


def test_reclaim_takes_the_head_rows_of_the_index_with_it(make_store, redis_client):
    store = make_store()
    [store.enqueue(EnqueueRequest(name=f"n{i}")) for i in range(3)]
    assert redis_client.llen(store.keys.index_pending) == 3 * ROW
    result = reclaim_index(store, "name", force=True)
    assert (result.sets, result.members) == (3, 3)
    # Nothing flagged for the name index is left to recreate its sets on a later fold.
    store.list(limit=10)
    assert redis_client.llen(store.keys.index_pending) == 0
    assert not list(redis_client.scan_iter(match=store.keys.byname("") + "*", count=500))


def _as_layout_3(redis_client, store):
    """Make ``store`` look as layout 3 left it: the marker says 3, and ixcount holds the
    cache of each set's last chunk (fields <directory> NUL n|c|b|i)."""
    store._run("fold_head")
    for directory in _sets(store):
        entry = redis_client.zrange(directory, -1, -1, withscores=True)[0]
        bound, number = entry[0].rsplit("\0", 1)
        redis_client.hset(
            store.keys.index_counts,
            mapping={
                f"{directory}\0n": number,
                f"{directory}\0c": redis_client.zcard(f"{directory}\0{number}"),
                f"{directory}\0b": int(entry[1]),
                f"{directory}\0i": bound,
            },
        )
    redis_client.set(layout_key(store.keys), "3")


def test_a_layout_3_store_is_served_and_stamped_without_its_tail_cache(
    store, make_store, redis_client
):
    ids = [r.id for r in store.enqueue_many([EnqueueRequest(name="A") for _ in range(200)])]
    _as_layout_3(redis_client, store)
    again = make_store()
    assert again.layout == LAYOUT == 4
    assert redis_client.get(layout_key(store.keys)) == "4"
    fields = redis_client.hkeys(store.keys.index_counts)
    assert sorted(fields) == sorted(_sets(store))  # the sizes, no cache field
    ids.append(again.enqueue(EnqueueRequest(name="A")).id)
    for directory in _sets(store):
        members = assert_chunked_set(redis_client, directory, store.keys.index_counts)
        assert set(members) == set(ids)
    assert _listed(again) == _bytewise(ids)


def test_migrate_store_stamps_a_layout_3_store(store, redis_client, prefix):
    store.enqueue_many([EnqueueRequest(name="A") for _ in range(3)])
    _as_layout_3(redis_client, store)
    result = migrate(redis_client, prefix)
    assert (result.layout_before, result.layout_after) == (3, LAYOUT)
    assert sorted(redis_client.hkeys(store.keys.index_counts)) == sorted(_sets(store))
