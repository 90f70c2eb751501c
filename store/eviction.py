"""The eviction guard: a job queue under an evicting ``maxmemory-policy`` loses jobs silently.

Redis evicts keys only under memory pressure and only when its policy allows
it; any policy but ``noeviction`` may delete a job hash while its id stays in
the sorted sets.  ``eviction_status`` reads the policy (``CONFIG GET``);
``warn_once`` logs a warning the first time a process sees a server with an
evicting policy (a store does this when it starts), and says once that the
policy could not be read where ``CONFIG GET`` is refused (managed Redis that
renames or forbids CONFIG), then goes on.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError, ResponseError

from store.steps import Steps, cmd, on_client

logger = logging.getLogger(__name__)

SAFE_POLICY = "noeviction"

_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


@dataclass(frozen=True)
class EvictionStatus:
    """The server's ``maxmemory-policy``, or why it could not be read."""

    #: The policy, or None when it could not be read.
    policy: str | None
    #: Why it could not be read ("" when it was).
    unreadable: str = ""

    @property
    def evicting(self) -> bool:
        return self.policy is not None and self.policy != SAFE_POLICY

    @property
    def message(self) -> str:
        """One sentence for logs, checks and the dashboard ("" when all is well)."""
        if self.evicting:
            return (
                f"Redis maxmemory-policy is {self.policy!r}: under memory pressure Redis may "
                "evict job hashes and jobs are lost silently; set maxmemory-policy noeviction"
            )
        if self.policy is None:
            return (
                f"could not read the Redis maxmemory-policy ({self.unreadable}); make sure "
                "the server does not evict keys (noeviction)"
            )
        return ""


def eviction_status(client: Any) -> EvictionStatus:
    """Read ``maxmemory-policy``; a refused or failing ``CONFIG GET`` is reported, not raised."""
    return on_client(client, eviction_status_steps())


def eviction_status_steps() -> Steps[EvictionStatus]:
    """``eviction_status`` as steps (store/steps.py), for either kind of client."""
    try:
        reply = yield cmd(None, "config_get", "maxmemory-policy")
    except ResponseError as exc:
        return EvictionStatus(None, f"CONFIG GET refused: {exc}")
    except RedisError as exc:
        return EvictionStatus(None, f"CONFIG GET failed: {exc}")
    policies = _policies(reply)
    if not policies:
        return EvictionStatus(None, "CONFIG GET returned no maxmemory-policy")
    # A cluster answers per node: the worst one decides.
    evicting = [p for p in policies if p != SAFE_POLICY]
    return EvictionStatus(evicting[0] if evicting else SAFE_POLICY)


def _policies(reply: Any) -> list[str]:
    if not isinstance(reply, dict):
        return []
    if "maxmemory-policy" in reply:
        return [str(reply["maxmemory-policy"])]
    out: list[str] = []
    for value in reply.values():  # per node
        if isinstance(value, dict) and "maxmemory-policy" in value:
            out.append(str(value["maxmemory-policy"]))
    return out


def server_identity(client: Any) -> str:
    """A name for the server behind ``client`` (never a password)."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None) or {}
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    if "host" in kwargs:
        return f"{kwargs['host']}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"
    nodes = getattr(client, "get_nodes", None)
    if nodes is not None:
        try:
            return "cluster:" + ",".join(sorted(n.name for n in nodes()))
        except Exception:  # noqa: BLE001 - a name only
            return "cluster"
    return repr(type(client).__name__)


def warn_once(client: Any) -> EvictionStatus:
    """Check the policy; log a warning the first time this process sees a bad or unreadable one."""
    return warn_once_about(client, eviction_status(client))


def warn_once_about(client: Any, status: EvictionStatus) -> EvictionStatus:
    """Log ``status`` of the server behind ``client`` unless this process already did."""
    if not status.message:
        return status
    key = (server_identity(client), status.policy or "?")
    with _warned_lock:
        if key in _warned:
            return status
        _warned.add(key)
    logger.warning("Redis %s: %s", key[0], status.message)
    return status
