"""Redis memory per job: ours (list indexes on and off) next to rq and bullmq, in one run.

    .venv/bin/python -m bench.memory_bench                       # 100k jobs (~4 min on 2 cores)
    .venv/bin/python -m bench.memory_bench --n 20000 --only ours,ours-noidx   # quick look

For each library, on a private redis-server (``redis-server`` from PATH, else the embedded
binary; ``--redis-server BIN``) that is FLUSHALLed between libraries -- the only server this
ever flushes, and it is shut down at the end:

1. FLUSHALL, read ``INFO memory`` ``used_memory`` (the baseline);
2. a driver process enqueues N no-op jobs with the library's bulk API (the throughput
   bench's payload, ~72 bytes of JSON) and exits; ``used_memory`` again -> bytes per
   **waiting** job;
3. a driver process completes them all with the library's default retention (ours: a
   claim+ack loop, ``Complete(None)``, no ``keep``/``history_ttl``; rq: ``SimpleWorker``,
   results kept 500 s; bullmq: ``Worker``, completed jobs kept) and exits; ``used_memory``
   -> bytes per **completed** job (everything the finished job still costs).

rq's worker does a few hundred jobs/s, so its completed figure is taken on a separate
``--rq-process-n`` jobs (default 10,000; the table shows every N).  Peers run from
``bench/.venv-peers`` (``bash bench/setup_peers.sh``); a missing venv skips them.

Then, for every library and both states, every key is read with ``MEMORY USAGE key SAMPLES
0`` and summed per key pattern (ids replaced by ``*``), which shows what dominates; the rest
of ``used_memory`` is the keyspace's own overhead (main dict entries) and allocator rounding.
The ``OBJECT ENCODING`` of a sample job hash is shown too: a job hash with a field longer
than ``hash-max-listpack-value`` (64 bytes) is stored as a real hash table, several times the
size of a listpack.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(REPO))

from bench.chaos import PrivateRedis, child_env  # noqa: E402

PEERS_PYTHON = BENCH_DIR / ".venv-peers" / "bin" / "python"
CHUNK = 1000

OURS_DRIVER = r"""
import json, sys, time
from bench.common import payload
from store import Complete, EnqueueRequest, RedisJobStore, connect

url, n, mode, indexes = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
store = RedisJobStore(connect(url), prefix="bench", indexes=indexes)
started = time.perf_counter()
if mode == "enqueue":
    for start in range(0, n, 1000):
        store.enqueue_many([EnqueueRequest(name="noop", queue="default", payload=payload(i))
                            for i in range(start, min(n, start + 1000))])
else:
    held, done, k = [], 0, 0
    while True:
        tokens = ["t%d" % (k + j) for j in range(100)]
        k += 100
        batch = store.ack_and_claim_many([(i, t, Complete(None)) for i, t in held],
                                         queue="default", names=["noop"], tokens=tokens,
                                         lock_duration_ms=600000)
        done += len(held)
        held = [(job.id, t) for job, t in batch.jobs]
        if not held:
            break
    assert done == n, (done, n)
store.close()
print(json.dumps({"seconds": time.perf_counter() - started}))
"""

RQ_DRIVER = r"""
import json, logging, sys, time
from redis import Redis
from rq import Queue, SimpleWorker
from bench.common import payload
from bench.peers.tasks import noop

logging.basicConfig(level=logging.WARNING)
url, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
conn = Redis.from_url(url)
queue = Queue("default", connection=conn)
started = time.perf_counter()
if mode == "enqueue":
    for start in range(0, n, 1000):
        queue.enqueue_many([Queue.prepare_data(noop, args=(payload(i),))
                            for i in range(start, min(n, start + 1000))])
else:
    SimpleWorker([queue], connection=conn).work(burst=True, logging_level="WARNING")
    assert queue.finished_job_registry.count == n, queue.finished_job_registry.count
print(json.dumps({"seconds": time.perf_counter() - started}))
"""

BULLMQ_DRIVER = r"""
import asyncio, json, sys, time
from bench.common import payload

async def main():
    from bullmq import Queue, Worker
    url, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    opts = {"connection": url, "prefix": "bench"}
    queue = Queue("default", opts)
    started = time.perf_counter()
    if mode == "enqueue":
        for start in range(0, n, 1000):
            await queue.addBulk([{"name": "noop", "data": payload(i)}
                                 for i in range(start, min(n, start + 1000))])
    else:
        done, completed = asyncio.Event(), [0]

        async def process(job, token):
            return None

        def on_completed(job, result):
            completed[0] += 1
            if completed[0] >= n:
                done.set()

        worker = Worker("default", process, {**opts, "concurrency": 1})
        worker.on("completed", on_completed)
        await asyncio.wait_for(done.wait(), timeout=max(120.0, n / 20))
        await worker.close()
    await queue.close()
    print(json.dumps({"seconds": time.perf_counter() - started}))

