"""The async store under the sync store's conformance tests.

The ``store`` and ``make_store`` fixtures here give an :class:`AsyncFacade`: the sync
store's face, whose operations the async store has (``ASYNC_OPERATIONS``) are awaited on
an :class:`AsyncRedisJobStore` running on a private event loop thread, while the others
(claim, ack, ...: the worker side, which the tests use to drive jobs through their lives)
go to a sync store on the same prefix, clock and options.  The test bodies of
tests/store/ then run unchanged against the async store (tests/aio/test_conformance.py).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from store import FakeClock, RedisJobStore
from store.aio import AsyncRedisJobStore, client_like, connect

T = TypeVar("T")

#: The operations the facade awaits on the async store (the rest go to the sync store).
ASYNC_OPERATIONS = frozenset(
    {
        "enqueue",
        "enqueue_many",
        "get_job",
        "get_jobs",
        "get_attempts",
        "list",
        "counts",
        "counts_by_queue",
        "retry",
        "cancel",
        "cancel_by_dedupe",
        "promote",
        "remove",
        "pause",
        "resume",
        "paused_queues",
        "record_resolvable",
        "events",
        "last_event_id",
        "events_max_len",
        "job_logs",
        "job_log_length",
        "wait_for_result",
    }
)

#: Constructor options only the sync store takes.
SYNC_ONLY_OPTIONS = ("log_max_lines", "log_max_bytes")


class LoopThread:
    """An event loop running in a daemon thread; :meth:`run` waits for a coroutine."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


class AsyncFacade:
    """A sync store's face over an async store (see the module docstring)."""

    def __init__(self, astore: AsyncRedisJobStore, sync: RedisJobStore, loop: LoopThread) -> None:
        self.astore = astore
        self.sync = sync
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        if name in ASYNC_OPERATIONS:
            method = getattr(self.astore, name)

            def awaited(*args: Any, **kwargs: Any) -> Any:
                return self._loop.run(method(*args, **kwargs))

            return awaited
        return getattr(self.sync, name)


@pytest.fixture(scope="session")
def loop_thread() -> Iterator[LoopThread]:
    loop = LoopThread()
    yield loop
    loop.stop()


@pytest.fixture(scope="session")
def async_client(loop_thread: LoopThread, redis_url: str) -> Iterator[Any]:
    client = loop_thread.run(connect(redis_url))
    yield client
    loop_thread.run(client.aclose())


@pytest.fixture
def make_store(
    redis_client: Any, async_client: Any, loop_thread: LoopThread, prefix: str, clock: FakeClock
) -> Iterator[Callable[..., AsyncFacade]]:
    """Facades on this test's prefix and fake clock (any constructor argument overridden);
    the async store is built first, so it is the one refusing bad options."""
    made: list[AsyncFacade] = []

    def factory(**kwargs: Any) -> AsyncFacade:
        kwargs.setdefault("prefix", prefix)
        kwargs.setdefault("clock", clock)
        client = kwargs.pop("client", None)
        # Options of the sync store alone (the caps of the job logs its runs write).
        sync_only = {k: kwargs.pop(k) for k in SYNC_ONLY_OPTIONS if k in kwargs}
        aclient = async_client if client is None else client_like(client)
        astore = loop_thread.run(AsyncRedisJobStore.open(aclient, **kwargs))
        astore._owns_client = client is not None
        sync = RedisJobStore(client or redis_client, **kwargs, **sync_only)
        facade = AsyncFacade(astore, sync, loop_thread)
        made.append(facade)
        return facade

    yield factory
    for facade in made:
        loop_thread.run(facade.astore.aclose())
        facade.sync.close()


@pytest.fixture
def store(make_store: Callable[..., AsyncFacade]) -> AsyncFacade:
    return make_store()
