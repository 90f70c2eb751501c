"""Our store's driver: `enqueue()` loop, `enqueue_many()` 1000/call, and the worker.

Run with the project's interpreter and the repo on the path (throughput.py does this):
    python -m bench.ours --redis-url URL --n N --mode enqueue-single|enqueue-bulk|process
    python -m bench.ours --check     # exit 0 if `store` is importable, 3 with the reason if not

"process" drains N pre-enqueued no-op jobs with `store.Worker` (the runtime behind
`manage.py runworker`) in burst mode, in this process, like the peers' in-process workers.
"""

from __future__ import annotations

import sys
from typing import Any

from bench.common import (
    BULK_SIZE,
    EXIT_NOT_IMPORTABLE,
    Timer,
    chunks,
    emit,
    fail,
    parse_args,
    payload,
    quiet_logging,
)

QUEUE = "default"
NAME = "noop"
LOCK_MS = 30_000
WORKER = "w1"
WORKER_CONCURRENCY = 8


def _noop(payload: Any) -> None:
    return None


def import_store() -> Any:
    """Import `store` or stop with a message that says what is missing."""
    try:
        import store
    except Exception as exc:  # any import-time failure means "not ready"
        fail(
            f"ours: the project's `store` package is not importable yet "
            f"({type(exc).__name__}: {exc}).\n"
            "ours: run throughput.py with --skip-ours for a peers-only run, "
            "or finish store/ first.",
            EXIT_NOT_IMPORTABLE,
        )
    missing = [
        n
        for n in ("connect", "RedisJobStore", "EnqueueRequest", "Complete", "Claimed")
        if not hasattr(store, n)
    ]
    if missing:
        fail(
            f"ours: `store` lacks {', '.join(missing)}; run with --skip-ours until it has them.",
            EXIT_NOT_IMPORTABLE,
        )
    return store


def main(argv: list[str]) -> None:
    if argv[:1] == ["--check"]:
        import_store()
        print("ours: store is importable")
        return
    args = parse_args("ours", argv)
    quiet_logging()
    store = import_store()
    client = store.connect(args.redis_url)
    jobs = store.RedisJobStore(client, prefix=args.prefix)
    request = store.EnqueueRequest
    timer = Timer(args)
    n = args.n

    def enqueue_bulk() -> None:
        for part in chunks(n, BULK_SIZE):
            jobs.enqueue_many([request(name=NAME, queue=QUEUE, payload=payload(i)) for i in part])

    if args.mode == "enqueue-single":
        timer.start()
        for i in range(n):
            jobs.enqueue(request(name=NAME, queue=QUEUE, payload=payload(i)))
        timer.stop()
        variant, api = "single", "jobs.enqueue(EnqueueRequest(...)) loop"
    elif args.mode == "enqueue-bulk":
        timer.start()
        enqueue_bulk()
        timer.stop()
        variant, api = (
            "enqueue_many",
            f"jobs.enqueue_many([...]), {BULK_SIZE}/call (500/script inside)",
        )
    else:
        enqueue_bulk()
        # The same Worker `manage.py runworker` runs, with its defaults (prefetch "auto"),
        # draining sync no-op handlers (the peers' tasks are plain functions too) in burst mode:
        # it returns when the queue is empty.
        registry = store.StoreRegistry()
        registry.register(jobs)
        noop = store.Job(NAME, queue=QUEUE, registry=registry, handler=_noop)
        worker = store.Worker(
            jobs,
            [noop],
            concurrency=WORKER_CONCURRENCY,
            registry=registry,
            burst=True,
        )
        timer.start()
        worker.run(install_signal_handlers=False)
        timer.stop()
        done = jobs.counts()["completed"]
        if done != n:
            fail(f"ours: the worker completed {done} of {n} jobs")
        variant, api = (
            f"Worker c{WORKER_CONCURRENCY} prefetch auto",
            f"store.Worker(concurrency={WORKER_CONCURRENCY}, burst=True).run(), defaults (prefetch"
            ' "auto"), sync no-op handler (what manage.py runworker runs)',
        )
    jobs.close()
    emit("ours", args, timer, variant=variant, api=api, version="working tree")


if __name__ == "__main__":
    main(sys.argv[1:])
