"""The optional list indexes (``byname:<name>``, ``byqueue:<queue>``): lifecycle and tools.

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

Operator tools cover what boot deliberately does not do:

* :func:`index_status` -- what each kind costs and whether its state looks
  consistent with this process's configuration (SCAN: reads the whole keyspace);
* :func:`index_summary` -- the same figures for the index sets of the names and
  queues the store knows, in two round trips (what a dashboard page can afford);
* :func:`reclaim_index` -- free the sets of a kind (each a directory and its
  chunks, store/chunks.py) once every store of the prefix has it disabled
  (boot never deletes them: a sibling may still read);
* :func:`reindex` -- a full rebuild of one kind on demand (e.g. after holes
  older than the tail-heal window were found).

Every Redis call is bounded: SCAN pages of 500, pipelines and UNLINKs of at
most 500 keys, rebuild chunks of at most 500 ids.  Redis errors reach callers
as :class:`~store.errors.JobStoreError`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis.cluster
from redis.exceptions import RedisClusterException

from store.chunks import TAIL_FIELDS, MemberWalk, sizes, split_chunk_key
from store.errors import InvalidRequestError, JobStoreError, redis_errors
from store.keys import NUL, StoreKeys
from store.steps import Steps, cmd, run

if TYPE_CHECKING:
    from store.core import StoreCore
    from store.redis_store import RedisJobStore

logger = logging.getLogger(__name__)

INDEX_KINDS = ("name", "queue")
TAIL_MARGIN_MS = 60_000
PAGE = 500

Progress = Callable[[int], None]


def normalize_indexes(value: Any) -> dict[str, bool]:
    """The ``indexes`` setting as ``{"name": bool, "queue": bool}``.

    ``True``/``None`` enable both kinds, ``False`` disables both, a mapping sets each
    (a kind it leaves out stays enabled).  Anything else raises InvalidRequestError.
    """
    if value is True or value is None:
        return {"name": True, "queue": True}
    if value is False:
        return {"name": False, "queue": False}
    if isinstance(value, Mapping):
        unknown = set(value) - {"name", "queue"}
        if unknown:
            raise InvalidRequestError(f"indexes has unknown kinds: {sorted(unknown)}")
        return {"name": bool(value.get("name", True)), "queue": bool(value.get("queue", True))}
    raise InvalidRequestError(
        f"indexes must be True, False or {{'name': bool, 'queue': bool}}, got {value!r}"
    )


def reconcile_indexes(store: RedisJobStore, boot_at: int) -> None:
    """Bring both index kinds in line with this store's configuration (at boot)."""
    store._drive(reconcile_steps(store, boot_at))


def reconcile_steps(store: StoreCore, boot_at: int) -> Steps[None]:
    """``reconcile_indexes`` as steps (store/steps.py), for either store."""
    for kind in INDEX_KINDS:
        marker = store.keys.index_ready(kind)
        if not store.indexes[kind]:
            yield cmd("index reconcile", "delete", marker)
            continue
        since = _parse_marker((yield cmd("index reconcile", "get", marker)))
        if since is None:
            rows = yield from index_rows_steps(kind)
            if rows:
                logger.info("rebuilt the %s index of %s: %d rows", kind, store.prefix, rows)
        else:
            yield from index_rows_steps(kind, since - TAIL_MARGIN_MS)
        yield cmd("index reconcile", "set", marker, str(boot_at))


def rebuild_index(store: RedisJobStore, kind: str, progress: Progress | None = None) -> int:
    """Index every row of ``all``: pages of 500 ids (chunk_page), one script call each."""
    return store._drive(index_rows_steps(kind, progress=progress))


def heal_index_tail(store: RedisJobStore, kind: str, min_enqueued_at: int) -> int:
    """Re-index rows with enqueued_at >= ``min_enqueued_at``, 500 per call."""
    return store._drive(index_rows_steps(kind, min_enqueued_at))


def index_rows_steps(
    kind: str, min_enqueued_at: int | None = None, progress: Progress | None = None
) -> Steps[int]:
    """(Re-)index the rows of ``all`` (from ``min_enqueued_at`` on): pages of 500 ids."""
    walk = MemberWalk("all", min_score=min_enqueued_at, page=PAGE)
    total = 0
    while not walk.done:
        page = walk.read((yield run("chunk_page", *walk.args())))
        if page:
            yield run("index_members", kind, *(job_id for job_id, _score in page))
            total += len(page)
            if progress is not None:
                progress(total)
    return total


