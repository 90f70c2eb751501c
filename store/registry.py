"""Stores by store key.

Flows route child reports by store key and job definitions name the store
they live in, so a process keeps one registry ``store key -> RedisJobStore``.
Stores are created lazily by a factory (the Django app installs one that
reads ``MQ_STORES``) or registered explicitly.

Async code gets an ``AsyncRedisJobStore`` per store key and event loop with
:meth:`StoreRegistry.aget`: the twin of the sync store of that key (same prefix,
options and server, its own asyncio client), built on first use in each loop, or one
registered for the key with :meth:`StoreRegistry.register_async`.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from store.errors import InvalidRequestError

if TYPE_CHECKING:
    from store.aio import AsyncRedisJobStore
    from store.redis_store import RedisJobStore

StoreFactory = Callable[[str], "RedisJobStore"]


class StoreRegistry:
    def __init__(self) -> None:
        self._stores: dict[str, RedisJobStore] = {}
        self._factory: StoreFactory | None = None
        self._factory_keys: Callable[[], list[str]] | None = None
        self._lock = threading.Lock()
        # Per event loop: store key -> async store (dropped with the loop).
        self._async: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, AsyncRedisJobStore]
        ] = weakref.WeakKeyDictionary()
        self._async_registered: dict[str, AsyncRedisJobStore] = {}

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

    def register_async(
        self, store: AsyncRedisJobStore, key: str | None = None
    ) -> AsyncRedisJobStore:
        """Serve ``store`` from :meth:`aget` for its store key (use it from one event loop:
        its client belongs to the loop it runs on)."""
        with self._lock:
            self._async_registered[key or store.store_key] = store
        return store

    async def aget(self, key: str) -> AsyncRedisJobStore:
        """The async store of ``key`` for the running event loop (started).

        One registered with :meth:`register_async`, else the twin of the sync store of
        ``key`` (built, if need be, in a worker thread: the factory may block), made once
        per loop and kept while the loop lives.
        """
        from store.aio import AsyncRedisJobStore

        explicit = self._async_registered.get(key)
        if explicit is not None:
            await explicit.start()
            return explicit
        loop = asyncio.get_running_loop()
        stores = self._async.get(loop)
        astore = stores.get(key) if stores is not None else None
        if astore is not None:
            return astore
        sync_store = self._stores.get(key)
        if sync_store is None:
            sync_store = await asyncio.to_thread(self.get, key)
        made = AsyncRedisJobStore.twin_of(sync_store)
        try:
            await made.start()
        except BaseException:
            await made.aclose()
            raise
        with self._lock:
            stores = self._async.setdefault(loop, {})
            astore = stores.setdefault(key, made)
        if astore is not made:  # another task of this loop made one meanwhile
            await made.aclose()
        return astore

    async def aclose_loop(self) -> None:
        """Close the async stores this registry made for the running event loop."""
        with self._lock:
            stores = self._async.pop(asyncio.get_running_loop(), {})
        for astore in stores.values():
            await astore.aclose()

    def clear(self) -> None:
        with self._lock:
            stores, self._stores = list(self._stores.values()), {}
            self._async = weakref.WeakKeyDictionary()
            self._async_registered = {}
        for store in stores:
            store.close()


default_registry = StoreRegistry()
