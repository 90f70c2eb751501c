"""The optional list indexes (``byname:<name>``, ``byqueue:<queue>``) and their lifecycle.

Index writes happen at the two choke points every job passes (row insert and
row delete), so an index is only complete if every writer of the prefix had
it enabled: the ``indexes`` setting is a per-prefix invariant.  At store
construction each kind is reconciled (store contract §7.3):

* enabled, no ready marker -> full rebuild by a driver-paged walk of ``all``
  (500 ids per script call), then the marker is set to the boot time;
* enabled, marker present -> tail heal of rows enqueued since marker - 60 s,
  then the marker is re-stamped (this is what makes rolling deploys converge);
* disabled -> only the marker is deleted; index zsets are never deleted at
  boot (a sibling may still read them; ``reclaim_indexes`` frees them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from store.chunks import iter_members

if TYPE_CHECKING:
    from store.redis_store import RedisJobStore

logger = logging.getLogger(__name__)

INDEX_KINDS = ("name", "queue")
TAIL_MARGIN_MS = 60_000
PAGE = 500

Progress = Callable[[int], None]


def reconcile_indexes(store: RedisJobStore, boot_at: int) -> None:
    """Bring both index kinds in line with this store's configuration (at boot)."""
    for kind in INDEX_KINDS:
        marker = store.keys.index_ready(kind)
        if not store.indexes[kind]:
            store._command("index reconcile", "delete", marker)
            continue
        stamped = store._command("index reconcile", "get", marker)
        try:
            since = int(stamped) if stamped not in (None, "") else None
        except ValueError:
            since = None
        if since is None:
            rows = rebuild_index(store, kind)
            if rows:
                logger.info("rebuilt the %s index of %s: %d rows", kind, store.prefix, rows)
        else:
            heal_index_tail(store, kind, since - TAIL_MARGIN_MS)
        store._command("index reconcile", "set", marker, str(boot_at))


def rebuild_index(store: RedisJobStore, kind: str, progress: Progress | None = None) -> int:
    """Index every row of ``all``: pages of 500 ids (chunk_page), one script call each."""
    total = 0
    for page in iter_members(store._run, "all", page=PAGE):
        ids = [job_id for job_id, _score in page]
        store._run("index_members", kind, *ids)
        total += len(ids)
        if progress is not None:
            progress(total)
    return total


def heal_index_tail(store: RedisJobStore, kind: str, min_enqueued_at: int) -> int:
    """Re-index rows with enqueued_at >= ``min_enqueued_at``, 500 per call."""
    total = 0
    for page in iter_members(store._run, "all", min_score=min_enqueued_at, page=PAGE):
        store._run("index_members", kind, *(job_id for job_id, _score in page))
        total += len(page)
    return total