#: SCAN COUNT hint, and the most keys one pipeline or UNLINK carries.
BATCH = 500

#: Characters with a meaning in Redis glob patterns (escaped with a backslash).
_GLOB_SPECIAL = frozenset("*?[]\\")


@dataclass(frozen=True)
class IndexStatus:
    """One index kind of one prefix, as seen from this process."""

    kind: str
    #: Enabled in this store's configuration (other processes may differ).
    enabled: bool
    #: The ready marker (ms of the last reconcile start), None when absent.
    ready_at: int | None
    #: Number of index sets of this kind (one per name or queue), and their members in total.
    zsets: int
    members: int
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ReclaimResult:
    """What ``reclaim_index`` deleted (or, in a dry run, would delete)."""

    #: Redis keys: each index set's directory and its chunks.
    keys: int
    members: int
    #: Sum of MEMORY USAGE of the keys before deletion (an estimate: Redis samples).
    bytes_freed: int
    dry_run: bool = False
    #: False when ``stop`` ended the run early (between batches).
    complete: bool = True
    #: Index sets (directories) among the keys.
    sets: int = 0


ReclaimProgress = Callable[[ReclaimResult], None]
RowsProgress = Callable[[int], None]


def glob_escape(text: str) -> str:
    """``text`` as a literal inside a Redis MATCH pattern."""
    return "".join("\\" + c if c in _GLOB_SPECIAL else c for c in text)


def index_pattern(store: RedisJobStore, kind: str) -> str:
    """The SCAN MATCH pattern of every key of an index of ``kind`` (directories and
    chunks) -- and of nothing else."""
    return keys_index_pattern(store.keys, kind)


def keys_index_pattern(keys: StoreKeys, kind: str) -> str:
    """``index_pattern`` from the store's keys alone."""
    _check_kind(kind)
    # keys.byname("") is "{p}:byname:"; the tag's braces are not glob characters,
    # but the prefix inside may hold any of *?[]\ (e.g. "x[1]*").
    base = keys.byname("") if kind == "name" else keys.byqueue("")
    return glob_escape(base) + "*"


def ready_marker(store: RedisJobStore, kind: str) -> int | None:
    """The ready marker of ``kind`` (ms of the last reconcile start), None when absent."""
    _check_kind(kind)
    with _errors("index status"):
        return _parse_marker(store.client.get(store.keys.index_ready(kind)))


def index_status(store: RedisJobStore) -> list[IndexStatus]:
    """Per kind: configuration, marker, number of zsets and members, and warnings."""
    out: list[IndexStatus] = []
    # Rows still in the chunked sets' head go into their chunks first, to be counted there
    # (and a set that so far has rows only in the head, found).
    with _errors("index status"):
        store._run("fold_head")
    for kind in INDEX_KINDS:
        with _errors("index status"):
            raw = store.client.get(store.keys.index_ready(kind))
        ready_at = _parse_marker(raw)
        zsets = members = 0
        for batch in _batches(_scan_unique(store, index_pattern(store, kind))):
            # Members are counted in the chunks, sets by their directories.
            with _errors("index status"):
                pipe = store.client.pipeline(transaction=False)
                for key in batch:
                    pipe.zcard(key)
                cards = pipe.execute()
            for key, card in zip(batch, cards, strict=True):
                # A key deleted between SCAN and ZCARD reads 0: not counted.
                if not card:
                    continue
                if split_chunk_key(key) is None:
                    zsets += 1
                else:
                    members += int(card)
        enabled = bool(store.indexes[kind])
        out.append(
            IndexStatus(
                kind, enabled, ready_at, zsets, members, _warnings(kind, enabled, raw, zsets)
            )
        )
    return out


@dataclass(frozen=True)
class IndexSummary:
    """One index kind, measured over the names and queues the store knows (no SCAN)."""

    kind: str
    #: Enabled in this store's configuration (other processes may differ).
    enabled: bool
    #: The ready marker's time (ms); None when absent or not a time.
    ready_at: int | None
    #: The marker's text (its first 40 characters) when it is present but not a time.
    bad_marker: str | None
    #: Whether a ready marker exists at all (a time or not).
    marker_present: bool
    #: Index sets holding rows among those of the known names / queues, and their rows.
    zsets: int
    members: int
    #: How many names (kind "name") or queues (kind "queue") the store knows.
    known: int


