"""celery driver (opt-in, throughput.py --with-celery): `task.delay()` loop,
`group(...).apply_async()` 1000/group, and an in-process solo-pool worker.

Run from bench/.venv-peers: python -m bench.peers.celery_bench --redis-url URL --n N --mode MODE
Every kombu key is prefixed with "<prefix>:" (kombu's `global_keyprefix` transport option), so
celery can share a server. Processing uses the solo pool (one process, concurrency 1: the
fastest pool for a no-op in peer-bench.md) with celery's other defaults, timed from the
`worker_ready` signal to the N-th task body run, as peer-bench.md does. There is no result
backend (celery's default). The worker is started in-process with `app.Worker(...)` instead of
a `celery worker` child process, so the "incl. process launch" column of peer-bench.md is not
reproduced.
"""

from __future__ import annotations

import contextlib
import sys
import time
from importlib.metadata import version
from typing import Any

from bench.common import BULK_SIZE, Timer, chunks, emit, fail, parse_args, payload, quiet_logging


def main(argv: list[str] | None = None) -> None:
    args = parse_args("celery", argv)
    quiet_logging()
    from celery import Celery, group
    from celery.exceptions import WorkerShutdown
    from celery.signals import worker_ready

    app = Celery("bench", broker=args.redis_url, set_as_current=True)
    app.conf.update(
        broker_transport_options={"global_keyprefix": f"{args.prefix}:"},
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
    )
    n = args.n
    counter = [0]
    marks = {"ready": 0.0, "done": 0.0}

    @app.task(name="noop")
    def noop(data: dict[str, Any]) -> None:
        counter[0] += 1
        if counter[0] >= n:
            marks["done"] = time.perf_counter()
            # Raised in the solo pool's (only) thread: ends Worker.start() like a warm shutdown.
            raise WorkerShutdown()

    timer = Timer(args)

    def enqueue_bulk() -> None:
        for part in chunks(n, BULK_SIZE):
            group(noop.s(payload(i)) for i in part).apply_async()

    if args.mode == "enqueue-single":
        timer.start()
        for i in range(n):
            noop.delay(payload(i))
        timer.stop()
        variant, api = "single", "task.delay(payload) loop"
    elif args.mode == "enqueue-bulk":
        timer.start()
        enqueue_bulk()
        timer.stop()
        variant, api = (
            "group",
            f"celery.group(...).apply_async(), {BULK_SIZE}/group (not pipelined)",
        )
    else:
        enqueue_bulk()

        @worker_ready.connect
        def _ready(**_: Any) -> None:
            marks["ready"] = time.perf_counter()
            timer.stats.start()

        worker = app.Worker(pool="solo", concurrency=1, loglevel="WARNING", quiet=True)
        with contextlib.suppress(WorkerShutdown, SystemExit):
            worker.start()
        timer.stats.stop()
        if counter[0] < n or not marks["ready"]:
            fail(f"celery: worker stopped after {counter[0]} of {n} tasks")
        timer.started = marks["ready"]
        timer.seconds = marks["done"] - marks["ready"]
        variant, api = "solo", "app.Worker(pool='solo'), worker_ready -> N-th task body"
    emit("celery", args, timer, variant=variant, api=api, version=version("celery"))


if __name__ == "__main__":
    main(sys.argv[1:])
