"""The async store on a Redis Cluster: the twin of a cluster store (``client_like`` builds
a ``redis.asyncio`` cluster client) runs the store's scripts (EVALSHA, routed by the hash
tag) and reads what the sync store writes, and the other way round."""

from __future__ import annotations

import asyncio
from typing import Any

from store import EnqueueRequest, Fail
from store.aio import AsyncRedisJobStore


def test_the_async_twin_of_a_cluster_store_serves_the_same_jobs(make_store: Any) -> None:
    sync = make_store()

    async def main() -> None:
        astore = AsyncRedisJobStore.twin_of(sync)
        try:
            await astore.start()
            assert astore._scripts is not None and astore._scripts.mode == "scripts"
            results = await astore.enqueue_many(
                [EnqueueRequest(name="N", queue="q", payload=i) for i in range(3)]
            )
            single = await astore.enqueue(EnqueueRequest(name="N", queue="q", payload="x"))
            ids = [r.id for r in results] + [single.id]
            assert await astore.get_jobs(ids) == sync.get_jobs(ids)
            assert (await astore.list(queue="q")).items == sync.list(queue="q").items
            assert await astore.counts("q") == sync.counts("q")
            claimed = sync.claim("q", ["N"], token="t")
            sync.ack(claimed.job.id, "t", Fail({"why": 1}))
            await astore.retry(claimed.job.id)
            assert sync.get_job(claimed.job.id).state == "waiting"
            assert await astore.get_attempts(claimed.job.id) == sync.get_attempts(claimed.job.id)
            assert await astore.events("0", count=1000) == sync.events("0", count=1000)
            await astore.pause("q")
            assert sync.paused_queues() == ["q"]
        finally:
            await astore.aclose()

    asyncio.run(main())
