"""Fixtures of the runtime (worker/producer) tests, on top of tests/conftest.py."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from store import RedisJobStore, StoreRegistry, default_registry
from tests.conftest import delete_prefix


@pytest.fixture(autouse=True)
def _private_registries_only() -> Iterator[None]:
    """Runtime tests pass private registries everywhere; the process-wide one must not grow."""
    before = set(default_registry.keys())
    yield
    added = set(default_registry.keys()) - before
    assert not added, f"a test reached store.default_registry (added {sorted(added)})"


@pytest.fixture
def registry(store: RedisJobStore) -> StoreRegistry:
    """A private registry holding this test's store under its key ("default")."""
    reg = StoreRegistry()
    reg.register(store)
    return reg


@pytest.fixture
def make_other_store(
    redis_client: Any, make_store: Callable[..., RedisJobStore]
) -> Iterator[Callable[..., RedisJobStore]]:
    """Stores on a second, private prefix (deleted after the test)."""
    prefixes: list[str] = []

    def factory(**kwargs: Any) -> RedisJobStore:
        if "prefix" not in kwargs:
            if not prefixes:
                prefixes.append(f"t-{uuid.uuid4().hex[:12]}")
            kwargs["prefix"] = prefixes[0]
        elif kwargs["prefix"] not in prefixes:
            prefixes.append(kwargs["prefix"])
        return make_store(**kwargs)

    yield factory
    for prefix in prefixes:
        delete_prefix(redis_client, prefix)


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Child processes a test starts (worker processes); stopped and reaped after it.

    A child still running is asked to stop (SIGTERM), then killed after 10 s."""
    spawned: list[subprocess.Popen[bytes]] = []
    yield spawned
    for child in spawned:
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
        child.wait(10)
        if child.stderr is not None:
            child.stderr.close()
