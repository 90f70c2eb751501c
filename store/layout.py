"""The data layout of a store's job hashes: the version marker, the start check, migration.

Layout 1 kept every value of a job hash in one field; a payload (or exit, metadata, ...)
longer than ``hash-max-listpack-value`` (64 bytes by default) made Redis store the whole hash
as a hash table, several times the size of a listpack.  Layout 2 stores such a value in
pieces of at most 64 bytes (``put_long`` in lua/lib/03_rows.lua, ``codec.join_pieces``), so
job hashes stay listpacks under the server's default configuration.

Layout 2 reads layout-1 hashes as they are, so a store written by layout 1 keeps working;
``manage.py migrate_store`` rewrites its hashes (calls of at most 500 ids) to get the memory
back and then stamps the marker 2.  The marker lives at ``{prefix}:layout``; a store whose
marker this version does not know refuses to start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from store.errors import StoreDefect
from store.redis_store import redis_errors

if TYPE_CHECKING:
    from store.redis_store import RedisJobStore

log = logging.getLogger(__name__)

#: The layout this version writes.
LAYOUT = 2
#: The layouts this version serves (layout 1 only until ``migrate_store`` converts it).
KNOWN_LAYOUTS = frozenset({1, 2})
#: The most ids one migration call rewrites (and the ZSCAN COUNT hint).
BATCH = 500

MIGRATE_HINT = "python manage.py migrate_store"


class UnknownLayoutError(StoreDefect):
    """The store's data was written in a layout this version does not know."""


def layout_key(store: RedisJobStore) -> str:
    return f"{store.keys.tag}:layout"


def read_layout(store: RedisJobStore) -> int | None:
    """The store's layout marker (None: none yet)."""
    with redis_errors("read_layout"):
        raw = store.client.get(layout_key(store))
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise UnknownLayoutError(
            f"store {store.prefix!r} has an unreadable layout marker {raw!r} at "
            f"{layout_key(store)}; this version knows layouts "
            f"{', '.join(map(str, sorted(KNOWN_LAYOUTS)))} (see `{MIGRATE_HINT}`)"
        ) from None


def check_layout(store: RedisJobStore) -> int:
    """At start: stamp the marker of a store that has none, refuse an unknown layout.

    A store without a marker is new (marked with the current layout) or was written by
    layout 1 (it has jobs: marked 1, served as it is; ``migrate_store`` converts it).
    """
    layout = read_layout(store)
    if layout is None:
        with redis_errors("check_layout"):
            has_data = store.client.exists(store.keys.seq, store.keys.all) > 0
            store.client.set(layout_key(store), "1" if has_data else str(LAYOUT), nx=True)
        layout = read_layout(store)
    if layout not in KNOWN_LAYOUTS:
        raise UnknownLayoutError(
            f"store {store.prefix!r} uses data layout {layout}, which this version does not "
            f"know (it knows {', '.join(map(str, sorted(KNOWN_LAYOUTS)))}); the store is not "
            f"started.  Run a version that knows layout {layout} (its `{MIGRATE_HINT}` "
            "converts older layouts to its own)"
        )
    if layout != LAYOUT:
        log.info(
            "store %r holds job hashes of layout %s (served as they are); `%s` converts them "
            "to layout %s, which takes less memory",
            store.prefix,
            layout,
            MIGRATE_HINT,
            LAYOUT,
        )
    return layout


@dataclass
class MigrationResult:
    scanned: int = 0
    rewritten: int = 0
    layout_before: int | None = None
    layout_after: int | None = None
    stopped: bool = False


def migrate(
    store: RedisJobStore,
    progress: Callable[[MigrationResult], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    batch: int = BATCH,
) -> MigrationResult:
    """Rewrite every job hash of the store in the current layout, then stamp the marker.

    Walks ``all`` (every job is a member) with ZSCAN pages; each page of at most ``batch``
    ids is rewritten by one atomic script call.  Idempotent: hashes already in the current
    layout are left alone, so a stopped run is simply started again.
    """
    batch = max(1, min(int(batch), BATCH))
    result = MigrationResult(layout_before=read_layout(store))
    if result.layout_before is not None and result.layout_before not in KNOWN_LAYOUTS:
        check_layout(store)  # raises with the message
    cursor = 0
    while True:
        if should_stop is not None and should_stop():
            result.stopped = True
            break
        with redis_errors("migrate_store"):
            cursor, page = store.client.zscan(store.keys.all, cursor, count=batch)
        ids = [member for member, _score in page]
        for start in range(0, len(ids), batch):
            chunk = ids[start : start + batch]
            result.rewritten += int(store._run("migrate_rows", *chunk))
            result.scanned += len(chunk)
        if progress is not None:
            progress(result)
        if cursor == 0:
            break
    if not result.stopped:
        with redis_errors("migrate_store"):
            store.client.set(layout_key(store), str(LAYOUT))
    result.layout_after = read_layout(store)
    return result
