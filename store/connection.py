"""Opening a Redis client from a URL (or the embedded Redis when there is none).

Accepted URLs:

* ``redis://[[user]:password@]host[:port][/db]`` -- plain TCP;
* ``rediss://...`` -- TCP with TLS;
* ``unix://[[user]:password@]/path/to/redis.sock[?db=N]`` -- a unix socket;
* ``redis+cluster://[[user]:password@]host:port[,host2:port2...]`` (``rediss+cluster://``
  for TLS) -- a Redis Cluster, reached through the listed startup nodes.

Every client decodes replies to ``str`` (``decode_responses=True``): the store relies
on it.  Connection trouble while connecting is raised as
:class:`~store.errors.JobStoreError` with the redis-py exception chained and any
password masked out of the message.

Every Redis call is bounded: clients get a connect timeout (``socket_connect_timeout``,
default 2 s, ``$MQ_REDIS_CONNECT_TIMEOUT``) and a socket timeout for each reply
(``socket_timeout``, default 3 s, ``$MQ_REDIS_SOCKET_TIMEOUT``); keyword arguments of
:func:`connect` override both.  Refused or dropped connections are retried (a Redis
restart); a timed-out command is not: it may still run once the server answers again,
so it is reported (``TimeoutError``) rather than sent a second time.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.cluster
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError
from redis.retry import Retry

from store.embedded import EmbeddedRedis, default_data_dir
from store.errors import InvalidRequestError, JobStoreError

logger = logging.getLogger(__name__)

# Environment variable holding the Redis URL; empty or unset means the embedded Redis.
URL_ENV = "MQ_REDIS_URL"
# Seconds between liveness checks of an idle pooled connection before reuse.
HEALTH_CHECK_INTERVAL_S = 30
# Seconds to establish a connection, and to wait for any one reply (settings below).  A
# healthy Redis answers every store call in milliseconds (each script is bounded); one
# that says nothing for 3 s is stuck, and a dashboard page should say so within seconds.
CONNECT_TIMEOUT_S = 2.0
SOCKET_TIMEOUT_S = 3.0
# Environment variables overriding those two defaults (seconds, a positive number).
CONNECT_TIMEOUT_ENV = "MQ_REDIS_CONNECT_TIMEOUT"
SOCKET_TIMEOUT_ENV = "MQ_REDIS_SOCKET_TIMEOUT"
# Retry of refused/dropped connections (never of timeouts): 5 retries, 0.05 s doubling to
# at most 2 s between.
RETRY_ATTEMPTS = 5
RETRY_BACKOFF_BASE_S = 0.05
RETRY_BACKOFF_CAP_S = 2.0
# Default port of cluster startup nodes given without one.
DEFAULT_PORT = 6379
# Schemes that mean "Redis Cluster", and whether each uses TLS.
CLUSTER_SCHEMES = {"redis+cluster": False, "rediss+cluster": True}
# Schemes served by a standalone client.
STANDALONE_SCHEMES = frozenset({"redis", "rediss", "unix"})
# Shown instead of a password.
MASK = "***"

Client = redis.Redis | redis.cluster.RedisCluster
AsyncClient = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster


@dataclass(frozen=True)
class Flavor:
    """The redis-py classes of one kind of client: blocking or asyncio."""

    standalone: Any
    cluster: Any
    node: Any
    retry: Any


SYNC = Flavor(redis.Redis, redis.cluster.RedisCluster, redis.cluster.ClusterNode, Retry)
ASYNC = Flavor(
    redis.asyncio.Redis,
    redis.asyncio.cluster.RedisCluster,
    redis.asyncio.cluster.ClusterNode,
    redis.asyncio.retry.Retry,
)


def _retry(flavor: Flavor = SYNC) -> Any:
    # Only connection errors: redis-py's default also retries timeouts, which would send
    # a command that may already be queued on the server (a frozen one, say) again.
    return flavor.retry(
        ExponentialBackoff(cap=RETRY_BACKOFF_CAP_S, base=RETRY_BACKOFF_BASE_S),
        RETRY_ATTEMPTS,
        supported_errors=(RedisConnectionError,),
    )


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise InvalidRequestError(f"{name}={raw!r} must be a positive number of seconds")
    return value


def default_timeouts() -> tuple[float, float]:
    """(connect timeout, socket timeout) in seconds: the environment's, else 2 s and 3 s.

    Raises:
        InvalidRequestError: ``$MQ_REDIS_CONNECT_TIMEOUT`` or ``$MQ_REDIS_SOCKET_TIMEOUT``
            is set to something other than a positive number.
    """
    return (
        _env_seconds(CONNECT_TIMEOUT_ENV, CONNECT_TIMEOUT_S),
        _env_seconds(SOCKET_TIMEOUT_ENV, SOCKET_TIMEOUT_S),
    )


def connect(url: str | None = None, *, cluster: bool = False, **kwargs: Any) -> Client:
    """Open a client and check that the server answers.

    Args:
        url: a ``redis://``, ``rediss://``, ``unix://``, ``redis+cluster://`` or
            ``rediss+cluster://`` URL.  None reads ``$MQ_REDIS_URL``; when that is empty
            too, the shared embedded Redis of :func:`store.embedded.default_data_dir` is
            started if needed and used over its unix socket.
        cluster: treat a ``redis://``/``rediss://`` URL as a Redis Cluster startup node.
        **kwargs: extra redis-py client options; they override this module's defaults
            (``decode_responses`` is always True), e.g. ``socket_timeout`` and
            ``socket_connect_timeout`` (default: :func:`default_timeouts`) or ``retry``.

    Returns:
        A ``redis.Redis``, or a ``redis.cluster.RedisCluster`` for cluster URLs.

    Raises:
        JobStoreError: the server could not be reached (cause chained), or the embedded
            Redis could not be started.
        InvalidRequestError: the URL is not one of the accepted forms.
    """
    url, is_cluster = resolve_url(url, cluster)
    with connect_errors(url):
        client = build_client(url, is_cluster, kwargs, SYNC)
        try:
            client.ping()
        except BaseException:
            _close_quietly(client)
            raise
    logger.debug("connected to Redis at %s", mask_url(url))
    return client


def resolve_url(url: str | None, cluster: bool = False) -> tuple[str, bool]:
    """(URL, is a cluster) of :func:`connect`'s arguments; starts the embedded Redis when
    there is no URL.  Raises InvalidRequestError for a URL of an unknown form."""
    if url is None:
        url = os.environ.get(URL_ENV) or None
    if not url:
        url = EmbeddedRedis(default_data_dir()).ensure_running()
    scheme = urlsplit(url).scheme.lower()
    is_cluster = scheme in CLUSTER_SCHEMES or (cluster and scheme in ("redis", "rediss"))
    if cluster and not is_cluster:
        raise InvalidRequestError(f"a {scheme}:// URL cannot name a Redis Cluster")
    if not is_cluster and scheme not in STANDALONE_SCHEMES:
        raise InvalidRequestError(
            f"unsupported Redis URL {mask_url(url)!r}: expected redis://, rediss://, unix://, "
            "redis+cluster:// or rediss+cluster://"
        )
    return url, is_cluster


def build_client(url: str, is_cluster: bool, kwargs: dict[str, Any], flavor: Flavor) -> Any:
    """A client of ``flavor`` (not yet connected) with this module's options."""
    if is_cluster:
        return _cluster_client(url, kwargs, flavor)
    return _standalone_client(url, kwargs, flavor)


