"""The dashboard's one way to the stores: it opens them and turns their failures into pages' errors.

Queries (:mod:`mqadmin.queries`) and views open a configured store by name with
:func:`open_store`, make their store calls inside :func:`reaching` (a store that cannot
be reached becomes :class:`StoreUnavailable`, naming it; an unknown name
:class:`UnknownStore`), and read every store of a page with :func:`for_each_store`;
they never touch redis-py.  Clients and stores are cached per Redis URL / (URL,
prefix) for the life of the process, so a page view costs the queries it makes, not a
new connection; the caches are cleared when the store settings change (see
``MqadminConfig.ready``).

``store`` is imported lazily: Django (settings, migrations, unrelated commands) keeps
working even when the store package cannot be imported.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from django.conf import settings

if TYPE_CHECKING:
    from store import RedisJobStore
    from store.protocol import JobStore

logger = logging.getLogger(__name__)

# The seven job states, in the order the dashboard shows them (the contract's strings).
STATES: tuple[str, ...] = (
    "waiting",
    "delayed",
    "active",
    "waiting-children",
    "completed",
    "failed",
    "cancelled",
)

_lock = threading.Lock()
# Redis URL (or "" for the embedded Redis) -> (client, human description of that Redis).
_clients: dict[str, tuple[Any, str]] = {}
# (Redis URL key, prefix, store name) -> RedisJobStore.
_stores: dict[tuple[str, str, str], RedisJobStore] = {}
# Redis URL key -> client of the health probes (short timeouts, no retries).
_probes: dict[str, Any] = {}
#: Seconds a health probe waits to connect to a store's Redis, and for its reply.
PROBE_TIMEOUT_S = 1.0
# Redis URL -> (monotonic time of the last look, the page's message): the Redis of a
# store found unreachable (see :func:`_gate`).
_down: dict[str, tuple[float, str]] = {}
#: Seconds a Redis found unreachable is reported down at once, without trying it again;
#: then one new connection (no retries, :data:`PROBE_TIMEOUT_S`) looks again (:func:`_gate`).
#: The ``MQ_STORE_RECHECK_SECONDS`` setting, when set, wins (:func:`down_recheck_s`).
DOWN_RECHECK_S = 5.0


def down_recheck_s() -> float:
    """Seconds between two looks at a Redis found unreachable (``MQ_STORE_RECHECK_SECONDS``).

    Raises:
        ImproperlyConfigured: the setting is not a number of seconds, 0 or more
            (``manage.py check`` reports it first: ``mqadmin.E020``).
    """
    from mqadmin.config import seconds_setting

    value = getattr(settings, "MQ_STORE_RECHECK_SECONDS", None)
    if value is None:
        return DOWN_RECHECK_S
    return seconds_setting("MQ_STORE_RECHECK_SECONDS", value, zero_ok=True)


class StateCounts:
    """Jobs per state (``counts``) as the pages show them: one cell per state, a total."""

    counts: dict[str, int]

    @property
    def count_cells(self) -> list[tuple[str, int]]:
        """(state, count) in display order (templates cannot index "waiting-children")."""
        return [(state, self.counts.get(state, 0)) for state in STATES]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True)
class StoreOverview(StateCounts):
    """One configured store, as the landing page shows it."""

    name: str
    prefix: str
    redis: str
    server_version: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    error: str | None = None


# The key prefix of the single default store when the project sets neither MQ_STORES
# nor MQ_PREFIX.
DEFAULT_PREFIX = "mq"


def configured_stores() -> dict[str, dict[str, Any]]:
    """``settings.MQ_STORES``: store name -> {"prefix": ..., "url": ... (optional)}.

    A host project may set none of the MQ_* settings: then there is one store,
    ``default``, with the prefix ``MQ_PREFIX`` (``"mq"`` when unset too).
    """
    stores: dict[str, dict[str, Any]] = getattr(settings, "MQ_STORES", None) or {
        "default": {"prefix": getattr(settings, "MQ_PREFIX", None) or DEFAULT_PREFIX}
    }
    return stores


def embedded_data_dir() -> Path:
    """The data directory of the embedded Redis (used by stores without a Redis URL).

    In order: the ``MQ_DATA_DIR`` setting, the ``MQ_DATA_DIR`` environment variable,
    ``<BASE_DIR>/var/redis`` when the project's settings define ``BASE_DIR`` (as
    ``django-admin startproject`` writes them; in this repository that is its own
    ``var/redis``), else the store's default (a per-user state directory).
    """
    from store.embedded import DATA_DIR_ENV, default_data_dir

    configured = getattr(settings, "MQ_DATA_DIR", None) or os.environ.get(DATA_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    base_dir = getattr(settings, "BASE_DIR", None)
    if base_dir:
        return Path(base_dir) / "var" / "redis"
    return default_data_dir()


class TimeoutOptions(TypedDict, total=False):
    """The redis-py client options :func:`timeout_options` sets (seconds)."""

    socket_connect_timeout: float
    socket_timeout: float


def timeout_options() -> TimeoutOptions:
    """redis-py timeouts from the ``MQ_REDIS_CONNECT_TIMEOUT`` / ``MQ_REDIS_SOCKET_TIMEOUT``
    settings (seconds); a setting left unset keeps the store's default (2 s / 3 s, or the
    environment variables of the same names).

    Raises:
        ImproperlyConfigured: a setting is not a positive number.
    """
    from mqadmin.config import seconds_setting

    options: TimeoutOptions = {}
    connect_timeout = getattr(settings, "MQ_REDIS_CONNECT_TIMEOUT", None)
    if connect_timeout is not None:
        options["socket_connect_timeout"] = seconds_setting(
            "MQ_REDIS_CONNECT_TIMEOUT", connect_timeout
        )
    socket_timeout = getattr(settings, "MQ_REDIS_SOCKET_TIMEOUT", None)
    if socket_timeout is not None:
        options["socket_timeout"] = seconds_setting("MQ_REDIS_SOCKET_TIMEOUT", socket_timeout)
    return options


def new_client(url: str | None) -> Any:
    """A new (uncached) client for ``url``; None: the embedded Redis, started if needed.

    Raises:
        store.JobStoreError: Redis unreachable, or the embedded Redis failed to start.
    """
    from store.connection import connect
    from store.embedded import EmbeddedRedis

    if url:
        return connect(url, **timeout_options())
    # Started here rather than through connect(None), which would prefer an
    # MQ_REDIS_URL in the environment over the (possibly overridden) settings, and
    # would not know the project's data directory.
    return connect(EmbeddedRedis(embedded_data_dir()).ensure_running(), **timeout_options())


def probe_client(entry: dict[str, Any]) -> Any:
    """A cached client of one store entry's Redis for health probes.

    It waits at most :data:`PROBE_TIMEOUT_S` to connect and for each reply, and never
    retries, so a probe of a Redis that is down or frozen fails fast.  For the embedded
    Redis, the shared client is opened first (starting the server if needed).

    Raises:
        store.JobStoreError: Redis unreachable.
    """
    from store.connection import connect_probe
    from store.embedded import EmbeddedRedis

    url = store_url(entry)
    key = url or ""
    with _lock:
        cached = _probes.get(key)
    if cached is not None:
        return cached
    if url is None:
        get_client(None)
        target = EmbeddedRedis(embedded_data_dir()).url
    else:
        target = url
    # Connected outside the lock: a frozen Redis must not hold up the other stores' probes.
    client = connect_probe(target, PROBE_TIMEOUT_S)
    with _lock:
        kept = _probes.setdefault(key, client)
    if kept is not client:
        client.close()
    return kept


def store_url(entry: dict[str, Any]) -> str | None:
    """The Redis URL of one store entry; None means the embedded Redis."""
    url = entry.get("url") or getattr(settings, "MQ_REDIS_URL", None)
    return str(url) if url else None


def describe_redis(url: str | None) -> str:
    """How a page names a Redis: the masked URL, or where the embedded one listens."""
    from store.connection import mask_url
    from store.embedded import EmbeddedRedis

    if url:
        return mask_url(url)
    return f"embedded Redis at {EmbeddedRedis(embedded_data_dir()).socket_path}"


def get_client(url: str | None) -> tuple[Any, str]:
    """A cached client for ``url`` (None: the embedded Redis, started if needed).

    Returns:
        (client, description of the Redis for display).

    Raises:
        store.JobStoreError: Redis unreachable, or the embedded Redis failed to start.
    """
    key = url or ""
    with _lock:
        cached = _clients.get(key)
        if cached is not None:
            return cached
        client = new_client(url)
        entry = (client, describe_redis(url))
        _clients[key] = entry
        return entry


def get_named_store(name: str) -> RedisJobStore:
    """The cached ``store.RedisJobStore`` of the configured store ``name``.

    The name is the store key (what flows use to route child reports), so every
    process of the project resolves the same name to the same prefix.  Per-store
    ``indexes``, ``history_ttl`` and the job log caps come from the MQ_STORES entry.

    Raises:
        store.InvalidRequestError: no store of that name is configured.
        store.JobStoreError: its Redis is unreachable.
    """
    stores = configured_stores()
    entry = stores.get(name)
    if entry is None:
        from store.errors import InvalidRequestError

        raise InvalidRequestError(
            f"no store named {name!r} in MQ_STORES (known: {', '.join(sorted(stores))})"
        )
    url = store_url(entry)
    client, _ = get_client(url)
    key = (url or "", str(entry["prefix"]), name)
    with _lock:
        job_store = _stores.get(key)
        if job_store is None:
            from store import RedisJobStore

            job_store = RedisJobStore(
                client,
                prefix=str(entry["prefix"]),
                store_key=name,
                indexes=entry.get("indexes", True),
                history_ttl=entry.get("history_ttl"),
                log_max_lines=entry.get("log_max_lines"),
                log_max_bytes=entry.get("log_max_bytes"),
            )
            _stores[key] = job_store
        return job_store


def check_store_scripts(name: str) -> None:
    """Raise unless the configured store ``name`` can run its Lua scripts (``/readyz/``).

    Builds (or reuses) the cached store and runs one cheap read-only script, so a Redis
    user whose ACL refuses EVALSHA (or the store's keys) is "not ready", not "ready".

    Raises:
        store.JobStoreError: unreachable, or the scripts cannot run (the message names
            the missing ACL permission).
    """
    get_named_store(name).check_scripts()


def server_version(client: Any) -> str | None:
    """``redis_version`` from INFO (for a cluster: the distinct versions of its nodes)."""
    info = client.info("server")
    if "redis_version" in info:
        return str(info["redis_version"])
    # RedisCluster answers INFO per node: {node name: {field: value}}.
    versions = sorted(
        {str(node["redis_version"]) for node in info.values() if isinstance(node, dict)}
    )
    return ", ".join(versions) or None


def store_overviews() -> list[StoreOverview]:
    """Every configured store with its Redis, server version and per-state job counts.

    A store whose Redis is unreachable is reported with ``error`` set rather than
    failing the whole page.
    """
    from store.errors import UNAVAILABLE_ERRORS, StoreFailure

    def read(store: ConfiguredStore, job_store: Any) -> StoreOverview:
        client, _ = get_client(store.url)
        version = server_version(client)
        counts = job_store.counts()
        return StoreOverview(
            name=store.name,
            prefix=store.prefix,
            redis=store.redis,
            server_version=version,
            counts={str(state): int(count) for state, count in counts.items()},
        )

    def failed(store: ConfiguredStore, error: str) -> StoreOverview:
        return StoreOverview(name=store.name, prefix=store.prefix, redis=store.redis, error=error)

    return for_each_store(read, failed, errors=(StoreFailure, OSError, *UNAVAILABLE_ERRORS))


def _safe_error(exc: BaseException, url: str | None) -> str:
    """An error message fit for a page: never the raw URL (it may hold a password)."""
    from store.connection import mask_url

    message = str(exc) or type(exc).__name__
    if url:
        message = message.replace(url, mask_url(url))
    return message


def reset() -> None:
    """Drop cached stores and clients (settings changed, or a test wants a clean slate)."""
    with _lock:
        stores = list(_stores.values())
        clients = [client for client, _ in _clients.values()] + list(_probes.values())
        _stores.clear()
        _clients.clear()
        _probes.clear()
        _down.clear()
    for job_store in stores:
        close = getattr(job_store, "close", None)
        if close is not None:
            try:
                close()
            except Exception:
                logger.debug("error while closing a cached store", exc_info=True)
    from store.registry import default_registry

    default_registry.clear()
    for client in clients:
        try:
            client.close()
        except Exception:
            logger.debug("error while closing a cached Redis client", exc_info=True)


# -- the dashboard's stores: opened by name, failures turned into the dashboard's errors --
#
# Every page reaches a store through these: :func:`open_store` by name, calls inside
# :func:`reaching`, and :func:`for_each_store` for a page that shows every store.


class StoreUnavailable(Exception):
    """A store's Redis could not be reached (or answered with an error)."""

    def __init__(self, store: str, message: str) -> None:
        super().__init__(f"store {store!r}: {message}")
        self.store = store
        self.message = message


class UnknownStore(LookupError):
    """A store name in a URL that MQ_STORES does not configure."""


@contextlib.contextmanager
def reaching(store_name: str) -> Iterator[None]:
    """Turn a store's connection failure into :class:`StoreUnavailable` naming the store
    (and remember a Redis that cannot be reached: :func:`open_store` then fails fast)."""
    from store.errors import JobStoreError, is_unreachable

    try:
        yield
    except JobStoreError as exc:
        entry = configured_stores().get(store_name, {})
        url = store_url(entry) if entry else None
        logger.warning("store %s unavailable: %s", store_name, exc)
        message = public_error(exc, url)
        if url is not None and is_unreachable(exc):
            _mark_down(url, message)
        raise StoreUnavailable(store_name, message) from exc


def _mark_down(url: str, message: str) -> None:
    with _lock:
        _down[url] = (time.monotonic(), message)


def _gate(name: str, entry: dict[str, Any]) -> None:
    """Fail fast for a store whose Redis is known to be down.

    The store client retries a refused connection for ~1.5 s, and a page may make several
    calls: a page with one store down would take seconds.  So the first time a page
    opens a store whose Redis has no client yet, and whenever a Redis found unreachable
    is due another look (``MQ_STORE_RECHECK_SECONDS``, 5 s, after the last), one new connection
    decides: it never retries and waits at most :data:`PROBE_TIMEOUT_S`.  In between, the
    store is reported unavailable at once, with the message of the failure.  The
    embedded Redis is left out: opening it starts it if needed.

    Raises:
        StoreUnavailable: the Redis is down, or was at the last look.
    """
    from store.connection import connect_probe
    from store.errors import JobStoreError, is_unreachable

    url = store_url(entry)
    if url is None:
        return
    with _lock:
        down = _down.get(url)
        opened = url in _clients
    if down is None and opened:
        return
    if down is not None:
        age = time.monotonic() - down[0]
        recheck = down_recheck_s()
        if age < recheck:
            raise StoreUnavailable(
                name,
                f"{down[1]} (as of {age:.1f} s ago; the next try in "
                f"{max(0.1, recheck - age):.1f} s)",
            )
    try:
        # A connection of its own (connect_probe pings it): a pooled one may be a stale
        # socket from before a restart.
        connect_probe(url, PROBE_TIMEOUT_S).close()
    except JobStoreError as exc:  # (connect_probe raises nothing else for a valid URL)
        message = public_error(exc, url)
        logger.warning("store %s unavailable: %s", name, message)
        if is_unreachable(exc):
            _mark_down(url, message)
        raise StoreUnavailable(name, message) from exc
    with _lock:
        _down.pop(url, None)


def store_names() -> list[str]:
    return list(configured_stores())


def open_store(name: str) -> Any:
    """The configured store ``name`` (raises :class:`UnknownStore` / :class:`StoreUnavailable`)."""
    stores = configured_stores()
    if name not in stores:
        raise UnknownStore(name)
    _gate(name, stores[name])
    with reaching(name):
        return get_named_store(name)


@dataclass(frozen=True)
class ConfiguredStore:
    """One entry of MQ_STORES, as :func:`for_each_store` hands it to a page."""

    name: str
    entry: dict[str, Any]

    @property
    def prefix(self) -> str:
        return str(self.entry["prefix"])

    @property
    def url(self) -> str | None:
        return store_url(self.entry)

    @property
    def redis(self) -> str:
        """How a page names the store's Redis (:func:`describe_redis`)."""
        return describe_redis(self.url)


T = TypeVar("T")


def for_each_store(
    read: Callable[[ConfiguredStore, Any], T],
    failed: Callable[[ConfiguredStore, str], T],
    *,
    only: str | None = None,
    errors: tuple[type[Exception], ...] = (),
) -> list[T]:
    """``read(store, job_store)`` for every configured store (or only ``only``), in order.

    ``read`` runs inside :func:`reaching`: a store that cannot be opened or reached
    gives ``failed(store, message)`` instead, so one store down never fails a page
    that shows them all.  ``errors`` names further exceptions reported the same way
    (logged, the message with any Redis URL masked).
    """
    out: list[T] = []
    for name, entry in configured_stores().items():
        if only is not None and name != only:
            continue
        store = ConfiguredStore(name, entry)
        try:
            job_store = open_store(name)
            with reaching(name):
                value = read(store, job_store)
        except StoreUnavailable as exc:
            out.append(failed(store, exc.message))
            continue
        except errors as exc:
            logger.warning("store %s (%s) unavailable: %s", name, store.redis, exc)
            out.append(failed(store, public_error(exc, store.url)))
            continue
        out.append(value)
    return out


# -- dashboard read models that need the store's hidden bookkeeping -----------------------
#
# The store keeps a few facts off its public records (store contract §2.9, §2.18): the
# lock token and lock expiry of an active job, and the dedupe registry.  The dashboard
# shows them read-only; they are read here, in the service layer, so views never touch
# Redis or key names.  Each read is one command on one key.


def public_error(exc: BaseException, url: str | None = None) -> str:
    """``exc`` as a message fit for a page (a Redis URL in it has its password masked)."""
    return _safe_error(exc, url)


@dataclass(frozen=True)
class LockInfo:
    """Who holds an active job and until when (the job hash's hidden lock fields)."""

    token: str | None
    expires_at: int | None

    @property
    def worker_id(self) -> str | None:
        """The worker part of the token: workers mint ``<worker id>:<counter>``."""
        if not self.token:
            return None
        worker, sep, _ = self.token.rpartition(":")
        return worker if sep else self.token


@dataclass(frozen=True)
class DedupeOwner:
    """The dedupe registry entry of one (job name, dedupe key)."""

    job_id: str
    #: End of a throttle/debounce window; None for a pending-mode entry.
    expires_at: int | None


def job_lock_info(job_store: JobStore, job_id: str) -> LockInfo:
    """The lock token and expiry of ``job_id`` (both None when it is not active)."""
    info = job_store.lock_info(job_id)
    return LockInfo(info.token, info.expires_at)


def dedupe_owner(job_store: JobStore, name: str, key: str) -> DedupeOwner | None:
    """The job the (name, key) dedupe entry points at now, or None when the key is free."""
    owner = job_store.dedupe_owner(name, key)
    return None if owner is None else DedupeOwner(owner.job_id, owner.expires_at)


@dataclass(frozen=True)
class IndexSummary:
    """One optional list index kind of one store, measured in bounded calls."""

    kind: str
    enabled: bool
    #: The ready marker's time (ms), None when absent or unreadable.
    ready_at: int | None
    #: The marker's raw text when it is not a time (a warning names it).
    bad_marker: str | None
    #: Index zsets found among the known names / queues, and their members.
    zsets: int
    members: int
    #: How many names (kind "name") or queues (kind "queue") the store knows.
    known: int
    warnings: list[str] = field(default_factory=list)


def bounded_index_status(job_store: JobStore) -> list[IndexSummary]:
    """Index status per kind without walking the keyspace.

    ``store.indexes.index_status`` finds index zsets with SCAN, which reads every
    key of the database (millions of rows: seconds).  A page cannot afford that, so
    here the zsets are looked up by name (``RedisJobStore.index_summary``): the index
    set of every job name and every queue the store knows, their sizes read in one
    round trip.  Zsets of names the store no longer lists are not counted; the
    SCAN-based ``reclaim_indexes --dry-run`` gives the exhaustive figure.
    """
    out: list[IndexSummary] = []
    for measured in job_store.index_summary():
        summary = IndexSummary(
            kind=measured.kind,
            enabled=measured.enabled,
            ready_at=measured.ready_at,
            bad_marker=measured.bad_marker,
            zsets=measured.zsets,
            members=measured.members,
            known=measured.known,
        )
        summary.warnings.extend(_index_warnings(summary, marker_present=measured.marker_present))
        out.append(summary)
    return out


def _index_warnings(summary: IndexSummary, *, marker_present: bool) -> list[str]:
    # The same rules as store.indexes.index_status's, phrased for a page.
    kind = summary.kind
    warnings: list[str] = []
    if summary.enabled and not marker_present:
        warnings.append(
            "Enabled but the ready marker is missing: the next store boot rebuilds the index "
            "from scratch (list queries by this index may miss rows until then)."
        )
    elif summary.bad_marker is not None:
        warnings.append(
            f"The ready marker holds {summary.bad_marker!r}, not a time: the next boot rebuilds it."
        )
    if not summary.enabled and marker_present:
        warnings.append(
            "Disabled here, but a ready marker exists: another process of this prefix has it "
            "enabled. Every store of a prefix must use the same indexes setting."
        )
    if not summary.enabled and summary.zsets:
        warnings.append(
            f"Disabled, but {summary.zsets} index zsets remain: reclaim their memory once every "
            f"store of this prefix has indexes.{kind} off."
        )
    return warnings
