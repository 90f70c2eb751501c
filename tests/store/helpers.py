"""Small shared helpers for the store conformance tests (conformance-cases.md §1 conventions)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from store import Claimed, Empty, EnqueueRequest, JobRecord, RedisJobStore
from store.chunks import CHUNK_CAPACITY, sizes
from store.keys import StoreKeys

ALL_STATE_NAMES = (
    "waiting",
    "delayed",
    "active",
    "waiting-children",
    "completed",
    "failed",
    "cancelled",
)

#: Real-time bound for waits that must resolve (a broken store fails instead of hanging).
WAKE_TIMEOUT_MS = 5000
#: Real-time window for "must NOT be woken" checks.
NO_WAKE_WINDOW_S = 0.3


def counts_of(**nonzero: int) -> dict[str, int]:
    """All seven states with zeros, overridden by ``nonzero`` (use ``waiting_children``)."""
    out = dict.fromkeys(ALL_STATE_NAMES, 0)
    for key, value in nonzero.items():
        out[key.replace("_", "-")] = value
    return out


def req(**overrides: Any) -> EnqueueRequest:
    """The BASE request of conformance-cases.md §1 with per-case overrides."""
    fields: dict[str, Any] = {"name": "TestJob", "queue": "default", "payload": {"n": 1}}
    fields.update(overrides)
    return EnqueueRequest(**fields)


def claim(
    store: RedisJobStore,
    *,
    queue: str = "default",
    names: list[str] | tuple[str, ...] = ("TestJob",),
    token: str = "t-1",
    lock_duration_ms: int = 30000,
) -> Claimed | Empty:
    """The CLAIM options of conformance-cases.md §1 with per-case overrides."""
    return store.claim(
        queue=queue, names=list(names), token=token, lock_duration_ms=lock_duration_ms
    )


def claim_job(store: RedisJobStore, **kwargs: Any) -> JobRecord:
    result = claim(store, **kwargs)
    assert isinstance(result, Claimed), f"expected Claimed, got {result!r}"
    return result.job


def claim_empty(store: RedisJobStore, **kwargs: Any) -> Empty:
    result = claim(store, **kwargs)
    assert isinstance(result, Empty), f"expected Empty, got {result!r}"
    return result


def claim_id(store: RedisJobStore, job_id: str, **kwargs: Any) -> JobRecord:
    """Claim and assert the claimed job is ``job_id``."""
    job = claim_job(store, **kwargs)
    assert job.id == job_id, f"claimed {job.id!r}, expected {job_id!r}"
    return job


def finish(
    store: RedisJobStore, job_id: str, outcome: Any, *, token: str = "t-fin", **claim_kwargs: Any
) -> None:
    """Claim ``job_id`` (it must be next in line) and ack it with ``outcome``."""
    claim_id(store, job_id, token=token, **claim_kwargs)
    store.ack(job_id, token, outcome)


def recovered(store: RedisJobStore, max_stalled_count: int) -> list[tuple[str, bool]]:
    """``recover_stalled`` rows as ``(id, failed)`` pairs (dict equality has its own test)."""
    return [
        (row.id, row.failed) for row in store.recover_stalled(max_stalled_count=max_stalled_count)
    ]


def outcomes(store: RedisJobStore, job_id: str) -> list[str]:
    return [entry.outcome for entry in store.get_attempts(job_id)]


def json_identical(a: Any, b: Any) -> bool:
    """Type-strict JSON equality (``True != 1``, ``1.0 != 1``, key sets equal)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(json_identical(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(json_identical(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def describe(value: Any) -> str:
    return json.dumps(value)[:200] if not isinstance(value, str) else value[:200]


# ---------------------------------------------------------------- wake-ups


class Waiter(threading.Thread):
    """Runs ``store.await_wake`` in the background and records its outcome."""

    def __init__(
        self,
        store: RedisJobStore,
        queues: list[str],
        wake_token: int,
        timeout_ms: int = WAKE_TIMEOUT_MS,
    ) -> None:
        super().__init__(daemon=True)
        self.store = store
        self.queues = queues
        self.wake_token = wake_token
        self.timeout_ms = timeout_ms
        self.result: bool | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self.result = self.store.await_wake(
                self.queues, self.wake_token, timeout_ms=self.timeout_ms
            )
        except BaseException as exc:  # reported to the test thread
            self.error = exc
        finally:
            self.done.set()

    def start_parked(self, settle_s: float = 0.05) -> Waiter:
        """Start and give the waiter a moment to park before the test wakes it."""
        self.start()
        time.sleep(settle_s)
        return self

    def outcome(self) -> bool | None:
        self.join(self.timeout_ms / 1000 + 5)
        assert not self.is_alive(), "await_wake did not return (ignored its timeout)"
        if self.error is not None:
            raise self.error
        return self.result


# ---------------------------------------------------------------- keyspace inspection


def store_keys(client: Any, prefix: str) -> set[str]:
    return set(client.scan_iter(match="{" + prefix + "}*", count=1000))


def traces_of(client: Any, prefix: str, needle: str) -> list[str]:
    """Every place under the prefix that still mentions ``needle``.

    Generic on purpose (the key layout is the store's business): key names, zset/set
    members, hash fields and values, list elements and string values are all checked.
    """
    found: list[str] = []
    for key in store_keys(client, prefix):
        if needle in key:
            found.append(f"key {key!r}")
            continue
        kind = client.type(key)
        if kind == "zset":
            for member, _score in client.zscan_iter(key, count=1000):
                if needle in member:
                    found.append(f"zset {key!r} member {member!r}")
        elif kind == "set":
            for member in client.sscan_iter(key, count=1000):
                if needle in member:
                    found.append(f"set {key!r} member {member!r}")
        elif kind == "hash":
            for field, value in client.hscan_iter(key, count=1000):
                if needle in field or needle in value:
                    found.append(f"hash {key!r} field {field!r}={value[:80]!r}")
        elif kind == "list":
            for element in client.lrange(key, 0, -1):
                if needle in element:
                    found.append(f"list {key!r} element {element[:80]!r}")
        elif kind == "string":
            value = client.get(key)
            if value is not None and needle in value:
                found.append(f"string {key!r}")
    return found


@contextlib.contextmanager
def extra_prefix(client: Any) -> Iterator[str]:
    """A second, isolated prefix, deleted afterwards (only its own keys)."""
    value = f"t-{uuid.uuid4().hex[:12]}"
    try:
        yield value
    finally:
        batch = list(client.scan_iter(match="{" + value + "}*", count=500))
        for start in range(0, len(batch), 500):
            client.unlink(*batch[start : start + 500])


# ------------------------------------------------------------------ chunked sets


def fold_head(store: RedisJobStore) -> None:
    """Move the rows in the chunked sets' head into their chunks (what every script that
    reads the chunks does first), for a test that reaches into the chunks directly."""
    store._run("fold_head")


def head_members(client: Any, directory: str) -> dict[str, float]:
    """The rows of the store's chunked-set head (``ixpend``: score, id, flags, queue, name)
    that belong to the chunked set ``directory``, with their scores."""
    keys = StoreKeys(directory[1 : directory.index("}")])
    head = client.lrange(keys.index_pending, 0, -1)
    assert len(head) % 5 == 0 and len(head) < 5 * 128, len(head)
    found: dict[str, float] = {}
    for at in range(0, len(head), 5):
        score, job_id, flags, queue, name = head[at : at + 5]
        targets = {keys.all}
        if flags[:1] == "1":
            targets.add(keys.byname(name))
        if flags[1:2] == "1":
            targets.add(keys.byqueue(queue))
        if directory in targets:
            found[job_id] = float(score)
    return found


def chunked_members(client: Any, directory: str) -> dict[str, float]:
    """Every member of a chunked set (``all``, an index) with its score, read key by key:
    its chunks' members and its rows in the head.

    Reads the layout directly (not through the store's scripts), so tests see what is
    stored.  For test-sized sets only."""
    members: dict[str, float] = {}
    for entry in client.zrange(directory, 0, -1):
        number = entry.rsplit("\0", 1)[1]
        for member, score in client.zrange(f"{directory}\0{number}", 0, -1, withscores=True):
            assert member not in members, f"{member} is in two chunks of {directory}"
            members[member] = score
    for member, score in head_members(client, directory).items():
        assert member not in members, f"{member} is in a chunk of {directory} and in the head"
        members[member] = score
    return members


def assert_chunked_set(client: Any, directory: str, counts_key: str) -> dict[str, float]:
    """Check the invariants of a chunked set; returns its members (chunks and head).

    Each chunk holds 1..CHUNK_CAPACITY (64) members, is a listpack, its lower bound is its first member,
    and its members sort before the next chunk's; the head (the store's ``ixpend`` list)
    holds fewer than 128 rows, none of them in a chunk; the size in ``counts_key`` is
    exactly the chunks' members, and ``chunks.sizes`` adds the head's rows."""
    entries = client.zrange(directory, 0, -1, withscores=True)
    bounds = [
        ((score, entry.rsplit("\0", 1)[0].encode()), entry.rsplit("\0", 1)[1])
        for entry, score in entries
    ]
    assert [b for b, _ in bounds] == sorted(b for b, _ in bounds)
    members: dict[str, float] = {}
    for i, (bound, number) in enumerate(bounds):
        key = f"{directory}\0{number}"
        flat = client.zrange(key, 0, -1, withscores=True)
        assert 1 <= len(flat) <= CHUNK_CAPACITY, (key, len(flat))
        assert client.object("encoding", key) in ("listpack", "ziplist"), key  # 7 | 6.2
        upper = bounds[i + 1][0] if i + 1 < len(bounds) else None
        assert (flat[0][1], flat[0][0].encode()) == bound, (key, flat[0], bound)
        for member, score in flat:
            at = (score, member.encode())
            assert upper is None or at < upper, (key, member, upper)
            members[member] = score
    assert int(client.hget(counts_key, directory) or 0) == len(members), directory
    # Layout 3's cache of the last chunk is gone.
    tail_cache = [f"{directory}\0{w}" for w in ("n", "c", "b", "i")]
    assert client.hmget(counts_key, tail_cache) == [None] * 4, directory
    for member, score in head_members(client, directory).items():
        assert member not in members, (directory, member, "in a chunk and in the head")
        members[member] = score
    keys = StoreKeys(directory[1 : directory.index("}")])
    assert sizes(client, keys, [directory]) == [len(members)], directory
    return members


def chunked_remove(client: Any, directory: str, *members: str) -> None:
    """Damage a chunked set the way a careless ZREM would: drop members from their chunks
    (leaving the size counter and an emptied chunk's directory entry as they were)."""
    for entry in client.zrange(directory, 0, -1):
        chunk = f"{directory}\0{entry.rsplit(chr(0), 1)[1]}"
        client.zrem(chunk, *members)