@contextlib.contextmanager
def connect_errors(url: str) -> Iterator[None]:
    """What connecting to ``url`` may raise, as JobStoreError / InvalidRequestError."""
    try:
        yield
    except InvalidRequestError:
        raise
    except (RedisError, RedisClusterException, OSError) as exc:
        raise JobStoreError(f"cannot connect to Redis at {mask_url(url)}: {exc}", exc) from exc
    except ValueError as exc:
        # redis-py's URL parser (e.g. a non-numeric port).
        raise InvalidRequestError(f"invalid Redis URL {mask_url(url)}: {exc}") from exc


def connect_probe(url: str | None, timeout_s: float) -> Client:
    """Open a client for health probes (``/readyz/``): it fails fast, never retries.

    Like :func:`connect`, but the client waits at most ``timeout_s`` seconds to connect
    and for each reply, and retries nothing (not even a refused connection), so a
    probe of a Redis that is down or frozen answers within about ``timeout_s``.

    Raises:
        JobStoreError: the server could not be reached.
        InvalidRequestError: the URL is not one of the accepted forms.
    """
    return connect(
        url,
        socket_connect_timeout=timeout_s,
        socket_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
    )


def _timeout_options() -> dict[str, Any]:
    connect_timeout, socket_timeout = default_timeouts()
    return {"socket_connect_timeout": connect_timeout, "socket_timeout": socket_timeout}


