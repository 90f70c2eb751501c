"""List paging and index rebuild at 10k and 1M jobs, on a private redis-server.

    .venv/bin/python -m bench.list_bench                  # 10k and 1M (~1.5 min on 2 cores)
    .venv/bin/python -m bench.list_bench --sizes 10000    # quick look

Per size: seed jobs with ``enqueue_many`` (chunks of 1,000, several chunks in
flight from a thread pool, each chunk on its own millisecond: a burst tie group
of 1,000 rows), spread over 20 names and 5 queues, then finish a share of them
(claim + ack: 80 % complete, 20 % fail) so the ``finished:<state>`` zsets are
not trivially small.  Then four 50-row page queries (by name, by queue, by
state ordered by finished_at, unfiltered), each timed over 200 calls at random
cursors from the deeper half of a first pass.  Finally a full ``reindex`` of the
name index at the largest size: rows/s, the longest client-side call, and the
server's SLOWLOG (threshold 10 ms) during the rebuild.

Targets: every query's median at the largest size within 1.5x of the smallest
size's and under 5 ms; the longest single Redis call of the rebuild under 50 ms.
The table goes to stdout, progress to stderr; exit status 1 if a target fails.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import redis

from store import Claimed, Complete, EnqueueRequest, Fail, RedisJobStore, connect
from store.indexes import reindex

NAMES = tuple(f"job{n:02d}" for n in range(20))
QUEUES = tuple(f"q{n}" for n in range(5))
CHUNK = 1000  # jobs per enqueue_many call
IN_FLIGHT = 4  # enqueue_many calls running at once (client-side pipelining by threads)
FINISH_MAX = 20_000  # jobs claimed + acked per size (one by one is slow; a share suffices)
PAGE = 50
CALLS = 200
WARMUP = 10
RATIO_TARGET = 1.5
MEDIAN_TARGET_MS = 5.0
LONGEST_CALL_TARGET_MS = 50.0
SLOWLOG_US = 10_000
SLOWLOG_KEEP = 1024
BASE_MS = 1_760_000_000_000

QUERIES: dict[str, dict[str, Any]] = {
    "by name": {"name": "job07"},
    "by queue": {"queue": "q3"},
    "by state": {"states": ["completed"], "order_by": "finished_at"},
    "unfiltered": {},
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- private server


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def private_redis(binary: str) -> Iterator[str]:
    """redis-server on a free loopback port, no persistence; shut down on exit."""
    tmpdir = tempfile.mkdtemp(prefix="list-bench-")
    proc: subprocess.Popen[bytes] | None = None
    port = 0
    try:
        for _ in range(3):  # the port may be taken between free_port() and bind
            port = free_port()
            proc = subprocess.Popen(
                [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", tmpdir,
                 "--logfile", os.path.join(tmpdir, "redis.log")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches us only; we shut it down
            )  # fmt: skip
            if _wait_ready(proc, port):
                break
        else:
            raise RuntimeError(f"could not start {binary} (see {tmpdir}/redis.log)")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(redis.RedisError):
                redis.Redis(host="127.0.0.1", port=port, socket_timeout=10).shutdown(nosave=True)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(tmpdir, ignore_errors=True)


def _wait_ready(proc: subprocess.Popen[bytes], port: int) -> bool:
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1)
    deadline = time.monotonic() + 10
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                client.ping()
                return True
            except redis.ConnectionError:
                time.sleep(0.05)
        return False
    finally:
        client.close()


# ---------------------------------------------------------------------- seeding


class StepClock:
    """Advances 1 ms per read: every enqueue_many chunk and every ack gets its own instant."""

    def __init__(self, start: int) -> None:
        self._ticks = itertools.count(start)
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return next(self._ticks)


def request(i: int) -> EnqueueRequest:
    return EnqueueRequest(
        name=NAMES[i % len(NAMES)],
        queue=QUEUES[(i // len(NAMES)) % len(QUEUES)],
        payload={"i": i, "to": f"user{i}@example.com"},
        metadata={"tenant": f"t{i % 50}"},
    )


def seed(store: RedisJobStore, size: int) -> float:
    """Insert ``size`` jobs; returns jobs/s."""
    started = time.perf_counter()

    def insert(start: int) -> int:
        batch = [request(i) for i in range(start, min(start + CHUNK, size))]
        return len(store.enqueue_many(batch))

    done = 0
    with ThreadPoolExecutor(IN_FLIGHT) as pool:
        for n in pool.map(insert, range(0, size, CHUNK)):
            done += n
            if done % 100_000 == 0:
                log(f"  seeded {done:,}/{size:,}")
    return size / (time.perf_counter() - started)


def finish_share(store: RedisJobStore, count: int) -> None:
    """Claim + ack ``count`` jobs over all queues (one thread per queue, ack_and_claim)."""

    def work(queue: str, quota: int) -> None:
        tokens = (f"{queue}-{n}" for n in itertools.count())
        token = next(tokens)
        result = store.claim(queue=queue, names=NAMES, token=token)
        for n in range(quota):
            assert isinstance(result, Claimed), f"{queue} ran dry"
            outcome = Fail({"n": n}) if n % 5 == 4 else Complete({"n": n})
            if n == quota - 1:
                store.ack(result.job.id, token, outcome)
                return
            next_token = next(tokens)
            result = store.ack_and_claim(
                result.job.id, token, outcome, queue=queue, names=NAMES, next_token=next_token
            )
            token = next_token

    per_queue = count // len(QUEUES)
    with ThreadPoolExecutor(len(QUEUES)) as pool:
        for future in [pool.submit(work, q, per_queue) for q in QUEUES]:
            future.result()


# ---------------------------------------------------------------------- measuring


@dataclass
class Timing:
    rows: int
    cursors: int
    samples_ms: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def p95(self) -> float:
        return statistics.quantiles(self.samples_ms, n=20, method="inclusive")[18]


def measure(store: RedisJobStore, options: dict[str, Any], expected_rows: int) -> Timing:
    """First pass to collect cursors, then CALLS pages of PAGE rows at random deep cursors."""
    pass_limit = min(500, max(PAGE, expected_rows // 500))
    cursors: list[str] = []
    rows = 0
    cursor = None
    while True:
        page = store.list(cursor=cursor, limit=pass_limit, **options)
        rows += len(page.items)
        if page.cursor is None:
            break
        cursor = page.cursor
        cursors.append(cursor)
    deep = cursors[len(cursors) // 2 :] or cursors or [None]  # type: ignore[list-item]
    rng = random.Random(7)
    timing = Timing(rows, len(deep))
    for n in range(WARMUP + CALLS):
        chosen = rng.choice(deep)
        started = time.perf_counter()
        page = store.list(cursor=chosen, limit=PAGE, **options)
        elapsed = (time.perf_counter() - started) * 1000
        assert page.items, "a deep cursor must still have rows after it"
        if n >= WARMUP:
            timing.samples_ms.append(elapsed)
    return timing


@dataclass
class RebuildStats:
    rows: int
    seconds: float
    calls: dict[str, list[float]]
    slowlog: list[tuple[int, str]]

    def longest(self) -> tuple[str, float]:
        name, worst = "", 0.0
        for op, samples in self.calls.items():
            if samples and max(samples) > worst:
                name, worst = op, max(samples)
        return name, worst


def timed_rebuild(store: RedisJobStore, client: Any) -> RebuildStats:
    """``reindex(kind="name")`` with every Redis call timed and the server's SLOWLOG read."""
    calls: dict[str, list[float]] = {}

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(op: str, *args: Any) -> Any:
            started = time.perf_counter()
            try:
                return method(op, *args)
            finally:
                label = op if method.__name__ == "_run" else args[0]
                calls.setdefault(label, []).append((time.perf_counter() - started) * 1000)

        return timed

    previous = client.config_get("slowlog-*")
    client.config_set("slowlog-log-slower-than", SLOWLOG_US)
    client.config_set("slowlog-max-len", SLOWLOG_KEEP)
    client.slowlog_reset()
    # Instance attributes shadow the methods for this store only (bench instrumentation).
    store._run = wrap(store._run)  # type: ignore[method-assign]
    store._command = wrap(store._command)  # type: ignore[method-assign]
    try:
        started = time.perf_counter()
        rows = reindex(store, "name")
        seconds = time.perf_counter() - started
    finally:
        del store._run, store._command
        entries = client.slowlog_get(SLOWLOG_KEEP)
        for key, value in previous.items():
            client.config_set(key, value)
    slowlog = [
        (int(e["duration"]), " ".join(str(a) for a in e.get("command", "").split()[:2]))
        for e in entries
    ]
    return RebuildStats(rows, seconds, calls, slowlog)


