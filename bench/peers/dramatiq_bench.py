"""dramatiq driver: `actor.send()` loop, `group([...]).run()` 1000/group, an in-process `Worker`.

Run from bench/.venv-peers: python -m bench.peers.dramatiq_bench --redis-url URL --n N --mode MODE
All of dramatiq's keys live under the broker namespace (--prefix), so it can share a server.
Processing is timed from `Worker.start()` until a counter in the actor reaches N
(peer-bench.md); worker_threads defaults to 10, the fastest configuration listed there
(8 is the CLI default: --threads 8).
"""

from __future__ import annotations

import argparse
import sys
import threading
from importlib.metadata import version
from typing import Any

from bench.common import BULK_SIZE, Timer, chunks, emit, fail, parse_args, payload, quiet_logging

QUEUE = "default"


def _extra(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=10, help="Worker(worker_threads=...)")


def main(argv: list[str] | None = None) -> None:
    args = parse_args("dramatiq", argv, _extra)
    quiet_logging()
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    broker = RedisBroker(url=args.redis_url, namespace=args.prefix)
    dramatiq.set_broker(broker)
    n = args.n
    lock = threading.Lock()
    done = threading.Event()
    counter = [0]

    def noop(data: dict[str, Any]) -> None:
        with lock:
            counter[0] += 1
            if counter[0] >= n:
                done.set()

    actor = dramatiq.actor(noop, actor_name="noop", queue_name=QUEUE, broker=broker)
    timer = Timer(args)

    def enqueue_bulk() -> None:
        for part in chunks(n, BULK_SIZE):
            dramatiq.group([actor.message(payload(i)) for i in part], broker=broker).run()

    if args.mode == "enqueue-single":
        timer.start()
        for i in range(n):
            actor.send(payload(i))
        timer.stop()
        variant, api = "single", "actor.send(payload) loop"
    elif args.mode == "enqueue-bulk":
        timer.start()
        enqueue_bulk()
        timer.stop()
        variant, api = (
            "group",
            f"dramatiq.group([...]).run(), {BULK_SIZE}/group (loops enqueue, not pipelined)",
        )
    else:
        enqueue_bulk()
        worker = dramatiq.Worker(broker, worker_threads=args.threads)
        timer.start()
        worker.start()
        finished = done.wait(timeout=max(60.0, n / 50))
        timer.stop()
        worker.stop()
        if not finished:
            fail(f"dramatiq: only {counter[0]} of {n} jobs ran before the time-out")
        variant, api = (
            f"t{args.threads}",
            f"Worker(broker, worker_threads={args.threads}) until N ran",
        )
    broker.close()
    emit("dramatiq", args, timer, variant=variant, api=api, version=version("dramatiq"))


if __name__ == "__main__":
    main(sys.argv[1:])
