"""Fixtures of the fault tests: a redis-server of the test's own (never the shared one)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bench.chaos import PrivateRedis


@pytest.fixture
def private_redis() -> Iterator[Callable[..., PrivateRedis]]:
    """``private_redis(**options)``: start a PrivateRedis; every one is closed after the test."""
    servers: list[PrivateRedis] = []

    def start(**options: Any) -> PrivateRedis:
        server = PrivateRedis(**options)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.close()
