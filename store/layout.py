"""The data layout of a store's job hashes: the version marker, the start check, migration.

Layout 1 (every version before the marker existed) kept each value of a job hash in one
field under long names; a payload (or exit, metadata, ...) longer than
``hash-max-listpack-value`` (64 bytes by default) made Redis store the whole hash as a hash
table, several times the size of a listpack, and every finished run had its own ledger key.

Layout 2:

* a value longer than 63 bytes is stored in pieces (``put_long`` in lua/lib/03_rows.lua,
  ``codec.join_pieces``), so job hashes stay listpacks under the default configuration;
* the fields written at claim and at the end of a run have short names: ``pa``
  (processed_at), ``fa`` (finished_at), ``am`` (attempts_made);
* ``run_at`` is absent while it equals ``enqueued_at``;
* the ledger entry of a job's last run is folded into its hash (``lf``) when the hash says
  it all, so a job done on its first run has no ledger key.

The marker lives at ``{prefix}:layout``.  A store without it is new (stamped with the
current layout) or was written by layout 1 (it holds jobs); a store of layout 1 does not
start: ``manage.py migrate_store`` converts it in atomic calls of at most 500 jobs (stop the
old version's processes first) and stamps the marker.  Any other layout refuses to start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from store.errors import StoreFailure
from store.keys import StoreKeys
from store.redis_store import redis_errors
from store.scripts import ScriptRegistry

if TYPE_CHECKING:
    from store.redis_store import RedisJobStore

log = logging.getLogger(__name__)

#: The layout this version writes and serves.
LAYOUT = 2
#: Layouts ``migrate`` converts to ``LAYOUT``.
MIGRATABLE = frozenset({1})
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
    with redis_errors("read_layout"):
        raw = client.get(layout_key(keys))
        if raw is None:
            return 1 if client.exists(keys.seq, keys.all) > 0 else None
    try:
        return int(raw)
    except ValueError:
        raise UnknownLayoutError(
            f"store {keys.prefix!r} has an unreadable layout marker {raw!r} at "
            f"{layout_key(keys)}; this version serves layout {LAYOUT} (and `{MIGRATE_HINT}` "
            "converts layout 1)"
        ) from None


def read_layout(client: Any, prefix: str) -> int | None:
    """The data layout of the store ``prefix`` (None: an empty store without a marker)."""
    return _read(client, StoreKeys(prefix))


def check_layout(store: RedisJobStore) -> int:
    """At start: stamp the marker of a new store; refuse any layout but the current one."""
    layout = _read(store.client, store.keys)
    if layout is None:
        with redis_errors("check_layout"):
            store.client.set(layout_key(store.keys), str(LAYOUT), nx=True)
        layout = _read(store.client, store.keys)
    if layout in MIGRATABLE:
        raise UnknownLayoutError(
            f"store {store.prefix!r} holds data of layout {layout}, written by an older "
            f"version; this version serves layout {LAYOUT}.  Stop the old version's "
            f"processes and run `{MIGRATE_HINT}` (add --store NAME for a store other than "
            "'default') to convert it"
        )
    if layout != LAYOUT:
        raise UnknownLayoutError(
            f"store {store.prefix!r} uses data layout {layout}, which this version does not "
            f"know (it serves layout {LAYOUT}; `{MIGRATE_HINT}` converts layout 1); the store "
            "is not started: run the version that wrote it"
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
    client: Any,
    prefix: str,
    progress: Callable[[MigrationResult], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    batch: int = BATCH,
) -> MigrationResult:
    """Convert every job hash of store ``prefix`` to the current layout, then stamp the marker.

    Walks ``all`` (every job is a member) with ZSCAN pages; each page of at most ``batch``
    ids is converted by one atomic script call (``migrate_rows``).  Idempotent: hashes
    already in the current layout are left alone, so a stopped run is simply started again.
    The old version's processes must be stopped first (they would go on writing layout 1).
    """
    keys = StoreKeys(prefix)
    batch = max(1, min(int(batch), BATCH))
    result = MigrationResult(layout_before=_read(client, keys))
    before = result.layout_before
    if before is not None and before != LAYOUT and before not in MIGRATABLE:
        raise UnknownLayoutError(
            f"store {prefix!r} uses data layout {before}, which this version does not know "
            f"(`{MIGRATE_HINT}` converts layout 1 to {LAYOUT}); nothing was changed"
        )
    if before in MIGRATABLE:
        scripts = ScriptRegistry(client, keys.tag)
        try:
            cursor = 0
            while True:
                if should_stop is not None and should_stop():
                    result.stopped = True
                    break
                with redis_errors("migrate_store"):
                    cursor, page = client.zscan(keys.all, cursor, count=batch)
                ids = [member for member, _score in page]
                for start in range(0, len(ids), batch):
                    chunk = ids[start : start + batch]
                    with redis_errors("migrate_store"):
                        result.rewritten += int(scripts("migrate_rows", *chunk))
                    result.scanned += len(chunk)
                    if progress is not None:
                        progress(result)
                if cursor == 0:
                    break
        finally:
            scripts.close()
    if not result.stopped:
        with redis_errors("migrate_store"):
            client.set(layout_key(keys), str(LAYOUT))
    result.layout_after = _read(client, keys)
    log.info(
        "migrate_store %r: scanned %d jobs, rewrote %d hashes, layout %s -> %s",
        prefix,
        result.scanned,
        result.rewritten,
        before,
        result.layout_after,
    )
    return result
