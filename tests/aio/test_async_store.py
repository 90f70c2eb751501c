"""The async store beside the sync one: the same records, concurrent awaits under ASGI,
the async producer verbs, construction and its errors."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import replace
from typing import Any

import pytest

from store import (
    BackoffPolicy,
    EnqueueRequest,
    Fail,
    InvalidRequestError,
    Job,
    JobFailedError,
    JobNotFoundError,
    KeepPolicy,
    StoreRegistry,
    Worker,
)
from store.aio import AsyncRedisJobStore, connect
from store.clock import system_clock
from store.layout import UnknownLayoutError, layout_key
from tests.aio.conftest import AsyncFacade, LoopThread
from tests.runtime.harness import running

RICH = EnqueueRequest(
    name="Rich",
    queue="q",
    payload={"text": "h\u00e9llo", "items": [1, 2.5, None, True]},
    metadata={"tenant": "t1", "kind": "x"},
    priority=3,
    attempts_max=3,
    backoff=BackoffPolicy("exponential", 100),
    keep=KeepPolicy.coerce({"count": 5}),
    delay_ms=5_000,
    group="g1",
)


def test_the_async_stores_records_equal_the_sync_stores(store: AsyncFacade, clock: Any) -> None:
    """One request through each store (same clock): the records differ only in their ids;
    each store reads the other's writes alike, ledgers and pages included."""
    by_async = store.enqueue(RICH)
    by_sync = store.sync.enqueue(RICH)
    a, s = store.get_job(by_async.id), store.sync.get_job(by_sync.id)
    assert a is not None and s is not None
    assert replace(a, id=s.id) == s
    assert store.get_job(by_sync.id) == s and store.sync.get_job(by_async.id) == a
    # Through a run that fails once: the ledgers read alike from both stores.
    for job_id in (by_async.id, by_sync.id):
        store.promote(job_id)
        claimed = store.sync.claim("q", ["Rich"], token=f"t-{job_id}")
        store.sync.ack(claimed.job.id, f"t-{claimed.job.id}", Fail({"why": "x"}))
    ledger = store.get_attempts(by_async.id)
    assert ledger == store.sync.get_attempts(by_async.id)
    assert ledger == store.get_attempts(by_sync.id) == store.sync.get_attempts(by_sync.id)
    assert [(x.attempt, x.outcome, x.exit) for x in ledger] == [(1, "failed", {"why": "x"})]
    assert store.list(queue="q") == store.sync.list(queue="q")
    assert store.counts() == store.sync.counts() and store.counts("q") == store.sync.counts("q")
    assert store.get_jobs([by_sync.id, "nope"]) == store.sync.get_jobs([by_sync.id, "nope"])
    assert store.events("0", count=1000) == store.sync.events("0", count=1000)
    assert store.newest_events(3) == store.sync.newest_events(3)
    assert store.newest_events(1000) == store.sync.events("0", count=1000)