def index_summary(store: RedisJobStore) -> list[IndexSummary]:
    """Per kind: configuration, marker and the size of the known index sets, in two round trips.

    :func:`index_status` finds index sets with SCAN, which reads every key of the
    database (millions of rows: seconds).  Here the sets are looked up by name instead:
    ``byname:<n>`` for every job name the store knows and ``byqueue:<q>`` for every
    queue, their sizes read from the chunked sets' counts (store/chunks.py).  Sets of
    names the store no longer lists are not counted; :func:`index_status` (or
    ``reclaim_indexes --dry-run``) gives the exhaustive figure.  Reads only.
    """
    names = store.job_names()
    queues = store.queue_names()
    keys = store.keys
    with redis_errors("index status"):
        pipe = store.client.pipeline(transaction=False)
        pipe.get(keys.index_ready("name"))
        pipe.get(keys.index_ready("queue"))
        replies = pipe.execute()
        directories = [keys.byname(n) for n in names]
        directories += [keys.byqueue(q) for q in queues]
        replies += sizes(store.client, keys, directories)
    markers = {"name": replies[0], "queue": replies[1]}
    cards = {"name": replies[2 : 2 + len(names)], "queue": replies[2 + len(names) :]}
    known = {"name": len(names), "queue": len(queues)}
    out: list[IndexSummary] = []
    for kind in INDEX_KINDS:
        raw = markers[kind]
        ready_at: int | None = None
        bad_marker: str | None = None
        if raw not in (None, ""):
            try:
                ready_at = int(raw)
            except ValueError:
                bad_marker = str(raw)[:40]
        nonzero = [int(card) for card in cards[kind] if card]
        out.append(
            IndexSummary(
                kind=kind,
                enabled=bool(store.indexes[kind]),
                ready_at=ready_at,
                bad_marker=bad_marker,
                marker_present=raw not in (None, ""),
                zsets=len(nonzero),
                members=sum(nonzero),
                known=known[kind],
            )
        )
    return out


def ready_marker_key(store: RedisJobStore, kind: str) -> str:
    """The Redis key of the ready marker of ``kind`` (for messages to operators)."""
    _check_kind(kind)
    return store.keys.index_ready(kind)


def _warnings(kind: str, enabled: bool, raw_marker: str | None, zsets: int) -> list[str]:
    warnings: list[str] = []
    if enabled and raw_marker is None:
        warnings.append("enabled but no ready marker: the next store boot rebuilds it")
    elif raw_marker is not None and _parse_marker(raw_marker) is None:
        warnings.append(
            f"the ready marker holds {raw_marker[:40]!r}, not a time: the next boot rebuilds it"
        )
    if not enabled and raw_marker is not None:
        warnings.append(
            "disabled here but a ready marker exists: another store of this prefix has it enabled "
            "(every store of a prefix must use the same indexes setting)"
        )
    if not enabled and zsets:
        warnings.append(
            f"disabled but {zsets} zsets remain: run reclaim_indexes --kind {kind} "
            "once every store of this prefix has it disabled"
        )
    return warnings