def _standalone_client(url: str, kwargs: dict[str, Any], flavor: Flavor) -> Any:
    options: dict[str, Any] = {
        "health_check_interval": HEALTH_CHECK_INTERVAL_S,
        "retry": _retry(flavor),
        "retry_on_error": [RedisConnectionError],
        **_timeout_options(),
    }
    # TCP keepalive only exists for TCP; redis-py's unix connection rejects the option.
    if urlsplit(url).scheme.lower() != "unix":
        options["socket_keepalive"] = True
    options.update(kwargs)
    options["decode_responses"] = True
    return flavor.standalone.from_url(url, **options)


def _cluster_client(url: str, kwargs: dict[str, Any], flavor: Flavor) -> Any:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if parts.query:
        raise InvalidRequestError(
            "query options are not supported in cluster URLs; pass them as keyword arguments"
        )
    userinfo, _, hosts = parts.netloc.rpartition("@")
    nodes = [flavor.node(host, port) for host, port in _parse_hosts(hosts)]
    options: dict[str, Any] = {
        "startup_nodes": nodes,
        # The cluster client retries whole commands (it re-resolves slots between
        # attempts); per-node retry options are not accepted by RedisCluster.
        "retry": _retry(flavor),
        "socket_keepalive": True,
        **_timeout_options(),
    }
    if CLUSTER_SCHEMES.get(scheme, scheme == "rediss"):
        options["ssl"] = True
    if userinfo:
        username, has_password, password = userinfo.partition(":")
        if username:
            options["username"] = unquote(username)
        if has_password:
            options["password"] = unquote(password)
    options.update(kwargs)
    options["decode_responses"] = True
    return flavor.cluster(**options)


def _parse_hosts(hosts: str) -> list[tuple[str, int]]:
    """``"h1:6379,[::1]:7000,h3"`` -> ``[("h1", 6379), ("::1", 7000), ("h3", 6379)]``."""
    parsed: list[tuple[str, int]] = []
    for item in hosts.split(","):
        item = item.strip()
        if not item:
            continue
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port_text = rest[1:] if rest.startswith(":") else ""
        else:
            host, _, port_text = item.partition(":")
        try:
            port = int(port_text) if port_text else DEFAULT_PORT
        except ValueError:
            raise InvalidRequestError(f"bad port in cluster node {item!r}") from None
        if not host:
            raise InvalidRequestError(f"missing host in cluster node {item!r}")
        parsed.append((host, port))
    if not parsed:
        raise InvalidRequestError("a cluster URL needs at least one host:port")
    return parsed


def _close_quietly(client: Client) -> None:
    try:
        client.close()
    except Exception:
        # Already reporting the connection failure; a second error would only hide it.
        logger.debug("error while closing a failed client", exc_info=True)


def mask_url(url: str) -> str:
    """The URL with its password (in the userinfo or a ``password=`` query) masked.

    Safe to log and to show on pages: ``redis://:s3cret@host:6379/0`` becomes
    ``redis://:***@host:6379/0``.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK
    netloc = parts.netloc
    userinfo, at, hosts = netloc.rpartition("@")
    if at:
        username, has_password, _ = userinfo.partition(":")
        if has_password:
            netloc = f"{username}:{MASK}@{hosts}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(key.lower() == "password" for key, _ in pairs):
            masked = [(key, MASK if key.lower() == "password" else value) for key, value in pairs]
            query = urlencode(masked, safe="*")
    if netloc == parts.netloc and query == parts.query:
        return url
    # Rebuilt by hand: urlunsplit() drops the "//" of unix:///path URLs.
    masked_url = f"{parts.scheme}://{netloc}{parts.path}"
    if query:
        masked_url += f"?{query}"
    if parts.fragment:
        masked_url += f"#{parts.fragment}"
    return masked_url
