"""The dashboard's thin service layer over ``store``.

Views call these functions and never touch redis-py.  Clients and stores are cached
per Redis URL / (URL, prefix) for the life of the process, so a page view costs the
queries it makes, not a new connection; the caches are cleared when the store
settings change (see ``MqadminConfig.ready``).

``store`` is imported lazily: Django (settings, migrations, unrelated commands) keeps
working even when the store package cannot be imported.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from redis.exceptions import RedisClusterException, RedisError

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
_stores: dict[tuple[str, str, str], Any] = {}


@dataclass(frozen=True)
class StoreOverview:
    """One configured store, as the landing page shows it."""

    name: str
    prefix: str
    redis: str
    server_version: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    error: str | None = None

    @property
    def count_cells(self) -> list[tuple[str, int]]:
        """(state, count) in display order (templates cannot index "waiting-children")."""
        return [(state, self.counts.get(state, 0)) for state in STATES]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def configured_stores() -> dict[str, dict[str, Any]]:
    """``settings.MQ_STORES``: store name -> {"prefix": ..., "url": ... (optional)}."""
    stores: dict[str, dict[str, Any]] = getattr(settings, "MQ_STORES", None) or {
        "default": {"prefix": getattr(settings, "MQ_PREFIX", "mq")}
    }
    return stores


def store_url(entry: dict[str, Any]) -> str | None:
    """The Redis URL of one store entry; None means the embedded Redis."""
    url = entry.get("url") or getattr(settings, "MQ_REDIS_URL", None)
    return str(url) if url else None


def describe_redis(url: str | None) -> str:
    """How a page names a Redis: the masked URL, or where the embedded one listens."""
    from store.connection import mask_url
    from store.embedded import EmbeddedRedis, default_data_dir

    if url:
        return mask_url(url)
    return f"embedded Redis at {EmbeddedRedis(default_data_dir()).socket_path}"


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
        from store.connection import connect
        from store.embedded import EmbeddedRedis, default_data_dir

        if url:
            client = connect(url)
        else:
            # Started here rather than through connect(None), which would prefer an
            # MQ_REDIS_URL in the environment over the (possibly overridden) settings.
            client = connect(EmbeddedRedis(default_data_dir()).ensure_running())
        entry = (client, describe_redis(url))
        _clients[key] = entry
        return entry


def get_named_store(name: str) -> Any:
    """The cached ``store.RedisJobStore`` of the configured store ``name``.

    The name is the store key (what flows use to route child reports), so every
    process of the project resolves the same name to the same prefix.  Per-store
    ``indexes`` and ``history_ttl`` come from the MQ_STORES entry.

    Raises:
        store.InvalidRequestError: no store of that name is configured.
        store.JobStoreError: its Redis is unreachable.
    """
    stores = configured_stores()
    entry = stores.get(name)
    if entry is None:
        from store.errors import InvalidRequestError

        raise InvalidRequestError(f"no store named {name!r} in MQ_STORES (known: {', '.join(sorted(stores))})")
    url = store_url(entry)
    client, _ = get_client(url)
    key = (url or "", str(entry["prefix"]), name)
    with _lock:
        job_store = _stores.get(key)
        if job_store is None:
            from store.redis_store import RedisJobStore

            job_store = RedisJobStore(
                client,
                prefix=str(entry["prefix"]),
                store_key=name,
                indexes=entry.get("indexes", True),
                history_ttl=entry.get("history_ttl"),
            )
            _stores[key] = job_store
        return job_store


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
    from store.errors import StoreFailure

    overviews: list[StoreOverview] = []
    for name, entry in configured_stores().items():
        prefix = str(entry["prefix"])
        url = store_url(entry)
        description = describe_redis(url)
        try:
            client, _ = get_client(url)
            version = server_version(client)
            counts = get_named_store(name).counts()
        except (StoreFailure, RedisError, RedisClusterException, OSError) as exc:
            logger.warning("store %s (%s) unavailable: %s", name, description, exc)
            overviews.append(
                StoreOverview(
                    name=name, prefix=prefix, redis=description, error=_safe_error(exc, url)
                )
            )
            continue
        overviews.append(
            StoreOverview(
                name=name,
                prefix=prefix,
                redis=description,
                server_version=version,
                counts={str(state): int(count) for state, count in counts.items()},
            )
        )
    return overviews


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
        clients = [client for client, _ in _clients.values()]
        _stores.clear()
        _clients.clear()
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
