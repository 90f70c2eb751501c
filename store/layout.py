"""The data layout of a store's job hashes: the version marker, the start check, migration.

Layout 1 (every version before the marker existed) kept each value of a job hash in one
field under long names; a payload (or exit, metadata, ...) longer than
``hash-max-listpack-value`` (64 bytes by default) made Redis store the whole hash as a hash
table, several times the size of a listpack, and every finished run had its own ledger key.

Layout 2:

* a value longer than 63 bytes is stored in pieces (``put_long`` in lua/lib/rows.lua,
  ``codec.join_pieces``), so job hashes stay listpacks under the default configuration;
* the fields written at claim and at the end of a run have short names: ``pa``
  (processed_at), ``fa`` (finished_at), ``am`` (attempts_made);
* ``run_at`` is absent while it equals ``enqueued_at``;
* the ledger entry of a job's last run is folded into its hash (``lf``) when the hash says
  it all, so a job done on its first run has no ledger key.

Layout 3 keeps the job hashes of layout 2 and stores the sets that list every job -- the
all-jobs set ``all`` and the name/queue list indexes -- as chunked sets of listpack chunks
(store/chunks.py) instead of one sorted set each (a skiplist past 128 members).

Layout 4 adds the chunked sets' head (``ixpend``, store/chunks.py): a single insert
appends its row there, one RPUSH, and the rows move into the chunks 128 at a time.  A
layout-3 store is a layout-4 store with an empty head, so it is served as it is: the first
process of this version to start on it stamps 4 (a version that knows only layout 3 then
refuses to start, as it would not see the head's rows) and drops layout 3's cache of each
set's last chunk from ``ixcount`` (HSCAN pages of 500).

The marker lives at ``{prefix}:layout``.  A store without it is new (stamped with the
current layout) or was written by layout 1 (it holds jobs); a store of layout 1 or 2 does
not start: ``manage.py migrate_store`` converts it in atomic calls of at most 500 jobs (stop
the old version's processes first) -- layout 1's hashes to layout 2 (the marker then says
2), then layout 2's sets to chunked sets -- and stamps the marker.  Any other layout refuses
to start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from store.chunks import TAIL_FIELDS, split_chunk_key
from store.errors import StoreFailure, redis_errors
from store.indexes import keys_index_pattern, scan_zsets
from store.keys import NUL, StoreKeys
from store.scripts import ScriptRegistry
from store.steps import Steps, cmd, on_client

if TYPE_CHECKING:
    from store.redis_store import RedisJobStore

log = logging.getLogger(__name__)

#: The layout this version writes and serves.
LAYOUT = 4
#: Layouts ``migrate`` converts to ``LAYOUT``.
MIGRATABLE = frozenset({1, 2})
#: Layouts served as they are: stamped ``LAYOUT`` at start (see above).
STAMPED = frozenset({3})
#: The most ids one migration call rewrites (and the ZSCAN COUNT hint).
BATCH = 500

MIGRATE_HINT = "python manage.py migrate_store"


class UnknownLayoutError(StoreFailure):
    """The store's data is in a layout this version does not serve (see the message).

    A StoreFailure like an unreachable Redis: the dashboard reports the store as unavailable,
    with this message, and serves the others."""

    tag = "UnknownLayoutError"


def layout_key(keys: StoreKeys) -> str:
    return keys.layout


def _read(client: Any, keys: StoreKeys) -> int | None:
    """The layout marker; for a store without one: 1 when it holds data, else None."""
    return on_client(client, _read_steps(keys))


def _read_steps(keys: StoreKeys) -> Steps[int | None]:
    raw = yield cmd("read_layout", "get", layout_key(keys))
    if raw is None:
        return 1 if (yield cmd("read_layout", "exists", keys.seq, keys.all)) > 0 else None
    try:
        return int(raw)
    except ValueError:
        raise UnknownLayoutError(
            f"store {keys.prefix!r} has an unreadable layout marker {raw!r} at "
            f"{layout_key(keys)}; this version serves layout {LAYOUT} (and `{MIGRATE_HINT}` "
            "converts layouts 1 and 2)"
        ) from None


def read_layout(client: Any, prefix: str) -> int | None:
    """The data layout of the store ``prefix`` (None: an empty store without a marker)."""
    return _read(client, StoreKeys(prefix))


def plain_job_count(client: Any, prefix: str) -> int:
    """The number of jobs of store ``prefix`` in layout 1 or 2, where ``all`` is a plain
    sorted set of every job (the total of :func:`migrate`'s first pass).  One ZCARD."""
    with redis_errors("migrate_store"):
        return int(client.zcard(StoreKeys(prefix).all))


def check_layout(store: RedisJobStore) -> int:
    """At start: stamp the marker of a new store; refuse any layout but the current one."""
    return on_client(store.client, check_layout_steps(store.keys))


def check_layout_steps(keys: StoreKeys) -> Steps[int]:
    """``check_layout`` as steps (store/steps.py), for either store."""
    layout = yield from _read_steps(keys)
    if layout is None:
        yield cmd("check_layout", "set", layout_key(keys), str(LAYOUT), nx=True)
        layout = yield from _read_steps(keys)
    if layout in STAMPED:
        yield from _stamp_steps(keys, layout)
        layout = yield from _read_steps(keys)
    if layout in MIGRATABLE:
        raise UnknownLayoutError(
            f"store {keys.prefix!r} holds data of layout {layout}, written by an older "
            f"version; this version serves layout {LAYOUT}.  Stop the old version's "
            f"processes and run `{MIGRATE_HINT}` (add --store NAME for a store other than "
            "'default') to convert it"
        )
    if layout != LAYOUT:
        raise UnknownLayoutError(
            f"store {keys.prefix!r} uses data layout {layout}, which this version does not "
            f"know (it serves layout {LAYOUT}; `{MIGRATE_HINT}` converts layouts 1 and 2); the store "
            "is not started: run the version that wrote it"
        )
    return layout


def _stamp(client: Any, keys: StoreKeys, layout: int) -> None:
    on_client(client, _stamp_steps(keys, layout))


def _stamp_steps(keys: StoreKeys, layout: int) -> Steps[None]:
    """Serve a ``STAMPED`` layout: drop layout 3's tail cache fields, then stamp the marker
    (unless another process changed it meanwhile).  Both steps are idempotent."""

    suffixes = tuple(NUL + w for w in TAIL_FIELDS)
    cursor = 0
    while True:
        cursor, page = yield cmd(
            "check_layout", "hscan", keys.index_counts, cursor, match=f"*{NUL}?", count=BATCH
        )
        stale = [f for f in page if f.endswith(suffixes)]
        if stale:
            yield cmd("check_layout", "hdel", keys.index_counts, *stale)
        if not cursor:
            break
    if (yield cmd("check_layout", "get", layout_key(keys))) == str(layout):
        yield cmd("check_layout", "set", layout_key(keys), str(LAYOUT))


@dataclass
class MigrationResult:
    #: Jobs whose hash the layout-1 pass looked at, and hashes it rewrote.
    scanned: int = 0
    rewritten: int = 0
    layout_before: int | None = None
    layout_after: int | None = None
    stopped: bool = False
    #: The layout-2 pass: members moved into chunked sets, and sets converted.
    moved: int = 0
    sets: int = 0
    #: Members the layout-2 pass has to move (read when it starts: for progress only).
    to_move: int = 0
    #: 'rows' (layout 1's hashes) or 'sets' (layout 2's sets): the pass running.
    phase: str = "rows"


#: The chunked sets of a store: (kind for migrate_set, index kind for the SCAN pattern).
_INDEX_SETS = (("byname", "name"), ("byqueue", "queue"))


def _plain_sets(client: Any, keys: StoreKeys) -> list[tuple[str, str]]:
    """(kind, name or queue) of the all-jobs set and every index set of the store, for
    migrate_set (which leaves a set already chunked alone): SCAN pages of 500."""
    found: list[tuple[str, str]] = [("all", "")]
    seen: set[str] = set()
    for kind, index_kind in _INDEX_SETS:
        base = keys.byname("") if kind == "byname" else keys.byqueue("")
        for key in scan_zsets(client, keys, keys_index_pattern(keys, index_kind)):
            if key in seen or split_chunk_key(key) is not None:
                continue
            seen.add(key)
            found.append((kind, key[len(base) :]))
    return found


def _set_key(keys: StoreKeys, kind: str, arg: str) -> str:
    if kind == "all":
        return keys.all
    return keys.byname(arg) if kind == "byname" else keys.byqueue(arg)


def migrate(
    client: Any,
    prefix: str,
    progress: Callable[[MigrationResult], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    batch: int = BATCH,
) -> MigrationResult:
    """Convert store ``prefix`` to the current layout, then stamp the marker.

    Layout 1 -> 2: walks ``all`` (every job is a member) with ZSCAN pages; each page of at
    most ``batch`` ids is converted by one atomic script call (``migrate_rows``); the marker
    then says 2.  Layout 2 -> 3: each plain set listing jobs (``all``, every name and queue
    index, found by SCAN) becomes a chunked set, ``batch`` members per atomic call
    (``migrate_set``).  Idempotent: hashes and sets already converted are left alone, so a
    stopped run is simply started again.  The old version's processes must be stopped first
    (they would go on writing the old layout).
    """
    keys = StoreKeys(prefix)
    batch = max(1, min(int(batch), BATCH))
    result = MigrationResult(layout_before=_read(client, keys))
    before = result.layout_before
    if before is not None and before != LAYOUT and before not in MIGRATABLE | STAMPED:
        raise UnknownLayoutError(
            f"store {prefix!r} uses data layout {before}, which this version does not know "
            f"(`{MIGRATE_HINT}` converts layouts 1 and 2 to {LAYOUT}); nothing was changed"
        )
    if before in MIGRATABLE:
        run = _Migration(client, keys, ScriptRegistry(client, keys.tag), result, batch)
        run.progress, run.should_stop = progress, should_stop
        try:
            if before == 1:
                run.rows()
                if not result.stopped:
                    with redis_errors("migrate_store"):
                        client.set(layout_key(keys), "2")
            if not result.stopped:
                run.sets()
        finally:
            run.scripts.close()
    if before in STAMPED:
        _stamp(client, keys, before)
    if not result.stopped:
        with redis_errors("migrate_store"):
            client.set(layout_key(keys), str(LAYOUT))
    result.layout_after = _read(client, keys)
    log.info(
        "migrate_store %r: scanned %d jobs, rewrote %d hashes, moved %d members of %d sets "
        "into chunks, layout %s -> %s",
        prefix,
        result.scanned,
        result.rewritten,
        result.moved,
        result.sets,
        before,
        result.layout_after,
    )
    return result


@dataclass
class _Migration:
    """One run of ``migrate``: its passes over a store of an older layout."""

    client: Any
    keys: StoreKeys
    scripts: Any
    result: MigrationResult
    batch: int
    progress: Callable[[MigrationResult], None] | None = None
    should_stop: Callable[[], bool] | None = None

    def stop_now(self) -> bool:
        if self.should_stop is not None and self.should_stop():
            self.result.stopped = True
        return self.result.stopped

    def report(self) -> None:
        if self.progress is not None:
            self.progress(self.result)

    def rows(self) -> None:
        """Layout 1 -> 2: the job hashes, ZSCAN pages of ``all`` (a plain sorted set)."""
        client, keys, result, batch = self.client, self.keys, self.result, self.batch
        result.phase = "rows"
        cursor = 0
        while not self.stop_now():
            with redis_errors("migrate_store"):
                cursor, page = client.zscan(keys.all, cursor, count=batch)
            ids = [member for member, _score in page]
            for start in range(0, len(ids), batch):
                chunk = ids[start : start + batch]
                with redis_errors("migrate_store"):
                    result.rewritten += int(self.scripts("migrate_rows", *chunk))
                result.scanned += len(chunk)
                self.report()
            if cursor == 0:
                return

    def sets(self) -> None:
        """Layout 2 -> 3: every plain set listing jobs becomes a chunked set."""
        client, keys, result = self.client, self.keys, self.result
        result.phase = "sets"
        sets = _plain_sets(client, keys)
        for start in range(0, len(sets), BATCH):
            with redis_errors("migrate_store"):
                pipe = client.pipeline(transaction=False)
                for kind, arg in sets[start : start + BATCH]:
                    key = _set_key(keys, kind, arg)
                    # A set a stopped run began has its rest under the staging key.
                    pipe.zcard(keys.migrating(key))
                    pipe.zcard(key)
                cards = pipe.execute()
            for i in range(0, len(cards), 2):
                result.to_move += int(cards[i]) if cards[i] else int(cards[i + 1])
        for kind, arg in sets:
            converted = False
            left = 1
            while left and not self.stop_now():
                with redis_errors("migrate_store"):
                    reply = self.scripts("migrate_set", kind, arg, self.batch)
                moved, left = int(reply[0]), int(reply[1])
                result.moved += moved
                converted = converted or moved > 0
                if moved:
                    self.report()
            if result.stopped:
                return
            result.sets += int(converted)
