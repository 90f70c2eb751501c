"""System checks of the store settings (run by `manage.py check` and on start-up)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning

from mqadmin.config import validate_stores


def check_store_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """MQ_STORES must map store names to {"prefix": ..., "url": ...}."""
    problems = validate_stores(getattr(settings, "MQ_STORES", None))
    return [
        Error(
            f"MQ_STORES: {problem}",
            hint='Example: {"default": {"prefix": "mq"}, "billing": {"prefix": "billing"}}',
            id="mqadmin.E001",
        )
        for problem in problems
    ]


#: Seconds a system check waits for a Redis (a check must not hang a command).
CHECK_TIMEOUT_S = 1.0


def check_eviction_policy(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn when a configured store's Redis may evict keys (a queue then loses jobs silently).

    Each distinct Redis URL of MQ_STORES is asked once (CONFIG GET, with a short
    timeout).  The embedded Redis (no URL) is started by this project with the
    server default ``noeviction`` and is not asked; an unreachable Redis is the
    dashboard's to report, not a check's.  Where CONFIG GET is refused (managed
    Redis), the warning says the policy could not be read.
    """
    from redis.exceptions import RedisError

    from store import StoreFailure, connect
    from store.connection import mask_url
    from store.eviction import eviction_status

    if validate_stores(getattr(settings, "MQ_STORES", None)):
        return []  # E001 reports the settings first
    stores: dict[str, dict[str, Any]] = getattr(settings, "MQ_STORES", None) or {}
    urls: dict[str, list[str]] = {}
    for name, entry in stores.items():
        url = (entry or {}).get("url") or getattr(settings, "MQ_REDIS_URL", None)
        if url:
            urls.setdefault(str(url), []).append(name)
    if not stores and getattr(settings, "MQ_REDIS_URL", None):
        urls[str(settings.MQ_REDIS_URL)] = ["default"]
    out: list[CheckMessage] = []
    for url, names in urls.items():
        try:
            client = connect(
                url, socket_timeout=CHECK_TIMEOUT_S, socket_connect_timeout=CHECK_TIMEOUT_S
            )
        except (StoreFailure, RedisError, OSError, ValueError):
            continue
        try:
            status = eviction_status(client)
        finally:
            client.close()
        if not status.message:
            continue
        out.append(
            Warning(
                f"stores {', '.join(sorted(names))} on {mask_url(url)}: {status.message}",
                hint="CONFIG SET maxmemory-policy noeviction (and persist it in redis.conf), "
                "or choose noeviction in your Redis provider's settings.",
                id="mqadmin.W002" if status.policy is None else "mqadmin.W001",
            )
        )
    return out
