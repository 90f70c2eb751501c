"""The store's event stream, job progress and job logs (store/events.py, lua/lib/events.lua)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from store import (
    Complete,
    EnqueueRequest,
    Fail,
    InvalidRequestError,
    Retry,
)
from store.events import (
    DEFAULT_EVENTS_MAX_LEN,
    EVENT_MESSAGE_CHARS,
    MAX_LOG_LINE_BYTES,
    MAX_PROGRESS_BYTES,
)


def req(**kw: Any) -> EnqueueRequest:
    kw.setdefault("name", "a")
    kw.setdefault("queue", "q")
    return EnqueueRequest(**kw)


def life(store: Any, job_id: str) -> list[tuple[str, int]]:
    return [(e.type, e.attempt) for e in store.events("0", count=1000) if e.job_id == job_id]


def claim(store: Any, token: str = "t1", name: str = "a") -> Any:
    result = store.claim("q", [name], token, 30_000)
    return result.job


def test_a_full_life_in_order_with_progress_and_logs(store: Any, clock: Any) -> None:
    job_id = store.enqueue(req(payload={"n": 1})).id
    assert claim(store).id == job_id
    clock.advance(5)
    assert store.set_progress(job_id, "t1", 10)
    assert store.get_job(job_id).progress == 10
    assert store.append_log(job_id, "t1", "step one")
    assert store.set_progress(job_id, "t1", {"done": 3, "total": 4, "stage": "uploading parts"})
    store.ack(job_id, "t1", Complete("ok"))
    assert life(store, job_id) == [
        ("enqueued", 0),
        ("active", 1),
        ("progress", 1),
        ("log", 1),
        ("progress", 1),
        ("completed", 1),
    ]
    events = [e for e in store.events("0") if e.job_id == job_id]
    assert {e.name for e in events} == {"a"} and {e.queue for e in events} == {"q"}
    assert events[2].data == 10 and events[2].at == 5
    assert events[3].data == {"message": "step one"}
    assert events[4].data == {"done": 3, "total": 4, "stage": "uploading parts"}
    # A progress object longer than one hash piece reads back whole.
    assert store.get_job(job_id).progress == {"done": 3, "total": 4, "stage": "uploading parts"}
    ids = [e.id for e in events]
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))


def test_the_retry_paths(store: Any, clock: Any) -> None:
    job_id = store.enqueue(req(attempts_max=3)).id
    claim(store, "t1")
    store.ack(job_id, "t1", Retry(delay_ms=1000))
    clock.advance(1000)
    claim(store, "t2")  # promotes the due retry first
    store.ack(job_id, "t2", Retry())
    claim(store, "t3")
    store.ack(job_id, "t3", Fail("boom"))
    store.retry(job_id)
    claim(store, "t4")
    store.ack(job_id, "t4", Complete())
    assert life(store, job_id) == [
        ("enqueued", 0),
        ("active", 1),
        ("retrying", 1),
        ("waiting", 1),
        ("active", 2),
        ("retrying", 2),
        ("active", 3),
        ("failed", 3),
        ("retrying", 0),
        ("active", 1),
        ("completed", 1),
    ]
    retrying = [e for e in store.events("0") if e.type == "retrying"]
    assert retrying[0].data == {"run_at": 1000}
    assert retrying[1].data is None
    assert retrying[2].data == {"manual": True}


def test_the_stall_paths(store: Any, clock: Any) -> None:
    requeued = store.enqueue(req()).id
    claim(store, "t1")
    clock.advance(30_001)
    assert [s.id for s in store.recover_stalled(max_stalled_count=1)] == [requeued]
    claim(store, "t2")
    clock.advance(30_001)
    store.recover_stalled(max_stalled_count=1)
    assert store.get_job(requeued).state == "failed"
    assert life(store, requeued) == [
        ("enqueued", 0),
        ("active", 1),
        ("stalled", 0),
        ("active", 1),
        ("stalled", 0),
        ("failed", 0),
    ]


def test_the_cancel_paths_promote_release_and_remove(store: Any, clock: Any) -> None:
    waiting = store.enqueue(req()).id
    store.cancel(waiting)
    active = store.enqueue(req()).id
    claim(store, "t1")
    store.cancel(active)  # a request: the run ends it
    store.ack(active, "t1", Retry())
    delayed = store.enqueue(req(delay_ms=60_000)).id
    store.promote(delayed)
    claim(store, "t2")
    store.release(delayed, "t2")
    store.cancel(delayed)
    store.remove(delayed)
    assert life(store, waiting) == [("enqueued", 0), ("cancelled", 0)]
    assert life(store, active) == [("enqueued", 0), ("active", 1), ("cancelled", 1)]
    assert life(store, delayed) == [
        ("delayed", 0),
        ("promoted", 0),
        ("active", 1),
        ("waiting", 0),
        ("cancelled", 0),
        ("removed", 0),
    ]
    released = [e for e in store.events("0") if e.job_id == delayed and e.type == "waiting"]
    assert released[0].data == {"released": True}


def test_enqueue_many_appends_one_event_per_job_in_one_entry(store: Any, redis_client: Any) -> None:
    results = store.enqueue_many([req(payload=i) for i in range(20)] + [req(delay_ms=5)])
    events = store.events("0", count=1)
    assert [e.job_id for e in events] == [r.id for r in results]
    assert [e.type for e in events] == ["enqueued"] * 20 + ["delayed"]
    assert len({e.id for e in events}) == 1 and redis_client.xlen(store.keys.events) == 1
    # A batched ack and claim is one entry too; a call that changes nothing adds none.
    store.claim("q", ["a"], "t1", 30_000)
    store.claim("q", ["nobody"], "t2", 30_000)
    assert redis_client.xlen(store.keys.events) == 2


def test_no_event_and_no_write_from_a_run_that_lost_its_lock(store: Any, clock: Any) -> None:
    job_id = store.enqueue(req()).id
    claim(store, "old")
    clock.advance(30_001)
    store.recover_stalled()
    claim(store, "new")
    assert store.set_progress(job_id, "old", 50) is False
    assert store.append_log(job_id, "old", "from the lost run") is False
    assert store.get_job(job_id).progress is None
    assert store.job_logs(job_id) == []
    assert [e.type for e in store.events("0") if e.type in ("progress", "log")] == []
    # The run holding the lock writes.
    assert store.append_log(job_id, "new", "mine")
    assert [line.message for line in store.job_logs(job_id)] == ["mine"]
    # Not running any more, or never existed: nothing is written.
    store.ack(job_id, "new", Complete())
    assert store.set_progress(job_id, "new", 60) is False
    assert store.append_log("nope", "new", "x") is False


def test_logs_are_capped_by_lines_and_bytes_and_removed_with_the_job(
    make_store: Any, clock: Any, redis_client: Any
) -> None:
    store = make_store(log_max_lines=5, log_max_bytes=MAX_LOG_LINE_BYTES)
    job_id = store.enqueue(req()).id
    claim(store)
    for i in range(12):
        clock.advance(1)
        store.append_log(job_id, "t1", f"line {i}")
    lines = store.job_logs(job_id)
    assert [line.message for line in lines] == [f"line {i}" for i in range(7, 12)]
    assert [line.at for line in lines] == list(range(8, 13))
    assert [line.message for line in store.job_logs(job_id, start=-2)] == ["line 10", "line 11"]
    assert [line.message for line in store.job_logs(job_id, start=1, limit=2)] == [
        "line 8",
        "line 9",
    ]
    assert store.job_log_length(job_id) == 5
    # Bytes: three long lines fill the byte cap; the fourth pushes the oldest out.
    long = "x" * 3000
    for _ in range(4):
        store.append_log(job_id, "t1", long)
    assert store.job_log_length(job_id) == 2
    held = sum(len(f"{line.at} {line.message}") for line in store.job_logs(job_id))
    assert held <= MAX_LOG_LINE_BYTES
    assert int(redis_client.hget(store.keys.job(job_id), "lb")) == held
    # An over-long line is cut (marked); its event carries the head of it.
    store.append_log(job_id, "t1", "é" * MAX_LOG_LINE_BYTES)
    last = store.job_logs(job_id, start=-1)[0].message
    assert last.endswith(" [cut]") and len(last.encode()) <= MAX_LOG_LINE_BYTES
    event = store.events("0", count=1000)[-1]
    assert event.type == "log" and len(event.data["message"]) == EVENT_MESSAGE_CHARS + 1
    store.ack(job_id, "t1", Complete())
    assert store.remove(job_id)
    assert redis_client.exists(store.keys.logs(job_id)) == 0


def test_retention_deletes_the_log_too(store: Any, redis_client: Any) -> None:
    job_id = store.enqueue(req(keep={"completed": {"count": 0}})).id
    claim(store)
    store.append_log(job_id, "t1", "bye")
    store.ack(job_id, "t1", Complete())
    assert store.get_job(job_id) is None
    assert redis_client.exists(store.keys.logs(job_id)) == 0


def test_the_cap_holds_and_zero_stops_events(store: Any, redis_client: Any) -> None:
    assert store.events_max_len() == DEFAULT_EVENTS_MAX_LEN
    store.set_events_max_len(100)
    assert store.events_max_len() == 100
    ids = [store.enqueue(req(payload=i)).id for i in range(600)]
    length = redis_client.xlen(store.keys.events)
    # Approximate trimming drops whole stream nodes (100 entries by default), and as a
    # Function library (Redis 7) the store trims on every 16th entry only (trim_every in
    # lib/events.lua): at most 15 entries more.
    assert 100 <= length <= (215 if store._scripts.mode == "functions" else 200), length
    kept = store.events("0", count=1000)
    assert [e.job_id for e in kept] == ids[-length:]
    store.set_events_max_len(0)
    assert redis_client.exists(store.keys.events) == 0
    store.enqueue(req())
    assert redis_client.exists(store.keys.events) == 0
    assert store.events("0") == [] and store.last_event_id() == "0-0"
    with pytest.raises(InvalidRequestError, match="from 0"):
        store.set_events_max_len(-1)


def test_a_function_library_reads_the_cap_and_trims_on_every_16th_append(
    store: Any, redis_client: Any
) -> None:
    """Redis 7: the library keeps a count per stream between calls (lib/events.lua)."""
    if store._scripts.mode != "functions":
        pytest.skip("as scripts, every append reads the cap and trims")
    store.set_events_max_len(100)
    for i in range(300):
        store.enqueue(req(payload=i))
        # Never more than the cap, a node's worth and 15 untrimmed appends.
        assert redis_client.xlen(store.keys.events) <= 215
    # The cap set to 0 behind this server's back (a cluster slot that moved away and
    # back): its count runs out within 16 appends, then it reads 0, deletes the stream
    # and writes no more.
    redis_client.set(store.keys.events_cap, "0")
    for _ in range(16):
        store.enqueue(req())
    assert redis_client.exists(store.keys.events) == 0
    store.enqueue(req())
    assert redis_client.exists(store.keys.events) == 0
    # set_events_max_len on this server counts from the next append.
    store.set_events_max_len(50)
    store.enqueue(req())
    assert redis_client.xlen(store.keys.events) == 1
    store.set_events_max_len(0)
    store.enqueue(req())
    assert redis_client.exists(store.keys.events) == 0


def test_a_cursor_reads_on_and_dollar_skips_the_past(store: Any) -> None:
    first = store.enqueue(req()).id
    cursor = store.last_event_id()
    assert store.events("$") == []
    second = store.enqueue(req()).id
    after = store.events(cursor)
    assert [e.job_id for e in after] == [second]
    assert [e.job_id for e in store.events("0", count=1)] == [first]
    assert store.events(after[-1].id) == []


def test_a_blocking_read_returns_when_an_event_arrives(store: Any, make_store: Any) -> None:
    other = make_store()
    got: list[Any] = []
    reader = threading.Thread(target=lambda: got.extend(store.events("$", block_ms=5000)))
    started = time.monotonic()
    reader.start()
    time.sleep(0.2)
    job_id = other.enqueue(req()).id
    reader.join(6)
    assert [e.job_id for e in got] == [job_id]
    assert time.monotonic() - started < 3
    # Nothing arrives: it gives up after block_ms.
    started = time.monotonic()
    assert store.events(store.last_event_id(), block_ms=300) == []
    assert 0.25 <= time.monotonic() - started < 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"after": "abc"}, "after must be"),
        ({"after": "1-2-3"}, "after must be"),
        ({"after": 5}, "after must be"),
        ({"count": 0}, "count must be"),
        ({"count": 1001}, "count must be"),
        ({"block_ms": -1}, "block_ms"),
        ({"block_ms": float("nan")}, "block_ms"),
    ],
)
def test_bad_event_queries_are_refused(store: Any, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        store.events(**kwargs)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (101, "from 0 to 100"),
        (-1, "from 0 to 100"),
        (float("inf"), "from 0 to 100"),
        (True, "number from 0 to 100"),
        ("50%", "number from 0 to 100"),
        ([1, 2], "number from 0 to 100"),
        ({"blob": "x" * MAX_PROGRESS_BYTES}, "at most"),
    ],
)
def test_bad_progress_is_refused_and_writes_nothing(store: Any, value: Any, message: str) -> None:
    job_id = store.enqueue(req()).id
    claim(store)
    with pytest.raises(InvalidRequestError, match=message):
        store.set_progress(job_id, "t1", value)
    assert store.get_job(job_id).progress is None


def test_bad_log_queries_and_caps_are_refused(store: Any, make_store: Any) -> None:
    with pytest.raises(InvalidRequestError, match="limit"):
        store.job_logs("x", limit=0)
    with pytest.raises(InvalidRequestError, match="start"):
        store.job_logs("x", start="0")
    with pytest.raises(InvalidRequestError, match="log_max_lines"):
        make_store(log_max_lines=0)
    with pytest.raises(InvalidRequestError, match="log_max_bytes"):
        make_store(log_max_bytes=10)
