"""Redis restarts under load: nothing acknowledged is lost, workers and producers reconnect.

A redis-server of the test's own runs with ``--appendonly yes --appendfsync always``.  A
producer thread enqueues continuously with explicit ids (``r-00000``, ``r-00001``, ...) and
records every id whose ``enqueue`` RETURNED; on ``JobStoreError`` it retries the same id, so a
retry of an enqueue that did land is a harmless duplicate.  A worker (in a thread) processes.
Mid-load the server is stopped (``SHUTDOWN``, or SIGKILL to simulate a crash) and started again
on the same dir and port.  Then: every returned id is present and completes, exactly once in
the ledger; ``counts()`` equals a recount; the dashboard's cached service-layer store keeps
working.  The worker's reconnect time (server answering again -> first successful store call
of the worker) is printed.

The 6.2 variant runs the embedded Redis 6.2 binary, where the store uses EVALSHA scripts
rather than a Function library: a restarted server has an empty script cache (NOSCRIPT path).
The 12 s outage outlasts the worker's store-call retry budget (~10 s), so the worker drops
acks and claims and must carry on (stall recovery re-runs what it held).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from bench.chaos import recount
from store import (
    EnqueueRequest,
    Job,
    JobStoreError,
    RedisJobStore,
    StoreRegistry,
    Worker,
    connect,
)
from store.embedded import redis_server_binary
from tests.runtime.harness import eventually, running

PREFIX = "restart"
#: Enqueues that must have returned before the stop, and after the restart.
BEFORE, AFTER = 300, 300


class Producer(threading.Thread):
    """Enqueues ``r-<n>`` forever; an id is recorded once its enqueue returned."""

    def __init__(self, store: RedisJobStore) -> None:
        super().__init__(name="restart-producer", daemon=True)
        self.store = store
        self.returned: list[tuple[str, float]] = []
        self.errors = 0
        self.stop = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        n = 0
        try:
            while not self.stop.is_set():
                job_id = f"r-{n:05d}"
                while True:
                    try:
                        self.store.enqueue(
                            EnqueueRequest(name="Restart", id=job_id, payload={"n": n})
                        )
                        break
                    except JobStoreError:
                        # Same explicit id again: if the lost call did land, this is a dup.
                        self.errors += 1
                        if self.stop.wait(0.05):
                            return
                self.returned.append((job_id, time.monotonic()))
                n += 1
                time.sleep(0.002)
        except BaseException as exc:  # reported by the test
            self.failure = exc


def instrument(store: RedisJobStore, names: tuple[str, ...]) -> list[float]:
    """Record the monotonic time of every successful call of ``names`` on this store object."""
    successes: list[float] = []

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            successes.append(time.monotonic())
            return result

        return call

    for name in names:
        setattr(store, name, wrap(getattr(store, name)))
    return successes


#: variant -> (binary, how the server stops, seconds it stays down).  The long outage outlasts
#: the worker's store-call retry budget (~10 s): dropped acks must come back via stall recovery.
VARIANTS = {
    "redis7-shutdown": (None, "shutdown", 1.0),
    "redis7-sigkill": (None, "sigkill", 1.0),
    "redis6.2-sigkill": ("embedded", "sigkill", 1.0),
    "redis7-sigkill-12s-outage": (None, "sigkill", 12.0),
}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_restart_keeps_every_acknowledged_enqueue_and_everyone_reconnects(
    variant: str, private_redis: Any, settings: Any
) -> None:
    from mqadmin import services

    binary, how, outage_s = VARIANTS[variant]
    server = private_redis(
        binary=redis_server_binary() if binary == "embedded" else None,
        appendonly=True,
        appendfsync="always",
    )
    producer_client, worker_client = connect(server.url), connect(server.url)
    producer_store = RedisJobStore(producer_client, prefix=PREFIX)
    worker_store = RedisJobStore(worker_client, prefix=PREFIX)
    registry = StoreRegistry()
    registry.register(worker_store)
    runs: Counter[str] = Counter()
    lock = threading.Lock()

    def handle(payload: dict[str, int]) -> int:
        from store import current_job

        with lock:
            runs[current_job().job_id] += 1
        return payload["n"]

    job = Job("Restart", handler=handle, registry=registry)
    successes = instrument(worker_store, ("ack_and_claim_many", "extend_locks", "recover_stalled"))
    settings.MQ_STORES = {"restart": {"prefix": PREFIX, "url": server.url}}
    services.reset()
    producer = Producer(producer_store)
    try:
        dashboard = services.get_named_store("restart")
        assert dashboard.counts()["waiting"] == 0
        worker = Worker(
            worker_store,
            [job],
            concurrency=2,
            lock_duration_ms=3000,
            stalled_interval_ms=1000,
            poll_interval_ms=200,
            registry=registry,
        )
        with running(worker, stop_timeout=30):
            producer.start()
            eventually(lambda: len(producer.returned) >= BEFORE, timeout=60, message="load")
            eventually(lambda: sum(runs.values()) > 0, timeout=30, message="worker busy")
            stopped_at = time.monotonic()
            returned_before_stop = [job_id for job_id, at in producer.returned if at < stopped_at]
            if how == "shutdown":
                server.shutdown()  # AOF on: SHUTDOWN writes and fsyncs it first
            else:
                server.kill()
            time.sleep(outage_s)  # producer and worker see errors meanwhile
            server.start()
            up_at = server.started_at
            down_s = up_at - stopped_at

            # The dashboard's cached store keeps working (first call after the restart).
            first_call_error = None
            try:
                dashboard.counts()
            except JobStoreError as exc:
                first_call_error = exc
            eventually(lambda: dashboard.list(limit=5) is not None, timeout=30)
            assert services.get_named_store("restart") is dashboard

            eventually(
                lambda: len([1 for _, at in producer.returned if at > up_at]) >= AFTER,
                timeout=60,
                message="the producer carries on after the restart",
            )
            producer.stop.set()
            producer.join(30)
            returned = [job_id for job_id, _ in producer.returned]
            eventually(
                lambda: producer_store.counts()["completed"] >= len(returned),
                timeout=90,
                message="every acknowledged job completes",
            )
        reconnect = [t - up_at for t in successes if t >= up_at]
    finally:
        producer.stop.set()
        services.reset()
        for closable in (producer_store, worker_store, producer_client, worker_client):
            closable.close()
    assert producer.failure is None, producer.failure
    assert producer.errors > 0, "the producer never saw the outage"

    # Every id whose enqueue returned before the stop survived the restart ...
    for job_id in returned_before_stop:
        assert producer_store.get_job(job_id) is not None, f"{job_id} was lost by the restart"
    # ... and every returned id (before, during and after) completed exactly once.
    not_completed, twice = [], []
    for job_id in returned:
        record = producer_store.get_job(job_id)
        if record is None or record.state != "completed":
            not_completed.append((job_id, record and record.state))
            continue
        outcomes = [a.outcome for a in producer_store.get_attempts(job_id)]
        if outcomes.count("completed") != 1:
            twice.append((job_id, outcomes))
        assert runs[job_id] <= 1 + outcomes.count("stalled"), (job_id, runs[job_id], outcomes)
    assert not not_completed, not_completed[:10]
    assert not twice, twice[:10]
    counts = {s: n for s, n in producer_store.counts().items() if n}
    recounted, seen = recount(producer_store)
    assert counts == recounted == {"completed": len(returned)}
    assert seen == len(returned)
    assert first_call_error is None, (
        f"the dashboard's first call after the restart failed: {first_call_error}"
    )
    assert reconnect, "the worker never reached the store again"
    print(
        f"\n{variant}: {len(returned_before_stop)} jobs acknowledged before the stop, "
        f"{len(returned)} in all; server down {down_s:.2f} s; producer saw {producer.errors} "
        f"JobStoreError(s); worker reconnect time {reconnect[0] * 1000:.0f} ms "
        f"(server up -> first successful worker store call); "
        f"duplicate runs {sum(n - 1 for n in runs.values() if n > 1)}"
    )
