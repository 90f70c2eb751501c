"""Latency from enqueue to handler start with an idle worker (median, p99).

    .venv/bin/python -m bench.latency [--jobs 2000] [--gap-ms 2]

A private redis-server (no persistence) on a free loopback port; one worker
process (`store.Worker`, the runtime of `manage.py runworker`, default options:
concurrency 1, prefetch 1) idles on the queue; this process enqueues one job
at a time (each after the previous one started, plus a small gap so the worker
is idle again) and the handler records when it started.  The wake-up path is
the one production uses: an enqueue publishes on the store's wake channel and
the idle taker's pending wait resolves.  Target: p99 under 10 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.throughput import CpuPlan, PrivateRedis, find_redis_server  # noqa: E402

WORKER = textwrap.dedent(
    """
    import sys, time
    import redis
    from store import Job, RedisJobStore, StoreRegistry, Worker, connect
    client = connect(sys.argv[1])
    jobs = RedisJobStore(client, prefix="lat")
    registry = StoreRegistry(); registry.register(jobs)
    marks = redis.Redis.from_url(sys.argv[1])

    def handler(payload):
        marks.rpush("lat:started", f"{payload['i']}:{time.time_ns()}")

    Worker(jobs, [Job("ping", registry=registry, handler=handler)], registry=registry).run()
    """
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--gap-ms", type=float, default=2.0, help="idle time between jobs")
    args = parser.parse_args()

    from store import EnqueueRequest, RedisJobStore, connect

    binary = find_redis_server()
    if binary is None:
        sys.exit("latency: no redis-server binary found")
    server = PrivateRedis(binary, CpuPlan("none"))
    server.start()
    worker = None
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        worker = subprocess.Popen([sys.executable, "-c", WORKER, server.url], env=env, cwd=ROOT)
        raw = redis.Redis.from_url(server.url, decode_responses=True)
        jobs = RedisJobStore(connect(server.url), prefix="lat")
        deadline = time.monotonic() + 30
        while not raw.hlen("{lat}:workers") and time.monotonic() < deadline:
            time.sleep(0.05)  # the worker announces itself once it is serving
        time.sleep(0.5)
        latencies: list[float] = []
        for i in range(args.jobs):
            sent = time.time_ns()
            jobs.enqueue(EnqueueRequest(name="ping", payload={"i": i}))
            reply = raw.blpop(["lat:started"], timeout=10)
            if reply is None:
                sys.exit(f"latency: job {i} did not start within 10 s")
            started = int(reply[1].split(":")[1])
            latencies.append((started - sent) / 1e6)
            time.sleep(args.gap_ms / 1000)
        latencies.sort()
        p50 = statistics.median(latencies)
        p99 = latencies[int(len(latencies) * 0.99) - 1]
        print("### Enqueue -> handler start, idle worker")
        print()
        print("| jobs | median ms | p99 ms | max ms | target p99 < 10 ms |")
        print("|---:|---:|---:|---:|---|")
        verdict = "PASS" if p99 < 10 else "FAIL"
        print(
            f"| {len(latencies):,} | {p50:.2f} | {p99:.2f} | {latencies[-1]:.2f} | **{verdict}** |"
        )
        jobs.close()
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(timeout=15)
        server.stop()


if __name__ == "__main__":
    main()
