"""The asyncio store: ``AsyncRedisJobStore`` on ``redis.asyncio``.

The twin of :class:`store.RedisJobStore` for async code (an ASGI Django app, an asyncio
service): the same Lua scripts (a Redis Function library on Redis 7, EVALSHA scripts on
Redis 6.2, on a Cluster and for a user whose ACL refuses Functions), the same keys and the
same records.  Each operation is written once as steps (store/core.py, store/steps.py);
this module only awaits them, so both stores answer alike by construction.

Usage::

    from store import aio

    client = await aio.connect("redis://localhost:6379/0")   # or None: as store.connect
    jobs = await aio.AsyncRedisJobStore.open(client, prefix="mq")
    result = await jobs.enqueue(EnqueueRequest(name="send", payload={...}))
    record = await jobs.get_job(result.id)
    await jobs.aclose(close_client=True)

``AsyncRedisJobStore(client, prefix=...)`` builds a store without I/O; it starts (loads
the scripts, checks the data layout, reconciles the list indexes, reads the eviction
policy: what ``RedisJobStore.__init__`` does) on its first operation, or when awaited
``store.start()`` / built with ``await AsyncRedisJobStore.open(...)``, which report a bad
server at once.  A store and its client belong to the event loop they are used on.

It has the producer and admin operations (``enqueue``, ``enqueue_many``, ``get_job``,
``get_jobs``, ``get_attempts``, ``list``, ``counts``, ``counts_by_queue``, ``retry``,
``cancel``, ``cancel_by_dedupe``, ``promote``, ``remove``, ``pause``, ``resume``,
``paused_queues``, ``record_resolvable``), the live reads (``events`` -- an XREAD BLOCK
on the asyncio client --, ``last_event_id``, ``events_max_len``, ``job_logs``,
``job_log_length``) and the event-driven result wait
(:meth:`AsyncRedisJobStore.wait_for_result`); the worker side (claim, ack, progress and
log writes, schedules, flows) stays with the sync store.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.connection
import redis.cluster
import redis.connection
from redis.exceptions import RedisError

from store.connection import ASYNC, AsyncClient, _retry, build_client, connect_errors, resolve_url
from store.core import HistoryTtl, IdGenerator, StoreCore, owed_work, script_failure
from store.errors import redis_errors, store_error
from store.eviction import EvictionStatus, eviction_status_steps, warn_once_about
from store.indexes import reconcile_steps
from store.layout import check_layout_steps
from store.listing import DEFAULT_SCAN_BUDGET
from store.records import (
    AttemptRecord,
    EnqueueRequest,
    EnqueueResult,
    JobEvent,
    JobLogLine,
    JobRecord,
    ListResult,
)
from store.scripts import (
    PROBE,
    ScriptModes,
    call_failure,
    load_library_steps,
    select_mode_steps,
)
from store.steps import RUN, WAKE, Step, Steps, T, aclient_step, adrive, aon_client
from store.wake import WakeHub

__all__ = ["AsyncRedisJobStore", "AsyncScriptRegistry", "client_like", "connect"]


async def connect(url: str | None = None, *, cluster: bool = False, **kwargs: Any) -> AsyncClient:
    """Open a ``redis.asyncio`` client and check that the server answers.

    The same URLs, defaults (``decode_responses=True``, connect and socket timeouts,
    retry of dropped connections, never of timeouts) and errors as :func:`store.connect`;
    returns a ``redis.asyncio.Redis``, or a ``redis.asyncio.cluster.RedisCluster`` for a
    cluster URL.  With no URL (and no ``$MQ_REDIS_URL``) the embedded Redis is started in
    a thread if needed.
    """
    if url is None:  # may start the embedded Redis: not on the event loop
        resolved, is_cluster = await asyncio.to_thread(resolve_url, url, cluster)
    else:
        resolved, is_cluster = resolve_url(url, cluster)
    with connect_errors(resolved):
        client = build_client(resolved, is_cluster, kwargs, ASYNC)
        try:
            await client.ping()
        except BaseException:
            await client.aclose()
            raise
    return client


#: Options of a blocking connection that an asyncio connection does not take (or takes
#: as an asyncio object, rebuilt by ``client_like``).
_SYNC_ONLY_OPTIONS = frozenset({"retry", "socket_keepalive_options", "ssl_password"})

_ASYNC_CONNECTIONS = {
    redis.connection.Connection: redis.asyncio.connection.Connection,
    redis.connection.SSLConnection: redis.asyncio.connection.SSLConnection,
    redis.connection.UnixDomainSocketConnection: redis.asyncio.connection.UnixDomainSocketConnection,
}


def client_like(client: Any) -> AsyncClient:
    """A ``redis.asyncio`` client for the server(s) ``client`` (a blocking redis-py client
    as :func:`store.connect` makes) talks to, with its connection options.

    Retries take :mod:`store.connection`'s policy (dropped connections, never timeouts).
    """
    if isinstance(client, redis.cluster.RedisCluster):
        options = {
            k: v for k, v in client.nodes_manager.connection_kwargs.items() if k in _CLUSTER_OPTIONS
        }
        nodes = [
            redis.asyncio.cluster.ClusterNode(node.host, node.port) for node in client.get_nodes()
        ]
        return redis.asyncio.cluster.RedisCluster(
            startup_nodes=nodes, retry=_retry(ASYNC), **{**options, "decode_responses": True}
        )
    if not isinstance(client, redis.Redis):
        raise TypeError(f"client_like needs a redis-py client, got {type(client).__name__}")
    pool = client.connection_pool
    connection_class = _ASYNC_CONNECTIONS.get(pool.connection_class)
    if connection_class is None:
        raise TypeError(f"no asyncio twin for the connection class {pool.connection_class!r}")
    options = {k: v for k, v in pool.connection_kwargs.items() if k not in _SYNC_ONLY_OPTIONS}
    options.update(decode_responses=True, retry=_retry(ASYNC))
    async_pool = redis.asyncio.ConnectionPool(
        connection_class=connection_class, max_connections=pool.max_connections, **options
    )
    return redis.asyncio.Redis(connection_pool=async_pool)


#: Connection options an asyncio cluster client takes as keyword arguments.
_CLUSTER_OPTIONS = frozenset(
    {
        "username",
        "password",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "health_check_interval",
        "client_name",
        "ssl",
        "ssl_ca_certs",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_cert_reqs",
        "ssl_check_hostname",
    }
)


class AsyncScriptRegistry(ScriptModes):
    """The asyncio twin of :class:`store.scripts.ScriptRegistry`: the same library or
    scripts, chosen by the same steps, with the same recovery (``call_failure``)."""

    @classmethod
    async def open(cls, client: Any, tag: str) -> AsyncScriptRegistry:
        direct = isinstance(client, redis.asyncio.Redis)
        major, functions = await aon_client(client, select_mode_steps(direct))
        registry = cls()
        registry._setup(client, tag, major, functions)
        return registry

    async def probe(self) -> None:
        """Run one cheap read-only operation (raises the redis-py error when refused)."""
        await self(*PROBE)

    async def __call__(self, name: str, *args: Any) -> Any:
        if not self._direct:
            return await self._scripts[name](keys=self._keys, args=args)
        for attempt in range(3):
            head = self._heads.get(name) or self._head(name)
            try:
                return await self._client.execute_command(*head, *args)
            except (RedisError, OSError) as exc:
                action = call_failure(exc, head[0] == "FCALL", attempt)
                if action == "load":
                    await self._client.execute_command("SCRIPT", "LOAD", self._texts[name])
                elif action == "reload":
                    if not await aon_client(self._client, load_library_steps()):
                        self._fall_back_to_scripts()
                elif action == "fallback":
                    self._fall_back_to_scripts()
                elif action != "reconnect":  # the pool hands out a fresh connection
                    raise
        raise AssertionError("unreachable")


class AsyncRedisJobStore(StoreCore):
    """The job store on one Redis, for asyncio code (see the module docstring)."""

    def __init__(
        self,
        client: Any,
        prefix: str = "mq",
        indexes: Any = True,
        id_generator: IdGenerator | None = None,
        clock: Callable[[], int] | None = None,
        history_ttl: HistoryTtl = None,
        store_key: str = "default",
        max_value_bytes: int | None = None,
    ) -> None:
        self._configure(
            client, prefix, indexes, id_generator, clock, history_ttl, store_key, max_value_bytes
        )
        self._scripts: AsyncScriptRegistry | None = None
        self._started = False
        self._starting: asyncio.Lock | None = None
        self._owns_client = False
        # The wake hub of the sync twin of this process, if any: its idle claimers are
        # woken locally as the sync store would (every other process hears the scripts'
        # PUBLISH).  None: nothing in this process claims through this store.
        self._wake_hub: WakeHub | None = None
        #: The data layout at start, and the maxmemory-policy read then (None before).
        self.layout: int | None = None
        self.eviction: EvictionStatus | None = None

    @classmethod
    async def open(cls, client: Any, prefix: str = "mq", **options: Any) -> AsyncRedisJobStore:
        """Build and start a store: refuses a bad server or data layout at once."""
        store = cls(client, prefix, **options)
        await store.start()
        return store

    @classmethod
    def twin_of(cls, store: StoreCore) -> AsyncRedisJobStore:
        """An async store on the same prefix, options and server(s) as the sync ``store``,
        over its own asyncio client (closed by :meth:`aclose`)."""
        twin = cls(client_like(store.client), **store.settings())
        twin._owns_client = True
        twin._wake_hub = getattr(store, "_wake", None)
        # The sync store checked the layout and reconciled the indexes when it started:
        # the twin only loads its scripts.
        twin.layout = getattr(store, "layout", None)
        twin.eviction = getattr(store, "eviction", None)
        return twin

    def __repr__(self) -> str:
        return f"AsyncRedisJobStore(prefix={self.prefix!r}, store_key={self.store_key!r})"

    async def start(self) -> None:
        """Load the scripts, check the data layout, reconcile the list indexes, read the
        eviction policy (once; the first operation does it otherwise)."""
        if self._started:
            return
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._started:
                return
            with redis_errors("loading the store's scripts"):
                self._scripts = await AsyncScriptRegistry.open(self.client, self.keys.tag)
            if self.layout is None:
                layout = await aon_client(self.client, check_layout_steps(self.keys))
                await adrive(reconcile_steps(self, self.now()), self._do)
                status = await aon_client(self.client, eviction_status_steps())
                self.eviction = warn_once_about(self.client, status)
                self.layout = layout
            self._started = True

    async def aclose(self, *, close_client: bool = False) -> None:
        """Drop the store; ``close_client=True`` (or a client of :meth:`twin_of`) closes
        the client too (the client otherwise belongs to the caller)."""
        if close_client or self._owns_client:
            await self.client.aclose()

    async def check_scripts(self) -> None:
        """Run one cheap read-only script: raises JobStoreError (naming the missing ACL
        permission, if that is why) when this Redis user cannot run the store's scripts."""
        await self.start()
        assert self._scripts is not None
        try:
            await self._scripts.probe()
        except RedisError as exc:
            raise store_error("running the store's scripts", exc, self.keys.tag) from exc

    # ------------------------------------------------------------------ driving steps

    async def _drive(self, steps: Steps[T]) -> T:
        if not self._started:
            await self.start()
        return await adrive(steps, self._do)

    async def _do(self, step: Step) -> Any:
        if step[0] == RUN:
            return await self._run(step[1], *step[2])
        if step[0] == WAKE:
            if self._wake_hub is not None:
                self._wake_hub.signal(step[1])
            return None
        return await aclient_step(self.client, step)

    async def _run(self, script: str, *args: Any) -> Any:
        assert self._scripts is not None
        try:
            reply = await self._scripts(script, *args)
        except (RedisError, UnicodeDecodeError) as exc:
            raise script_failure(script, exc, self.keys.tag) from exc
        owed = owed_work(reply)
        if owed is not None:
            await adrive(self._finish_owed_steps(owed), self._do)
        return reply

    # ------------------------------------------------------------------ operations

    async def enqueue(self, request: EnqueueRequest) -> EnqueueResult:
        """Insert one job (as ``RedisJobStore.enqueue``)."""
        return await self._drive(self._enqueue_steps(request))

    async def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> list[EnqueueResult]:
        """Insert many jobs, positional results (as ``RedisJobStore.enqueue_many``)."""
        return await self._drive(self._enqueue_many_steps(requests))

    async def get_job(self, job_id: str) -> JobRecord | None:
        return await self._drive(self._get_job_steps(job_id))

    async def get_jobs(self, job_ids: Sequence[str]) -> list[JobRecord | None]:
        return await self._drive(self._get_jobs_steps(job_ids))

    async def get_attempts(self, job_id: str) -> list[AttemptRecord]:
        return await self._drive(self._get_attempts_steps(job_id))

    async def counts(self, queue: str | None = None) -> dict[str, int]:
        return await self._drive(self._counts_steps(queue))

    async def counts_by_queue(self) -> dict[str, dict[str, int]]:
        return await self._drive(self._counts_by_queue_steps())

    async def list(
        self,
        queue: str | None = None,
        name: str | None = None,
        states: Iterable[str] | None = None,
        metadata: Mapping[str, str] | None = None,
        order_by: str = "enqueued_at",
        order: str = "desc",
        cursor: str | None = None,
        limit: int = 50,
        scan_budget: int = DEFAULT_SCAN_BUDGET,
        *,
        payload: Mapping[str, str] | None = None,
        id_prefix: str | None = None,
    ) -> ListResult:
        """One page of jobs (as ``RedisJobStore.list``)."""
        return await self._drive(
            self._list_steps(
                queue,
                name,
                states,
                metadata,
                order_by,
                order,
                cursor,
                limit,
                scan_budget,
                payload,
                id_prefix,
            )
        )

    async def retry(self, job_id: str) -> None:
        await self._drive(self._retry_steps(job_id))

    async def cancel(self, job_id: str) -> None:
        await self._drive(self._cancel_steps(job_id))

    async def cancel_by_dedupe(self, name: str, key: str) -> bool:
        return await self._drive(self._cancel_by_dedupe_steps(name, key))

    async def promote(self, job_id: str) -> None:
        await self._drive(self._promote_steps(job_id))

    async def remove(self, job_id: str) -> bool:
        return await self._drive(self._remove_steps(job_id))

    async def pause(self, queue: str) -> None:
        await self._drive(self._pause_steps(queue))

    async def resume(self, queue: str) -> None:
        await self._drive(self._resume_steps(queue))

    async def paused_queues(self) -> builtins.list[str]:
        return await self._drive(self._paused_queues_steps())

    async def record_resolvable(self, queue: str, name: str, *, wake: bool = False) -> None:
        """As ``RedisJobStore.record_resolvable``."""
        await self._drive(self._record_resolvable_steps(queue, name, wake))

    # ------------------------------------------------------------------ live

    async def events(
        self, after: str = "$", block_ms: float | None = None, count: int = 100
    ) -> builtins.list[JobEvent]:
        """Events after ``after``, oldest first (as ``RedisJobStore.events``); with
        ``block_ms`` an XREAD BLOCK on the asyncio client waits for the first one."""
        return await self._drive(self._events_steps(after, block_ms, count))

    async def newest_events(self, count: int = 100) -> builtins.list[JobEvent]:
        """The events of the newest ``count`` (1-1000) store calls, oldest first."""
        return await self._drive(self._newest_events_steps(count))

    async def last_event_id(self) -> str:
        """The id of the newest event (``"0-0"`` when the stream is empty)."""
        return await self._drive(self._last_event_id_steps())

    async def events_max_len(self) -> int:
        """How many events the stream keeps (about; 0: no events are written)."""
        return await self._drive(self._events_max_len_steps())

    async def job_logs(
        self, job_id: str, start: int = 0, limit: int = 100
    ) -> builtins.list[JobLogLine]:
        """A job's log lines, oldest first (as ``RedisJobStore.job_logs``)."""
        return await self._drive(self._job_logs_steps(job_id, start, limit))

    async def job_log_length(self, job_id: str) -> int:
        """How many lines a job's log keeps now."""
        return await self._drive(self._job_log_length_steps(job_id))

    async def wait_for_result(self, job_id: str, timeout_s: float | None = None) -> JobRecord:
        """Wait until the job ends; return its terminal record (as
        ``RedisJobStore.wait_for_result``: event-driven, no lost wake-up -- the cursor is
        taken, then the record read, then the stream awaited).

        Raises:
            JobNotFoundError: the job does not exist (or was removed meanwhile).
            TimeoutError: it did not end within ``timeout_s``.
        """
        return await self._drive(self._wait_for_result_steps(job_id, timeout_s))
