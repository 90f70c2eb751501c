"""arq driver: sequential `enqueue_job()`, and a burst `Worker` (max_jobs=10, poll_delay=0.01).

Run from bench/.venv-arq (arq 0.28.0 needs redis<6):
    python -m bench.peers.arq_bench --redis-url URL --n N --mode MODE
arq has no bulk enqueue API; the process mode pre-fills with 50 `enqueue_job()` coroutines in
flight (its fastest way, peer-bench.md "conc50"). arq's keys are hard-coded ("arq:job:",
"arq:result:", "arq:in-progress:", "arq:retry:", the shared "arq:abort" zset), so --prefix only
names the queue; throughput.py refuses arq on a shared server.
"""

from __future__ import annotations

import asyncio
import sys
from importlib.metadata import version
from typing import Any

from bench.common import Timer, emit, fail, parse_args, payload, quiet_logging, unsupported

CONCURRENCY = 50


async def noop(ctx: dict[str, Any], data: dict[str, Any]) -> None:
    return None


async def run(argv: list[str] | None) -> None:
    args = parse_args("arq", argv)
    quiet_logging()
    from arq import Worker, create_pool
    from arq.connections import RedisSettings

    if args.mode == "enqueue-bulk":
        unsupported("arq", args.mode, "arq has no bulk enqueue API")
    queue_name = f"{args.prefix}:arq:queue"
    pool = await create_pool(RedisSettings.from_dsn(args.redis_url), default_queue_name=queue_name)
    timer = Timer(args)
    n = args.n

    if args.mode == "enqueue-single":
        timer.start()
        for i in range(n):
            await pool.enqueue_job("noop", payload(i))
        timer.stop()
        await pool.aclose()
        variant, api = "single", "await pool.enqueue_job('noop', payload) sequential"
    else:

        async def producer(start: int) -> None:
            for i in range(start, n, CONCURRENCY):
                await pool.enqueue_job("noop", payload(i))

        await asyncio.gather(*(producer(s) for s in range(CONCURRENCY)))
        worker = Worker(
            functions=[noop],  # type: ignore[list-item]
            redis_pool=pool,
            queue_name=queue_name,
            burst=True,
            max_jobs=10,
            poll_delay=0.01,
            handle_signals=False,
        )
        timer.start()
        await worker.main()
        timer.stop()
        if worker.jobs_complete != n:
            fail(
                f"arq: expected {n} completed jobs, worker reports {worker.jobs_complete} "
                f"({worker.jobs_failed} failed)"
            )
        await worker.close()  # also closes the pool
        variant, api = "mj10_pd10", "Worker(burst=True, max_jobs=10, poll_delay=0.01).main()"
    emit("arq", args, timer, variant=variant, api=api, version=version("arq"))


def main(argv: list[str] | None = None) -> None:
    asyncio.run(run(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
