"""bullmq (the official Python port) driver: `queue.add()` loop, `queue.addBulk()` 1000/call,
and a `Worker(concurrency=1)` timed from its creation to the N-th "completed" event.

Run from bench/.venv-peers: python -m bench.peers.bullmq_bench --redis-url URL --n N --mode MODE
All bullmq keys live under its `prefix` option (--prefix), so it can share a server.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from importlib.metadata import version
from typing import Any

from bench.common import BULK_SIZE, Timer, chunks, emit, fail, parse_args, payload, quiet_logging

QUEUE = "default"


def _extra(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--concurrency", type=int, default=1, help="Worker concurrency")


async def run(argv: list[str] | None) -> None:
    args = parse_args("bullmq", argv, _extra)
    quiet_logging()
    from bullmq import Queue, Worker

    opts: dict[str, Any] = {"connection": args.redis_url, "prefix": args.prefix}
    queue = Queue(QUEUE, opts)
    timer = Timer(args)
    n = args.n

    async def enqueue_bulk() -> None:
        for part in chunks(n, BULK_SIZE):
            await queue.addBulk([{"name": "noop", "data": payload(i)} for i in part])

    if args.mode == "enqueue-single":
        timer.start()
        for i in range(n):
            await queue.add("noop", payload(i))
        timer.stop()
        variant, api = "single", "await queue.add('noop', data) sequential"
    elif args.mode == "enqueue-bulk":
        timer.start()
        await enqueue_bulk()
        timer.stop()
        variant, api = (
            "addBulk",
            f"await queue.addBulk([...]), {BULK_SIZE}/call (MULTI pipeline of addJob scripts)",
        )
    else:
        await enqueue_bulk()
        done = asyncio.Event()
        completed = [0]
        failed: list[str] = []
        finished_at = [0.0]

        async def process(job: Any, token: str) -> None:
            return None

        def on_completed(job: Any, result: Any) -> None:
            completed[0] += 1
            if completed[0] >= n:
                finished_at[0] = time.perf_counter()
                done.set()

        def on_failed(job: Any, err: Any) -> None:
            failed.append(str(err))

        timer.start()
        worker = Worker(QUEUE, process, {**opts, "concurrency": args.concurrency})
        worker.on("completed", on_completed)
        worker.on("failed", on_failed)
        try:
            await asyncio.wait_for(done.wait(), timeout=max(60.0, n / 50))
        except TimeoutError:
            fail(
                f"bullmq: only {completed[0]} of {n} jobs completed before the time-out "
                f"({len(failed)} failed)"
            )
        timer.stop()
        # The N-th event is the end; timer.stop() also ran the commandstats probe.
        timer.seconds = finished_at[0] - timer.started
        await worker.close(force=True)
        if failed:
            fail(f"bullmq: {len(failed)} jobs failed, first: {failed[0]}")
        variant, api = (
            f"c{args.concurrency}",
            f"Worker(..., concurrency={args.concurrency}) until N-th 'completed' event",
        )
    await queue.close()
    emit("bullmq", args, timer, variant=variant, api=api, version=version("bullmq"))


def main(argv: list[str] | None = None) -> None:
    asyncio.run(run(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
