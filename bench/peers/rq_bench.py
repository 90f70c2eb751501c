"""rq driver: `q.enqueue()` loop, `q.enqueue_many()` 1000/call, `SimpleWorker.work(burst=True)`.

Run from bench/.venv-peers: python -m bench.peers.rq_bench --redis-url URL --n N --mode MODE
rq's keys are hard-coded under "rq:" (plus server-wide sets such as rq:queues and rq:workers),
so --prefix only names the queue; throughput.py refuses rq on a shared server.
"""

from __future__ import annotations

import sys
from importlib.metadata import version

from bench.common import BULK_SIZE, Timer, chunks, emit, fail, parse_args, payload, quiet_logging
from bench.peers.tasks import noop


def main(argv: list[str] | None = None) -> None:
    args = parse_args("rq", argv)
    quiet_logging()
    from redis import Redis
    from rq import Queue, SimpleWorker

    conn = Redis.from_url(args.redis_url)  # rq needs bytes replies (no decode_responses)
    queue = Queue(args.prefix, connection=conn)
    timer = Timer(args)
    n = args.n

    def enqueue_bulk() -> None:
        for part in chunks(n, BULK_SIZE):
            queue.enqueue_many([Queue.prepare_data(noop, args=(payload(i),)) for i in part])

    if args.mode == "enqueue-single":
        timer.start()
        for i in range(n):
            queue.enqueue(noop, payload(i))
        timer.stop()
        variant, api = "single", "q.enqueue(noop, payload) loop"
    elif args.mode == "enqueue-bulk":
        timer.start()
        enqueue_bulk()
        timer.stop()
        variant, api = (
            "enqueue_many",
            f"q.enqueue_many([Queue.prepare_data(...)]), {BULK_SIZE}/call (one pipeline)",
        )
    else:
        enqueue_bulk()
        worker = SimpleWorker([queue], connection=conn)
        timer.start()
        worker.work(burst=True, logging_level="WARNING")
        timer.stop()
        done = queue.finished_job_registry.count
        if done != n or queue.count:
            fail(
                f"rq: expected {n} finished jobs, registry has {done}, "
                f"{queue.count} left in the queue"
            )
        variant, api = "SimpleWorker", "SimpleWorker.work(burst=True) (no fork)"
    emit("rq", args, timer, variant=variant, api=api, version=version("rq"))


if __name__ == "__main__":
    main(sys.argv[1:])
