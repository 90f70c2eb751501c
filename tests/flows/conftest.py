"""Fixtures of the flow tests: a parent store ("main") and child stores on private prefixes.

Every extra store lives on ``<test prefix>-<suffix>``; those keys are deleted after the test
(the test prefix itself is deleted by tests/conftest.py).  Every test gets a private
:class:`StoreRegistry` holding its stores; pass it as ``registry=`` to every Job and Worker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from store import RedisJobStore, StoreRegistry
from tests.conftest import delete_prefix


@pytest.fixture
def registry() -> StoreRegistry:
    return StoreRegistry()


@pytest.fixture
def extra_store(
    redis_client: Any,
    prefix: str,
    make_store: Callable[..., RedisJobStore],
    registry: StoreRegistry,
) -> Iterator[Callable[..., RedisJobStore]]:
    """``extra_store(suffix, store_key, **kw)``: a store on ``<prefix>-<suffix>``, registered."""
    suffixes: list[str] = []

    def factory(suffix: str, store_key: str, register: bool = True, **kwargs: Any) -> RedisJobStore:
        if suffix not in suffixes:
            suffixes.append(suffix)
        store = make_store(prefix=f"{prefix}-{suffix}", store_key=store_key, **kwargs)
        if register:
            registry.register(store)
        return store

    yield factory
    for suffix in suffixes:
        delete_prefix(redis_client, f"{prefix}-{suffix}")


@pytest.fixture
def main_store(make_store: Callable[..., RedisJobStore], registry: StoreRegistry) -> RedisJobStore:
    """The parent store: the test prefix, store key "main"."""
    return registry.register(make_store(store_key="main"))


@pytest.fixture
def child_store(extra_store: Callable[..., RedisJobStore]) -> RedisJobStore:
    """A child store: ``<prefix>-children``, store key "children"."""
    return extra_store("children", "children")
