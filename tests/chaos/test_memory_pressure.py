"""Redis at maxmemory: ``noeviction`` fails loudly, an eviction policy loses jobs silently.

The store keeps every job in Redis and never expects a key to vanish.  With
``maxmemory-policy noeviction`` (Redis' default) a full server refuses writes: ``enqueue``
raises ``JobStoreError`` (OOM) and nothing already stored is touched; once memory is added,
everything is consistent.  With an eviction policy (here ``allkeys-lru``) Redis deletes job
hashes behind the store's back: enqueues keep "succeeding" while acknowledged jobs disappear
and the counters no longer match the jobs.  Each test runs on a redis-server of its own.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.chaos import recount
from store import EnqueueRequest, JobStoreError, RedisJobStore, connect

HEADROOM = 2 * 1024 * 1024
LIMIT = 15_000  # enqueues of ~1.3 KB each: about ten times what the headroom holds


def fill(store: RedisJobStore) -> tuple[list[str], JobStoreError | None]:
    ids: list[str] = []
    for n in range(LIMIT):
        try:
            ids.append(
                store.enqueue(EnqueueRequest(name="Fill", payload={"n": n, "pad": "x" * 200})).id
            )
        except JobStoreError as exc:
            return ids, exc
    return ids, None


def limit_memory(client: Any, policy: str) -> None:
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", str(used + HEADROOM))
    client.config_set("maxmemory-policy", policy)


@pytest.mark.timeout(120)
def test_noeviction_refuses_enqueues_and_loses_nothing(private_redis: Any) -> None:
    server = private_redis()
    client = connect(server.url)
    store = RedisJobStore(client, prefix="oom")
    try:
        limit_memory(client, "noeviction")
        ids, error = fill(store)
        assert error is not None, "the server never filled up"
        assert "maxmemory" in str(error)
        assert len(ids) > 100
        client.config_set("maxmemory", "0")  # add memory
        assert all(store.get_job(job_id) is not None for job_id in ids)
        counts = {s: n for s, n in store.counts().items() if n}
        assert counts == recount(store)[0] == {"waiting": len(ids)}
    finally:
        store.close()
        client.close()


@pytest.mark.timeout(120)
def test_an_eviction_policy_silently_loses_acknowledged_jobs(private_redis: Any) -> None:
    server = private_redis()
    client = connect(server.url)
    store = RedisJobStore(client, prefix="lru")
    try:
        limit_memory(client, "allkeys-lru")
        ids, error = fill(store)
        client.config_set("maxmemory", "0")
        lost = [job_id for job_id in ids if store.get_job(job_id) is None]
        assert lost, "nothing was evicted"
        print(
            f"\nallkeys-lru: {len(ids)} enqueues returned, {len(lost)} of those jobs are gone; "
            f"counts() says {store.counts()['waiting']} waiting, first error {error}"
        )
    finally:
        store.close()
        client.close()


@pytest.mark.timeout(120)
def test_a_full_server_can_still_be_listed_and_drained_by_remove(private_redis: Any) -> None:
    server = private_redis()
    client = connect(server.url)
    store = RedisJobStore(client, prefix="full")
    try:
        limit_memory(client, "noeviction")
        ids, error = fill(store)
        assert error is not None
        assert len(store.list(limit=5).items) == 5  # the dashboard's job list
        assert store.remove(ids[0])  # an operator freeing space
    finally:
        client.config_set("maxmemory", "0")
        store.close()
        client.close()