# ---------------------------------------------------------------------- main


def label(size: int) -> str:
    return f"{size // 1_000_000}M" if size % 1_000_000 == 0 else f"{size // 1000}k"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        default="10000,1000000",
        help="comma-separated job counts (default 10000,1000000)",
    )
    parser.add_argument("--redis-server", default=shutil.which("redis-server"))
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if not args.redis_server:
        parser.error("no redis-server on PATH (pass --redis-server)")

    results: dict[int, dict[str, Timing]] = {}
    rebuild: RebuildStats | None = None
    with private_redis(args.redis_server) as url:
        client = connect(url)
        version = client.info("server")["redis_version"]
        log(f"private redis-server {version} at {url}")
        for size in sizes:
            store = RedisJobStore(client, prefix=f"lb{size}", clock=StepClock(BASE_MS))
            log(f"{label(size)}: seeding {size:,} jobs")
            rate = seed(store, size)
            finished = min(FINISH_MAX, size // 5)
            log(f"{label(size)}: {rate:,.0f} jobs/s; finishing {finished:,} (claim + ack)")
            finish_share(store, finished)
            expected = {
                "by name": size // len(NAMES),
                "by queue": size // len(QUEUES),
                "by state": finished * 4 // 5,
                "unfiltered": size,
            }
            results[size] = {}
            for query, options in QUERIES.items():
                log(f"{label(size)}: {query}")
                timing = measure(store, options, expected[query])
                assert timing.rows == expected[query], (query, timing.rows, expected[query])
                results[size][query] = timing
            if size == sizes[-1]:
                log(f"{label(size)}: full reindex of the name index")
                rebuild = timed_rebuild(store, client)
            store.close()
        used = client.info("memory")["used_memory_human"]
        client.close()

    ok = report(sizes, results, rebuild, version, used)
    return 0 if ok else 1


def report(
    sizes: list[int],
    results: dict[int, dict[str, Timing]],
    rebuild: RebuildStats | None,
    version: str,
    memory: str,
) -> bool:
    small, large = sizes[0], sizes[-1]
    ok = True
    print(f"list paging, {PAGE}-row pages, {CALLS} calls at random deep cursors "
          f"(redis-server {version}, private, {memory} used at the end)")  # fmt: skip
    head = "| query | rows | " + " | ".join(f"{label(s)} p50 ms | {label(s)} p95 ms" for s in sizes)
    if len(sizes) > 1:
        head += f" | {label(large)}/{label(small)} (p50) | target"
    print(head + " |")
    print("|" + "---|" * (head.count("|")))
    for query in QUERIES:
        cells = [query, f"{results[large][query].rows:,}"]
        for size in sizes:
            t = results[size][query]
            cells += [f"{t.median:.2f}", f"{t.p95:.2f}"]
        if len(sizes) > 1:
            ratio = results[large][query].median / results[small][query].median
            passed = ratio <= RATIO_TARGET and results[large][query].median < MEDIAN_TARGET_MS
            ok = ok and passed
            cells += [f"{ratio:.2f}x", "PASS" if passed else "FAIL"]
        print("| " + " | ".join(cells) + " |")
    print(f"targets: {label(large)} within {RATIO_TARGET}x of {label(small)} and median under "
          f"{MEDIAN_TARGET_MS:g} ms, per query")  # fmt: skip
    if rebuild is not None:
        op, worst = rebuild.longest()
        slow_max = max((us for us, _ in rebuild.slowlog), default=0) / 1000
        passed = worst < LONGEST_CALL_TARGET_MS and slow_max < LONGEST_CALL_TARGET_MS
        ok = ok and passed
        print()
        print(f"full reindex (name) at {label(large)}: {rebuild.rows:,} rows in "
              f"{rebuild.seconds:.1f} s = {rebuild.rows / rebuild.seconds:,.0f} rows/s")  # fmt: skip
        # The walk of the all-jobs set (chunk_page since layout 3) and the index writes.
        for name, took in sorted(rebuild.calls.items()):
            print(f"  {name} calls: {len(took)}, median {statistics.median(took):.2f} ms, "
                  f"max {max(took):.2f} ms (client side)")  # fmt: skip
        print(f"  SLOWLOG (> {SLOWLOG_US // 1000} ms) during the rebuild: {len(rebuild.slowlog)} "
              f"entries" + (f", longest {slow_max:.1f} ms" if rebuild.slowlog else ""))  # fmt: skip
        print(f"  longest single call: {worst:.2f} ms ({op}); target < "
              f"{LONGEST_CALL_TARGET_MS:g} ms: {'PASS' if passed else 'FAIL'}")  # fmt: skip
    return ok


if __name__ == "__main__":
    sys.exit(main())