asyncio.run(main())
"""


@dataclass(frozen=True)
class Lib:
    label: str
    python: str
    script: str
    extra: tuple[str, ...] = ()
    note: str = ""
    #: CONFIG SET pairs applied for this library's run only (restored afterwards).
    config: tuple[tuple[str, str], ...] = ()


def libs() -> dict[str, Lib]:
    peers = str(PEERS_PYTHON)
    return {
        "ours": Lib("ours (indexes on)", sys.executable, OURS_DRIVER, ("1",), "default store"),
        "ours-noidx": Lib(
            "ours (indexes off)", sys.executable, OURS_DRIVER, ("0",), "indexes=False"
        ),
        "ours-listpack": Lib(
            "ours (indexes on), hash-max-listpack-value 256",
            sys.executable,
            OURS_DRIVER,
            ("1",),
            "server tuned: job hashes stay listpacks",
            (("hash-max-listpack-value", "256"),),
        ),
        "rq": Lib("rq", peers, RQ_DRIVER, (), "results kept 500 s (default)"),
        "bullmq": Lib("bullmq (Python port)", peers, BULLMQ_DRIVER, (), "completed jobs kept"),
    }


@dataclass
class Measure:
    n: int
    bytes_total: int
    seconds: float
    patterns: dict[str, tuple[int, int]] = field(default_factory=dict)  # pattern -> (keys, bytes)
    encoding: str = ""

    @property
    def per_job(self) -> float:
        return self.bytes_total / self.n


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def used_memory(client: Any) -> int:
    return int(client.info("memory")["used_memory"])


_ID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}|\d+")


def pattern_of(key: str) -> str:
    return _ID.sub("*", key).replace("\0", "\\0")


def key_breakdown(client: Any) -> tuple[dict[str, tuple[int, int]], str]:
    """(pattern -> (keys, MEMORY USAGE bytes), encoding of a sample job hash)."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    batch: list[str] = []
    sample_hash = ""

    def flush() -> None:
        pipe = client.pipeline(transaction=False)
        for key in batch:
            pipe.memory_usage(key, samples=0)
        for key, size in zip(batch, pipe.execute(), strict=True):
            entry = totals[pattern_of(key)]
            entry[0] += 1
            entry[1] += int(size or 0)
        batch.clear()

    for key in client.scan_iter(count=2000):
        batch.append(key)
        if len(batch) >= 1000:
            flush()
    if batch:
        flush()
    # The most numerous hash pattern is the job hash.
    hashes = []
    for pattern, (keys, _size) in totals.items():
        hashes.append((keys, pattern))
    for _keys, pattern in sorted(hashes, reverse=True):
        key = next(iter(client.scan_iter(match=_glob(pattern), count=1000)), None)
        if key is not None and client.type(key) == "hash":
            sample_hash = f"{pattern}: {client.object('encoding', key)}, {client.hlen(key)} fields"
            break
    return {p: (v[0], v[1]) for p, v in totals.items()}, sample_hash


def _glob(pattern: str) -> str:
    escaped = re.sub(r"([?\[\]\\{}])", r"\\\1", pattern.replace("\\0", "\0"))
    return escaped


def run_driver(lib: Lib, url: str, n: int, mode: str) -> float:
    proc = subprocess.run(
        [lib.python, "-c", lib.script, url, str(n), mode, *lib.extra],
        env=child_env(),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{lib.label} {mode} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["seconds"])


def measure(client: Any, lib: Lib, url: str, n: int, modes: tuple[str, ...]) -> dict[str, Measure]:
    """FLUSHALL, baseline, then each mode in turn; used_memory after each (driver exited)."""
    client.flushall(asynchronous=False)
    config = {_config_name(client, name): value for name, value in lib.config}
    saved = {name: client.config_get(name)[name] for name in config}
    for name, value in config.items():
        client.config_set(name, value)
    try:
        time.sleep(0.2)
        baseline = used_memory(client)
        out: dict[str, Measure] = {}
        for mode in modes:
            log(f"memory: {lib.label}: {mode} {n:,} jobs")
            seconds = run_driver(lib, url, n, mode)
            time.sleep(0.2)
            total = used_memory(client) - baseline
            patterns, encoding = key_breakdown(client)
            out[mode] = Measure(n, total, seconds, patterns, encoding)
    finally:
        for name, value in saved.items():
            client.config_set(name, value)
    return out