def reclaim_index(
    store: RedisJobStore,
    kind: str,
    *,
    dry_run: bool = False,
    force: bool = False,
    progress: ReclaimProgress | None = None,
    stop: Callable[[], bool] | None = None,
) -> ReclaimResult:
    """Delete every index set of ``kind`` (directories and chunks) and its ready marker.

    Refuses while this store has the kind enabled (its own boot would rebuild
    it, and list queries routed to it would come back empty meanwhile) unless
    ``force``.  ``dry_run`` measures without deleting.  ``stop`` is polled
    between batches; when it returns True the run ends early with
    ``complete=False`` (the marker is then left alone).
    """
    _check_kind(kind)
    if store.indexes[kind] and not force:
        raise InvalidRequestError(
            f"the {kind} index is enabled in this store's configuration (indexes.{kind}=True): "
            f"list queries by {kind} would miss rows until the next boot rebuilds it; "
            f"disable indexes.{kind} in every store of prefix {store.prefix!r} first, "
            "or force it"
        )
    if not dry_run:
        # Rows still in the chunked sets' head, flagged for this index, go into its sets
        # now, to be deleted with them (store/chunks.py).
        with _errors("reclaim index"):
            store._run("fold_head")
    keys = members = size = sets = 0
    stopped = False
    scanned = (
        _scan_unique(store, index_pattern(store, kind))
        if dry_run
        else _scan(store, index_pattern(store, kind))
    )
    for batch in _batches(scanned):
        with _errors("reclaim index"):
            pipe = store.client.pipeline(transaction=False)
            for key in batch:
                pipe.memory_usage(key)
                pipe.zcard(key)
            measured = pipe.execute()
            directories = [key for key in batch if split_chunk_key(key) is None]
            if not dry_run:
                removed = int(store.client.unlink(*batch))
                if directories:
                    # Each set's size and its remembered last chunk (lua/lib/chunks.lua).
                    fields = [f"{d}{NUL}{w}" for d in directories for w in TAIL_FIELDS]
                    store.client.hdel(store.keys.index_counts, *directories, *fields)
            else:
                removed = len(batch)
        for k, key in enumerate(batch):
            usage, card = measured[2 * k], measured[2 * k + 1]
            # A key gone before the pipeline ran (or seen twice by SCAN) weighs nothing.
            if card:
                size += int(usage or 0)
                if split_chunk_key(key) is None:
                    sets += 1
                else:
                    members += int(card)
        keys += removed
        if progress is not None:
            progress(ReclaimResult(keys, members, size, dry_run, complete=False, sets=sets))
        if stop is not None and stop():
            stopped = True
            break
    if not dry_run and not stopped:
        with _errors("reclaim index"):
            store.client.delete(store.keys.index_ready(kind))
    return ReclaimResult(keys, members, size, dry_run, complete=not stopped, sets=sets)


def reindex(store: RedisJobStore, kind: str, progress: RowsProgress | None = None) -> int:
    """Fully rebuild one index kind and stamp its marker; returns the rows visited.

    The marker is dropped first, so a crash half way leaves the next boot to
    do the full rebuild; it is stamped with the store clock read *before* the
    scan, like a boot rebuild, so rows written meanwhile fall in the tail window.
    """
    _check_kind(kind)
    if not store.indexes[kind]:
        raise InvalidRequestError(
            f"the {kind} index is disabled in this store's configuration (indexes.{kind}=False); "
            "enable it there before rebuilding it"
        )
    started_at = store.now()
    marker = store.keys.index_ready(kind)
    with _errors("reindex"):
        store.client.delete(marker)
    rows = rebuild_index(store, kind, progress)
    with _errors("reindex"):
        store.client.set(marker, str(started_at))
    return rows


# ---------------------------------------------------------------------- helpers


def _check_kind(kind: str) -> None:
    if kind not in INDEX_KINDS:
        raise InvalidRequestError(
            f"index kind must be one of {', '.join(INDEX_KINDS)}, got {kind!r}"
        )


def _parse_marker(raw: str | None) -> int | None:
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        return None


@contextlib.contextmanager
def _errors(operation: str) -> Iterator[None]:
    """Like ``redis_errors``, also for the cluster client's exceptions and undecodable keys."""
    try:
        with redis_errors(operation):
            yield
    except (RedisClusterException, UnicodeError) as exc:
        # UnicodeError: a key name that is not UTF-8 (written by a foreign client).
        raise JobStoreError(f"{operation} failed: {exc}", exc) from exc


def scan_zsets(client: Any, keys: StoreKeys, pattern: str) -> Iterator[str]:
    """Zset keys of the store ``keys`` matching ``pattern``, paged by SCAN (COUNT 500;
    may repeat a key on rehash).  On a Redis Cluster only the node owning the store's
    slot is scanned."""
    kwargs: dict[str, Any] = {"match": pattern, "count": BATCH, "_type": "zset"}
    if isinstance(client, redis.cluster.RedisCluster):
        # All keys of a prefix share one slot: scan only the node that owns it.
        kwargs["target_nodes"] = client.get_node_from_key(keys.all)
    with _errors("index scan"):
        yield from client.scan_iter(**kwargs)


def _scan(store: RedisJobStore, pattern: str) -> Iterator[str]:
    return scan_zsets(store.client, store.keys, pattern)


def _scan_unique(store: RedisJobStore, pattern: str) -> Iterator[str]:
    """``_scan`` without the repeats SCAN allows, for counts that must be exact."""
    seen: set[str] = set()
    for key in _scan(store, pattern):
        if key not in seen:
            seen.add(key)
            yield key


def _batches(keys: Iterator[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    for key in keys:
        batch.append(key)
        if len(batch) >= BATCH:
            yield batch
            batch = []
    if batch:
        yield batch
