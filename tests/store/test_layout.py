"""Job hash layout 2: long values in pieces (listpack job hashes), the layout marker, layouts 1
and 2 (layout 3 is layout 2 with chunked sets: tests/property/test_chunked_sets.py).

Layout 1 (the format before the marker existed) kept each long value in one field; the
fixture ``old_layout`` writes such a store by rewriting every hash of a freshly filled
store into that format (one field per value, the marker deleted), so the tests read,
run and migrate real layout-1 data; ``to_layout_2`` writes the sets back as layout 2's
plain sorted sets.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench.common import payload
from store import MISSING, Complete, Fail, ParentEnvelope, RedisJobStore, Retry
from store.codec import LONG_FIELDS, PIECE_CODES, join_pieces
from store.layout import LAYOUT, UnknownLayoutError, layout_key, migrate, read_layout
from tests.store.helpers import assert_chunked_set, chunked_members, claim_id, fold_head, req

#: The benches' payload (bench/common.py ``payload``; ~72 bytes of JSON, 80 for job 12345).
PAYLOAD_72 = {"user_id": 12345, "action": "send_email", "to": "user12345@example.com", "attempt": 1}
TRACEBACK = (
    "Traceback (most recent call last):\n"
    + "".join(
        f'  File "/srv/app/jobs/module_{i}.py", line {10 + i}, in handler_{i}\n'
        f"    result = step_{i}(payload)\n"
        for i in range(12)
    )
    + "ValueError: the upstream service answered 503 Service Unavailable"
)


def is_piece(field: str, code: str | None = None) -> bool:
    """A continuation piece of a long field: ``<code><k>``, k >= 2 (``P2``, ``E13``)."""
    codes = [code] if code else list(PIECE_CODES.values())
    return field[:1] in codes and field[1:].isdigit()


def encoding(client: Any, key: str) -> str:
    return str(client.object("encoding", key))


def compact(client: Any, key: str) -> bool:
    # Redis 7 says listpack; 6.2 says ziplist (the same compact encoding, older name).
    return encoding(client, key) in ("listpack", "ziplist")


def test_the_bench_payload_is_longer_than_a_listpack_value():
    assert payload(12345) == PAYLOAD_72
    assert 64 < len(json.dumps(payload(7), separators=(",", ":"))) <= 80


def test_job_hashes_stay_compact_in_every_state(store, redis_client):
    """Default server config (hash-max-listpack-value 64): waiting, active, completed and
    failed-with-a-traceback job hashes are listpacks (ziplists on 6.2)."""
    waiting = store.enqueue(req(payload=PAYLOAD_72)).id
    assert compact(redis_client, store.keys.job(waiting)), encoding(
        redis_client, store.keys.job(waiting)
    )
    assert store.get_job(waiting).payload == PAYLOAD_72

    claim_id(store, waiting)
    assert compact(redis_client, store.keys.job(waiting))
    store.ack(waiting, "t-1", Complete({"rows": 12, "note": "x" * 100}))
    assert compact(redis_client, store.keys.job(waiting))
    assert store.get_job(waiting).exit == {"rows": 12, "note": "x" * 100}

    failing = store.enqueue(req(payload=PAYLOAD_72)).id
    claim_id(store, failing)
    exit_doc = {"error": "ValueError", "traceback": TRACEBACK}
    assert len(json.dumps(exit_doc)) > 900
    store.ack(failing, "t-1", Fail(exit_doc))
    jk = store.keys.job(failing)
    assert compact(redis_client, jk), encoding(redis_client, jk)
    job = store.get_job(failing)
    assert job.state == "failed" and job.exit == exit_doc
    assert store.get_attempts(failing)[-1].exit == exit_doc


def max_entries(client: Any) -> int:
    """hash-max-listpack-entries (128 on Redis 7; 6.2 calls it ziplist and defaults to 512)."""
    got = client.config_get("hash-max-listpack-entries") or client.config_get(
        "hash-max-ziplist-entries"
    )
    return int(next(iter(got.values())))


def test_a_very_long_exit_falls_back_to_a_hash_table_and_still_round_trips(store, redis_client):
    """More pieces than hash-max-listpack-entries fields cannot be a listpack."""
    job_id = store.enqueue(req()).id
    claim_id(store, job_id)
    exit_doc = {"traceback": "t" * (64 * max_entries(redis_client))}
    store.ack(job_id, "t-1", Fail(exit_doc))
    assert encoding(redis_client, store.keys.job(job_id)) == "hashtable"
    assert store.get_job(job_id).exit == exit_doc
    assert store.get_attempts(job_id)[0].exit == exit_doc


@pytest.mark.parametrize(
    "text",
    [
        "é" * 200,  # 2-byte characters across every piece boundary
        "a" + "€" * 150,  # 3-byte characters, shifted by one
        "😀" * 70 + "b",  # 4-byte characters
        "x" * 64,  # exactly one piece
        "y" * 61 + "z",  # a final piece of 62 bytes
        "q" * 128,  # exactly two full pieces
    ],
)
def test_long_values_round_trip_through_every_reader(store, redis_client, text):
    meta = {"k": text}
    job_id = store.enqueue(req(payload={"t": text}, metadata=meta)).id
    assert store.get_job(job_id).payload == {"t": text}
    assert store.get_job(job_id).metadata == meta
    # The list script reads metadata for its filter.
    assert [j.id for j in store.list(metadata=meta).items] == [job_id]
    assert store.list(metadata={"k": text + "!"}).items == []
    claimed = claim_id(store, job_id)
    assert claimed.payload == {"t": text}
    store.ack(job_id, "t-1", Complete(text))
    assert store.get_job(job_id).exit == text
    assert store.get_attempts(job_id)[0].exit == text
    h = redis_client.hgetall(store.keys.job(job_id))
    assert all(len(v.encode()) <= 63 for k, v in h.items() if k in LONG_FIELDS or is_piece(k))


def test_retry_drops_every_piece_of_the_old_exit(store, redis_client):
    job_id = store.enqueue(req()).id
    claim_id(store, job_id)
    store.ack(job_id, "t-1", Fail({"traceback": TRACEBACK}))
    jk = store.keys.job(job_id)
    assert "E2" in redis_client.hkeys(jk)
    store.retry(job_id)
    assert not any(f == "exit" or is_piece(f, "E") for f in redis_client.hkeys(jk))
    claim_id(store, job_id)
    store.ack(job_id, "t-1", Complete("short"))
    assert store.get_job(job_id).exit == "short"


def test_a_dedupe_replace_with_a_shorter_payload_leaves_no_stale_piece(store, redis_client):
    long_payload = {"blob": "z" * 300}
    first = store.enqueue(
        req(payload=long_payload, delay_ms=60000, dedupe={"key": "k", "replace": True})
    )
    again = store.enqueue(
        req(payload={"blob": "short"}, delay_ms=60000, dedupe={"key": "k", "replace": True})
    )
    assert again.id == first.id
    assert store.get_job(first.id).payload == {"blob": "short"}
    assert not any(is_piece(f, "P") for f in redis_client.hkeys(store.keys.job(first.id)))


def test_a_long_parent_envelope_and_exit_reach_the_outbox(store):
    parent = ParentEnvelope(
        flow_name="f" * 40, flow_id="flow-" + "1" * 40, child_key="c" * 50, parent_store_key="p"
    )
    job_id = store.enqueue(req(parent=parent)).id
    assert store.get_job(job_id).parent == parent
    claim_id(store, job_id)
    store.ack(job_id, "t-1", Complete({"long": "v" * 200}))
    [entry] = store.peek_outbox()
    assert entry.flow_name == parent.flow_name
    assert entry.report.exit == {"long": "v" * 200}


def test_a_long_dedupe_key_is_released_on_completion(store):
    key = "d" * 150
    first = store.enqueue(req(dedupe={"key": key}))
    assert store.enqueue(req(dedupe={"key": key})).id == first.id
    assert store.get_job(first.id).dedupe_key == key
    claim_id(store, first.id)
    store.ack(first.id, "t-1", Complete())
    assert store.enqueue(req(dedupe={"key": key})).id != first.id


# --------------------------------------------------------------------------- the marker


def test_a_new_store_is_stamped_with_the_current_layout(store, redis_client):
    assert store.layout == LAYOUT
    assert redis_client.get(layout_key(store.keys)) == str(LAYOUT)


def test_a_store_with_an_unknown_layout_refuses_to_start(make_store, redis_client, prefix):
    redis_client.set(f"{{{prefix}}}:layout", "9")
    with pytest.raises(UnknownLayoutError, match=r"layout 9.*migrate_store"):
        make_store()
    redis_client.set(f"{{{prefix}}}:layout", "two")
    with pytest.raises(UnknownLayoutError, match="migrate_store"):
        make_store()


# ----------------------------------------------------------------------------- layout 1

#: Layout 2's short names of the fields layout 1 spelled out.
LONG_NAMES = {"pa": "processed_at", "fa": "finished_at", "am": "attempts_made"}


def chunked_sets(client: Any, store: RedisJobStore) -> list[str]:
    """The directory keys of every chunked set of ``store``: ``all`` and each index."""
    dirs = [store.keys.all]
    for base in (store.keys.byname(""), store.keys.byqueue("")):
        for key in client.scan_iter(match=base.replace("[", "[[]") + "*", count=500):
            if "\0" not in key:
                dirs.append(key)
    return sorted(set(dirs))


def to_layout_2(client: Any, store: RedisJobStore) -> int:
    """Rewrite the sets of ``store`` as layout 2 wrote them: ``all`` and every index one
    plain sorted set (ids scored by enqueued_at), no chunk keys and no size hash; the
    marker says 2.  Returns the number of sets rewritten."""
    fold_head(store)  # layout 2 had no head: every row goes to its sets
    dirs = chunked_sets(client, store)
    for directory in dirs:
        members = chunked_members(client, directory)
        chunks = [f"{directory}\0{e.rsplit(chr(0), 1)[1]}" for e in client.zrange(directory, 0, -1)]
        client.delete(directory, *chunks)  # one slot: a multi-key DEL works on a cluster too
        if members:
            client.zadd(directory, members)
    client.delete(store.keys.index_counts, store.keys.index_seq, store.keys.index_pending)
    client.set(layout_key(store.keys), "2")
    return len(dirs)


def to_layout_1(client: Any, store: RedisJobStore) -> int:
    """Rewrite every job of ``store`` in the layout-1 format, as the version before the
    marker wrote it: plain sets (``to_layout_2``), one field per value, long field names,
    run_at always present, every ledger entry in the ledger list; the marker deleted."""
    to_layout_2(client, store)
    rewritten = 0
    for job_id in client.zrange(store.keys.all, 0, -1):
        key = store.keys.job(job_id)
        h = dict(join_pieces(client.hgetall(key)))
        ledger = store.get_attempts(job_id)
        if h.pop("lf", None) == "1":
            last = ledger[-1]
            doc = (
                f'{{"attempt":{last.attempt},"started_at":'
                f"{'null' if last.started_at is None else last.started_at},"
                f'"finished_at":{last.finished_at},"outcome":"{last.outcome}"'
            )
            if "exit" in h:
                doc += ',"exit":' + h["exit"]
            client.rpush(store.keys.attempts(job_id), doc + "}")
        old = {LONG_NAMES.get(k, k): v for k, v in h.items()}
        old.setdefault("run_at", old["enqueued_at"])
        pipe = client.pipeline(transaction=True)
        pipe.delete(key)
        pipe.hset(key, mapping=old)
        pipe.execute()
        assert store.get_attempts(job_id) == ledger
        rewritten += 1
    client.delete(layout_key(store.keys))
    return rewritten


def fill(store: RedisJobStore) -> dict[str, str]:
    """Jobs in several states with long values; returns {role: id}."""
    ids: dict[str, str] = {}
    meta = {"tenant": "t" * 80}
    ids["waiting"] = store.enqueue(req(payload=PAYLOAD_72, metadata=meta)).id
    ids["delayed"] = store.enqueue(req(payload={"d": "é" * 90}, delay_ms=60_000)).id
    ids["failed"] = store.enqueue(req(payload=PAYLOAD_72)).id
    ids["completed"] = store.enqueue(req(payload=PAYLOAD_72, metadata=meta)).id
    ids["active"] = store.enqueue(req(payload=PAYLOAD_72)).id
    ids["retried"] = store.enqueue(req(payload=PAYLOAD_72, attempts_max=3)).id
    ids["short"] = store.enqueue(req(payload={"n": 1})).id
    names = ["TestJob"]
    # Claimed in FIFO order, then each settled its own way.
    for role in ("waiting", "failed", "completed", "active", "retried", "short"):
        job = store.claim(queue="default", names=names, token=f"t-{role}", lock_duration_ms=60_000)
        assert job.job.id == ids[role]
    store.ack(ids["failed"], "t-failed", Fail({"traceback": TRACEBACK}))
    store.ack(ids["completed"], "t-completed", Complete({"rows": "r" * 100}))
    store.ack(ids["retried"], "t-retried", Retry(0, {"why": "w" * 90}))
    store.ack(ids["short"], "t-short", Complete(None))
    # Put the first back in line, so a waiting job with a long payload remains.
    store.release(ids["waiting"], "t-waiting")
    return ids


def snapshot(store: RedisJobStore, ids: dict[str, str]) -> dict[str, Any]:
    return {
        role: (store.get_job(job_id), store.get_attempts(job_id)) for role, job_id in ids.items()
    }


@pytest.fixture
def old_layout(make_store, redis_client) -> tuple[dict[str, str], dict[str, Any], RedisJobStore]:
    writer = make_store()
    ids = fill(writer)
    before = snapshot(writer, ids)
    assert to_layout_1(redis_client, writer) == len(ids)
    failed = writer.keys.job(ids["failed"])
    assert encoding(redis_client, failed) == "hashtable"
    assert not any(is_piece(f) for f in redis_client.hkeys(failed))
    assert "finished_at" in redis_client.hkeys(failed)
    assert redis_client.llen(writer.keys.attempts(ids["short"])) == 1
    return ids, before, writer


def test_a_layout_1_store_refuses_to_start_and_names_the_command(
    old_layout, make_store, redis_client, prefix
):
    assert read_layout(redis_client, prefix) == 1
    with pytest.raises(UnknownLayoutError, match=r"layout 1.*`python manage.py migrate_store`"):
        make_store()
    # Nothing was written: still no marker, every hash as it was.
    assert redis_client.get(f"{{{prefix}}}:layout") is None


def test_migrate_converts_a_layout_1_store_without_loss(
    old_layout, make_store, redis_client, prefix
):
    ids, before, _writer = old_layout
    pages: list[int] = []
    result = migrate(redis_client, prefix, progress=lambda r: pages.append(r.scanned), batch=2)
    assert result.layout_before == 1 and result.layout_after == LAYOUT
    assert result.scanned == len(ids)
    assert result.rewritten == len(ids)  # long names (or run_at) in every one of them
    assert pages[-1] == len(ids) and len(pages) >= 3
    assert result.moved == 3 * len(ids)  # all, the name index and the queue index
    store = make_store()
    assert store.layout == LAYOUT
    assert set(assert_chunked_set(redis_client, store.keys.all, store.keys.index_counts)) == set(
        ids.values()
    )
    for job_id in ids.values():
        h = redis_client.hgetall(store.keys.job(job_id))
        assert compact(redis_client, store.keys.job(job_id)), job_id
        assert not set(h) & {"processed_at", "finished_at", "attempts_made"}
    assert snapshot(store, ids) == before
    assert {j.id: j for j in store.list(limit=100).items} == {
        job_id: before[role][0] for role, job_id in ids.items()
    }
    assert [j.id for j in store.list(metadata={"tenant": "t" * 80}).items] == [
        ids["completed"],
        ids["waiting"],
    ]
    # Idempotent: a second run finds nothing to rewrite.
    assert migrate(redis_client, prefix).rewritten == 0
    assert snapshot(store, ids) == before
    # The converted jobs run on: the waiting one completes, the failed one is retried with
    # its ledger numbering kept.
    job = store.claim(queue="default", names=["TestJob"], token="t-new", lock_duration_ms=1000)
    assert job.job.id == ids["waiting"] and job.job.payload == PAYLOAD_72
    store.ack(job.job.id, "t-new", Complete({"big": "b" * 200}))
    assert store.get_job(job.job.id).exit == {"big": "b" * 200}
    ledger = store.get_attempts(job.job.id)
    assert ledger[:-1] == before["waiting"][1]
    assert (ledger[-1].attempt, ledger[-1].outcome) == (len(ledger), "completed")
    store.retry(ids["failed"])
    assert store.get_job(ids["failed"]).state == "waiting"
    assert store.get_attempts(ids["failed"]) == before["failed"][1]


def test_migrate_keeps_the_ttl_of_a_hash(make_store, redis_client, prefix):
    store = make_store()
    job_id = store.enqueue(req(payload=PAYLOAD_72)).id
    to_layout_1(redis_client, store)
    redis_client.pexpire(store.keys.job(job_id), 500_000)
    migrate(redis_client, prefix)
    ttl = redis_client.pttl(store.keys.job(job_id))
    assert 400_000 < ttl <= 500_000
    assert compact(redis_client, store.keys.job(job_id))


def test_migrate_refuses_an_unknown_layout(store, redis_client, prefix):
    redis_client.set(layout_key(store.keys), "7")
    with pytest.raises(UnknownLayoutError, match="migrate_store"):
        migrate(redis_client, prefix)
    assert redis_client.get(layout_key(store.keys)) == "7"


def test_migrate_of_an_empty_store_stamps_the_marker(redis_client, prefix):
    assert read_layout(redis_client, prefix) is None
    result = migrate(redis_client, prefix)
    assert (result.scanned, result.layout_after) == (0, LAYOUT)


# ----------------------------------------------------------------------------- layout 2

#: More jobs than one chunk holds (128), so each set spans several chunks.
MANY = 300


def many_jobs(store: RedisJobStore, clock: Any) -> list[str]:
    """MANY jobs over two names and two queues, several per millisecond (ties are broken
    by id), some of them finished."""
    ids = []
    for i in range(MANY):
        if i % 3 == 0:
            clock.advance(1)
        ids.append(
            store.enqueue(req(name=f"Job{i % 2}", queue=f"q{i % 4 // 2}", payload=PAYLOAD_72)).id
        )
    for i in range(0, MANY, 7):
        job = store.claim(
            queue=f"q{i % 4 // 2}", names=["Job0", "Job1"], token=f"t{i}", lock_duration_ms=60_000
        )
        store.ack(job.job.id, f"t{i}", Complete({"i": i}))
    return ids


def every_listing(store: RedisJobStore) -> dict[str, list[str]]:
    """The ids of every list query the sets serve, paged (limit 40), both orders."""
    out: dict[str, list[str]] = {}
    for label, kwargs in {
        "all": {},
        "name": {"name": "Job1"},
        "queue": {"queue": "q0"},
        "name+queue": {"name": "Job0", "queue": "q1"},
        "completed": {"states": ["completed"]},
    }.items():
        for order in ("asc", "desc"):
            ids: list[str] = []
            cursor = None
            while True:
                page = store.list(order=order, cursor=cursor, limit=40, **kwargs)
                ids += [j.id for j in page.items]
                cursor = page.cursor
                if not cursor:
                    break
            out[f"{label}/{order}"] = ids
    return out


def test_a_layout_2_store_refuses_to_start_and_names_the_command(
    make_store, redis_client, prefix, clock
):
    writer = make_store()
    many_jobs(writer, clock)
    assert to_layout_2(redis_client, writer) == 5  # all, two names, two queues
    assert read_layout(redis_client, prefix) == 2
    with pytest.raises(UnknownLayoutError, match=r"layout 2.*`python manage.py migrate_store`"):
        make_store()
    assert redis_client.get(layout_key(writer.keys)) == "2"
    assert redis_client.object("encoding", writer.keys.all) == "skiplist"


def test_migrate_converts_a_layout_2_store_without_loss(make_store, redis_client, prefix, clock):
    writer = make_store()
    ids = many_jobs(writer, clock)
    listings = every_listing(writer)
    assert len(listings["all/desc"]) == MANY
    jobs = {job_id: writer.get_job(job_id) for job_id in ids}
    sets = {d: chunked_members(redis_client, d) for d in chunked_sets(redis_client, writer)}
    to_layout_2(redis_client, writer)
    writer.close()

    pages: list[int] = []
    result = migrate(redis_client, prefix, progress=lambda r: pages.append(r.moved), batch=100)
    assert (result.layout_before, result.layout_after) == (2, LAYOUT)
    assert (result.scanned, result.rewritten) == (0, 0)  # the hashes are layout 2's already
    assert result.sets == 5
    assert result.moved == result.to_move == sum(len(m) for m in sets.values()) == 3 * MANY
    assert pages == sorted(pages) and len(pages) >= 3 * MANY // 100
    store = make_store()
    assert store.layout == LAYOUT
    for directory, members in sets.items():
        assert assert_chunked_set(redis_client, directory, store.keys.index_counts) == members
    # No staging key is left behind.
    assert not list(redis_client.scan_iter(match=f"{{{prefix}}}:migrate:*"))
    assert every_listing(store) == listings
    assert {job_id: store.get_job(job_id) for job_id in ids} == jobs
    # Idempotent: nothing left to move.
    again = migrate(redis_client, prefix)
    assert (again.layout_before, again.moved) == (LAYOUT, 0)
    # The converted sets take new jobs and deletions as usual.
    clock.advance(10)
    new = store.enqueue(req(name="Job1", queue="q0")).id
    store.remove(ids[1])
    after = every_listing(store)
    assert after["name/desc"][0] == after["queue/desc"][0] == new
    assert ids[1] not in after["all/asc"] and len(after["all/asc"]) == MANY
    assert_chunked_set(redis_client, store.keys.all, store.keys.index_counts)


def test_a_stopped_layout_2_migration_resumes_without_loss(make_store, redis_client, prefix, clock):
    writer = make_store()
    ids = many_jobs(writer, clock)
    listings = every_listing(writer)
    sets = {d: chunked_members(redis_client, d) for d in chunked_sets(redis_client, writer)}
    to_layout_2(redis_client, writer)
    writer.close()
    calls = []

    def stop_after_three() -> bool:
        calls.append(1)
        return len(calls) > 3

    first = migrate(redis_client, prefix, should_stop=stop_after_three, batch=50)
    assert first.stopped and first.moved == 150
    # Half converted: the store still refuses to start; the rest waits in a staging key.
    assert read_layout(redis_client, prefix) == 2
    with pytest.raises(UnknownLayoutError, match="layout 2"):
        make_store()
    assert redis_client.zcard(f"{{{prefix}}}:migrate:all") == MANY - 150
    second = migrate(redis_client, prefix, batch=50)
    assert not second.stopped and second.moved == 3 * MANY - 150
    assert second.layout_after == LAYOUT
    store = make_store()
    for directory, members in sets.items():
        assert assert_chunked_set(redis_client, directory, store.keys.index_counts) == members
    assert every_listing(store) == listings
    assert sorted(j.id for j in store.list(limit=MANY).items) == sorted(ids)


# ------------------------------------------------------------------ the folded ledger entry


def test_a_job_done_on_its_first_run_has_no_ledger_key(store, redis_client, clock):
    job_id = store.enqueue(req()).id
    clock.advance(5)
    claim_id(store, job_id)
    clock.advance(7)
    store.ack(job_id, "t-1", Complete({"ok": True}))
    assert redis_client.exists(store.keys.attempts(job_id)) == 0
    [entry] = store.get_attempts(job_id)
    job = store.get_job(job_id)
    assert (entry.attempt, entry.outcome, entry.exit) == (1, "completed", {"ok": True})
    assert (entry.started_at, entry.finished_at) == (job.processed_at, job.finished_at)
    assert entry.finished_at - entry.started_at == 7


def test_retry_writes_the_folded_entry_out_and_numbering_goes_on(store, redis_client):
    job_id = store.enqueue(req(attempts_max=2)).id
    claim_id(store, job_id)
    store.ack(job_id, "t-1", Retry(0, {"try": 1}))
    claim_id(store, job_id)
    store.ack(job_id, "t-1", Fail({"traceback": TRACEBACK}))
    first = store.get_attempts(job_id)
    assert [(a.attempt, a.outcome) for a in first] == [(1, "retried"), (2, "failed")]
    assert first[1].exit == {"traceback": TRACEBACK}
    assert redis_client.llen(store.keys.attempts(job_id)) == 1  # the failed run is folded
    store.retry(job_id)
    assert store.get_attempts(job_id) == first  # written out, same entries
    assert redis_client.llen(store.keys.attempts(job_id)) == 2
    claim_id(store, job_id)
    store.ack(job_id, "t-1", Complete(None))
    last = store.get_attempts(job_id)
    assert [(a.attempt, a.outcome) for a in last] == [
        (1, "retried"),
        (2, "failed"),
        (3, "completed"),
    ]
    assert last[:2] == first and last[2].exit is None


def test_cancelled_and_stalled_endings_keep_their_ledger_entries(store, redis_client, clock):
    waiting = store.enqueue(req()).id
    store.cancel(waiting)
    [entry] = store.get_attempts(waiting)
    assert (entry.outcome, entry.started_at, entry.exit) == ("cancelled", None, MISSING)
    stalled = store.enqueue(req()).id
    claim_id(store, stalled, lock_duration_ms=10)
    clock.advance(100)
    store.recover_stalled(max_stalled_count=0)
    assert store.get_job(stalled).state == "failed"
    assert [a.outcome for a in store.get_attempts(stalled)] == ["stalled"]
    assert redis_client.llen(store.keys.attempts(stalled)) == 1