def _config_name(client: Any, name: str) -> str:
    """Redis 6.2 spells listpack settings with "ziplist"; 7.x accepts both."""
    if client.config_get(name):
        return name
    return name.replace("listpack", "ziplist")


def fmt_bytes(value: float) -> str:
    return f"{value:,.0f}"


def report(results: dict[str, dict[str, Measure]], version: str, binary: str) -> str:
    lines = [
        f"## Redis memory per job (redis-server {version}, private, `{binary}`)",
        "",
        "`used_memory` after the driver exited minus the baseline after FLUSHALL, divided by N. "
        "Payload: the throughput bench's (~72 bytes of JSON).",
        "",
        "| library | waiting: bytes/job | N | completed: bytes/job | N | job hash encoding | retention |",
        "|---|---|---|---|---|---|---|",
    ]
    all_libs = libs()
    for key, by_mode in results.items():
        waiting = by_mode.get("enqueue")
        done = by_mode.get("process")
        lines.append(
            "| {label} | {w} | {wn} | {c} | {cn} | {enc} | {note} |".format(
                label=all_libs[key].label,
                w=fmt_bytes(waiting.per_job) if waiting else "-",
                wn=f"{waiting.n:,}" if waiting else "-",
                c=fmt_bytes(done.per_job) if done else "-",
                cn=f"{done.n:,}" if done else "-",
                enc=(waiting or done).encoding.split(": ", 1)[-1] if (waiting or done) else "-",
                note=all_libs[key].note,
            )
        )
    for key, by_mode in results.items():
        for mode, m in by_mode.items():
            state = "waiting" if mode == "enqueue" else "completed"
            lines += [
                "",
                f"### {all_libs[key].label}, {state} ({m.n:,} jobs): where the bytes go",
                "",
                "| key pattern | keys | MEMORY USAGE bytes/job | share |",
                "|---|---|---|---|",
            ]
            attributed = 0
            for pattern, (keys, size) in sorted(m.patterns.items(), key=lambda kv: -kv[1][1]):
                attributed += size
                if size / m.n < 0.5:
                    continue
                lines.append(
                    f"| `{pattern}` | {keys:,} | {size / m.n:,.1f} | {100 * size / m.bytes_total:.0f} % |"
                )
            rest = m.bytes_total - attributed
            lines.append(
                f"| (keyspace dict entries, allocator rounding, the rest) | | {rest / m.n:,.1f} | "
                f"{100 * rest / m.bytes_total:.0f} % |"
            )
            if m.encoding:
                lines.append(f"\nSample job hash: {m.encoding}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Redis memory per waiting / completed job")
    parser.add_argument("--n", type=int, default=100_000, help="jobs (default 100,000)")
    parser.add_argument(
        "--rq-process-n", type=int, default=10_000, help="jobs for rq's completed figure"
    )
    parser.add_argument(
        "--only",
        default="ours,ours-noidx,ours-listpack,rq,bullmq",
        help="ours, ours-noidx, ours-listpack, rq, bullmq",
    )
    parser.add_argument("--redis-server", default=None)
    args = parser.parse_args(argv)
    chosen = [x.strip() for x in args.only.split(",") if x.strip()]
    available = libs()
    unknown = set(chosen) - set(available)
    if unknown:
        parser.error(f"unknown libraries: {sorted(unknown)}")
    if any(c in ("rq", "bullmq") for c in chosen) and not PEERS_PYTHON.exists():
        log("memory: bench/.venv-peers is missing (bash bench/setup_peers.sh); skipping the peers")
        chosen = [c for c in chosen if c not in ("rq", "bullmq")]
    server = PrivateRedis(args.redis_server)
    results: dict[str, dict[str, Measure]] = {}
    try:
        server.start()
        version = server.version()
        log(f"memory: private redis-server {version} at {server.url}")
        client = server.client()
        for key in chosen:
            lib = available[key]
            if key == "rq" and args.rq_process_n and args.rq_process_n != args.n:
                results[key] = measure(client, lib, server.url, args.n, ("enqueue",))
                results[key]["process"] = measure(
                    client, lib, server.url, args.rq_process_n, ("enqueue", "process")
                )["process"]
            else:
                results[key] = measure(client, lib, server.url, args.n, ("enqueue", "process"))
        client.close()
        print(report(results, version, server.binary))
    finally:
        with contextlib.suppress(Exception):
            server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