def test_fifty_concurrent_aexecutes_through_an_asgi_app(make_store: Any) -> None:
    """An ASGI app answers 50 requests at once, each awaiting a job a worker thread runs:
    all 50 waits are in flight together (the jobs are held until all are enqueued), and
    each request gets its own job's result."""
    facade = make_store(clock=system_clock)
    registry = StoreRegistry()
    registry.register(facade.sync)
    gate = threading.Event()

    def double(payload: dict[str, int]) -> int:
        gate.wait(10)
        return payload["n"] * 2

    job = Job("Double", registry=registry, handler=double)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        n = int(scope["query_string"].decode())
        result = await job.aexecute({"n": n}, timeout_s=20)
        body = json.dumps({"n": n, "result": result}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    async def request(n: int) -> dict[str, Any]:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": "/", "query_string": str(n).encode()}
        await app(scope, receive, send)
        assert sent[0]["status"] == 200
        return dict(json.loads(sent[1]["body"]))

    async def open_gate_when_all_are_waiting() -> None:
        astore = await registry.aget(facade.sync.store_key)
        while True:
            counts = await astore.counts()
            if counts["waiting"] + counts["active"] == 50:
                gate.set()
                return
            await asyncio.sleep(0.01)

    async def main() -> list[dict[str, Any]]:
        try:
            *answers, _ = await asyncio.gather(
                *(request(n) for n in range(50)), open_gate_when_all_are_waiting()
            )
            return answers
        finally:
            await registry.aclose_loop()

    with running(Worker(facade.sync, [job], registry=registry, concurrency=4)):
        answers = asyncio.run(main())
    assert answers == [{"n": n, "result": 2 * n} for n in range(50)]
    assert facade.sync.counts()["completed"] == 50


def test_job_async_verbs_and_the_registry(make_store: Any) -> None:
    facade = make_store(clock=system_clock)
    registry = StoreRegistry()
    registry.register(facade.sync)

    def fail(payload: Any) -> None:
        raise ValueError("no")

    good = Job("Good", registry=registry, handler=lambda p: {"got": p})
    bad = Job("Bad", registry=registry, handler=fail)

    async def main() -> None:
        first = await registry.aget(facade.sync.store_key)
        assert await registry.aget(facade.sync.store_key) is first  # one per loop
        job_id = await good.aenqueue([1, 2], job_id="fixed")
        assert job_id == "fixed"
        assert (await good.aenqueue_result([1, 2], job_id="fixed")).duplicate
        with pytest.raises(InvalidRequestError, match="on_commit"):
            await good.aenqueue(1, on_commit=True)
        assert await good.aawait_result(job_id, timeout_s=20) == {"got": [1, 2]}
        assert await good.aexecute("x", timeout_s=20) == {"got": "x"}
        with pytest.raises(JobFailedError):
            await bad.aexecute(None, timeout_s=20)
        with pytest.raises(JobNotFoundError):
            await good.aawait_result("missing", timeout_s=1)
        with pytest.raises(TimeoutError):
            await good.aawait_result(await good.aenqueue(0, delay_ms=60_000), timeout_s=0.2)
        with pytest.raises(TimeoutError):
            await good.aawait_result(
                await good.aenqueue(0, delay_ms=60_000), poll_schedule=[0.01, 0.01]
            )
        await registry.aclose_loop()

    with running(Worker(facade.sync, [good, bad], registry=registry)):
        asyncio.run(main())


def test_a_registered_async_store_serves_aget(loop_thread: LoopThread, store: AsyncFacade) -> None:
    registry = StoreRegistry()
    registry.register_async(store.astore)

    async def main() -> AsyncRedisJobStore:
        return await registry.aget(store.astore.store_key)

    assert loop_thread.run(main()) is store.astore


def test_construction_checks_options_and_the_layout(
    loop_thread: LoopThread, async_client: Any, redis_client: Any, prefix: str
) -> None:
    with pytest.raises(InvalidRequestError):
        AsyncRedisJobStore(async_client, prefix=prefix, history_ttl=-1)
    with pytest.raises(InvalidRequestError):
        AsyncRedisJobStore(async_client, prefix="")
    redis_client.set(layout_key(AsyncRedisJobStore(async_client, prefix=prefix).keys), "99")
    lazy = AsyncRedisJobStore(async_client, prefix=prefix)
    with pytest.raises(UnknownLayoutError):
        loop_thread.run(lazy.counts())  # the first operation starts the store
    with pytest.raises(UnknownLayoutError):
        loop_thread.run(AsyncRedisJobStore.open(async_client, prefix=prefix))


def test_connect_refuses_bad_urls_and_reports_unreachable_servers(loop_thread: LoopThread) -> None:
    from store import JobStoreError

    with pytest.raises(InvalidRequestError):
        loop_thread.run(connect("http://localhost"))
    with pytest.raises(JobStoreError, match="cannot connect"):
        loop_thread.run(connect("redis://127.0.0.1:1/0", socket_connect_timeout=0.5))


def test_redis_errors_reach_the_caller_as_job_store_errors(
    loop_thread: LoopThread, store: AsyncFacade, redis_client: Any
) -> None:
    from store import JobStoreError

    result = store.enqueue(RICH)
    redis_client.set(store.keys.job(result.id), "not a hash")
    with pytest.raises(JobStoreError, match="get_job"):
        store.get_job(result.id)
