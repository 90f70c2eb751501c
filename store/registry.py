"""Stores by store key.

Flows route child reports by store key and job definitions name the store
they live in, so a process keeps one registry ``store key -> RedisJobStore``.
Stores are created lazily by a factory (the Django app installs one that
reads ``MQ_STORES``) or registered explicitly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from store.errors import InvalidRequestError

if TYPE_CHECKING:
    from store.redis_store import RedisJobStore

StoreFactory = Callable[[str], "RedisJobStore"]


class StoreRegistry:
    def __init__(self) -> None:
        self._stores: dict[str, RedisJobStore] = {}
        self._factory: StoreFactory | None = None
        self._factory_keys: Callable[[], list[str]] | None = None
        self._lock = threading.Lock()

    def register(self, store: RedisJobStore, key: str | None = None) -> RedisJobStore:
        with self._lock:
            self._stores[key or store.store_key] = store
        return store

    def set_factory(
        self, factory: StoreFactory | None, keys: Callable[[], list[str]] | None = None
    ) -> None:
        """Build stores on first use; ``keys`` lists the store keys the factory can build."""
        self._factory = factory
        self._factory_keys = keys

    def routable_keys(self) -> list[str]:
        """Store keys this process can reach (registered, or buildable by the factory)."""
        keys = set(self._stores)
        if self._factory_keys is not None:
            keys.update(self._factory_keys())
        return sorted(keys)

    def get(self, key: str) -> RedisJobStore:
        store = self._stores.get(key)
        if store is not None:
            return store
        with self._lock:
            store = self._stores.get(key)
            if store is None:
                if self._factory is None:
                    raise InvalidRequestError(
                        f"no store is registered under {key!r}; register one with "
                        "store.default_registry.register(RedisJobStore(...))"
                    )
                store = self._factory(key)
                self._stores[key] = store
        return store

    def find(self, key: str) -> RedisJobStore | None:
        """The store under ``key`` if this process can reach it, else None."""
        try:
            return self.get(key)
        except InvalidRequestError:
            return None

    def keys(self) -> list[str]:
        return list(self._stores)

    def clear(self) -> None:
        with self._lock:
            stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            store.close()


default_registry = StoreRegistry()
