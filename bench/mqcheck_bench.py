"""``mqcheck`` (store.consistency.check_store) at scale, on a private redis-server.

    .venv/bin/python -m bench.mqcheck_bench                   # 100k jobs (~1 min on 2 cores)
    .venv/bin/python -m bench.mqcheck_bench --jobs 1000000    # the published 1M figure

Seeds ``--jobs`` jobs with ``enqueue_many`` (20 names, 5 queues; see bench/list_bench.py),
finishes a share of them (claim + ack) so the finished/terminal sets are not empty, then
damages the store: deletes 0.1 % of the job hashes (only the hash), drops 100 state-set
members and index entries, bumps a counter.  Then one report-only check and one
``repair=True`` check, each with every Redis call timed client-side (the checker's calls go
through the store's ``_run`` / ``_command``) and the server's SLOWLOG (threshold 10 ms)
read; then a last check that must find nothing.

Prints, per pass: rows (job hashes) per second, Redis calls, the longest single call and
its operation, and the slowest SLOWLOG entry.  Target: no single call over 50 ms.  Exit
status 1 if a target or a consistency expectation fails.
"""

from __future__ import annotations

import argparse
import bisect
import random
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.list_bench import (
    BASE_MS,
    NAMES,
    QUEUES,
    SLOWLOG_KEEP,
    SLOWLOG_US,
    StepClock,
    finish_share,
    label,
    log,
    private_redis,
    seed,
)
from store import RedisJobStore, connect
from store.consistency import CheckReport, check_store

LONGEST_CALL_TARGET_MS = 50.0
FINISH_SHARE = 0.1
DELETE_SHARE = 0.001


@dataclass
class PassStats:
    name: str
    report: CheckReport
    seconds: float
    calls: dict[str, list[float]]
    slowlog_ms: float
    slowlog_op: str

    def longest(self) -> tuple[str, float]:
        name, worst = "", 0.0
        for op, samples in self.calls.items():
            if samples and max(samples) > worst:
                name, worst = op, max(samples)
        return name, worst


def timed_check(store: RedisJobStore, client: Any, name: str, repair: bool) -> PassStats:
    calls: dict[str, list[float]] = {}

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(op: str, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return method(op, *args, **kwargs)
            finally:
                label_ = op if method.__name__ == "_run" else args[0]
                calls.setdefault(label_, []).append((time.perf_counter() - started) * 1000)

        return timed

    previous = client.config_get("slowlog-*")
    client.config_set("slowlog-log-slower-than", SLOWLOG_US)
    client.config_set("slowlog-max-len", SLOWLOG_KEEP)
    client.slowlog_reset()
    store._run = wrap(store._run)  # type: ignore[method-assign]
    store._command = wrap(store._command)  # type: ignore[method-assign]
    try:
        started = time.perf_counter()
        report = check_store(store, repair=repair)
        seconds = time.perf_counter() - started
    finally:
        del store._run, store._command
        entries = client.slowlog_get(SLOWLOG_KEEP)
        for key, value in previous.items():
            client.config_set(key, value)
    slow_ms, slow_op = 0.0, "-"
    slow_count = sum(1 for e in entries if e["duration"] > LONGEST_CALL_TARGET_MS * 1000)
    if slow_count:
        log(
            f"{name}: {slow_count} SLOWLOG entries over {LONGEST_CALL_TARGET_MS:g} ms: "
            + ", ".join(
                f"{' '.join(str(e.get('command', '')).split()[:2])} {e['duration'] / 1000:.0f} ms "
                f"@{e['start_time']}"
                for e in entries
                if e["duration"] > LONGEST_CALL_TARGET_MS * 1000
            )
        )
    for entry in entries:
        if entry["duration"] / 1000 > slow_ms:
            slow_ms = entry["duration"] / 1000
            slow_op = " ".join(str(entry.get("command", "")).split()[:2])
    return PassStats(name, report, seconds, calls, slow_ms, slow_op)


_DIRECTORIES: dict[str, list[tuple[float, bytes, str]]] = {}


def unlist(client: Any, store: RedisJobStore, directory: str, job_id: str) -> None:
    """Drop a job from a chunked set behind the store's back (store/chunks.py): the ZREM
    on its chunk that a careless operator would do, leaving the set's size as it was."""
    if directory not in _DIRECTORIES:
        _DIRECTORIES[directory] = [
            (score, entry.rsplit("\0", 1)[0].encode(), entry.rsplit("\0", 1)[1])
            for entry, score in client.zrange(directory, 0, -1, withscores=True)
        ]
    bounds = _DIRECTORIES[directory]
    at = (float(client.hget(store.keys.job(job_id), "enqueued_at") or 0), job_id.encode())
    rank = bisect.bisect_right([(s, b) for s, b, _ in bounds], at) - 1
    client.zrem(f"{directory}\0{bounds[max(rank, 0)][2]}", job_id)


def damage(store: RedisJobStore, client: Any, size: int) -> int:
    """Delete DELETE_SHARE of the job hashes and break a few memberships; returns hashes deleted."""
    rng = random.Random(13)
    victims = rng.sample(range(1, size + 1), max(1, int(size * DELETE_SHARE)))
    pipe = client.pipeline(transaction=False)
    for n in victims:
        pipe.delete(store.keys.job(f"j-{n}"))
    deleted = sum(pipe.execute())
    survivors = [f"j-{n}" for n in rng.sample(range(1, size + 1), 200) if n not in set(victims)]
    for job_id in survivors[:100]:
        unlist(client, store, store.keys.all, job_id)
    for job_id in survivors[100:]:
        name = client.hget(store.keys.job(job_id), "name")
        unlist(client, store, store.keys.byname(name), job_id)
    client.hincrby(store.keys.counts, f"{QUEUES[0]}|waiting", 7)
    return int(deleted)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="store size (default 100k)")
    parser.add_argument("--redis-server", default=shutil.which("redis-server"))
    args = parser.parse_args(argv)
    if not args.redis_server:
        from store.embedded import redis_server_binary

        args.redis_server = str(redis_server_binary())
    size = args.jobs
    ok = True
    with private_redis(args.redis_server) as url:
        client = connect(url)
        version = client.info("server")["redis_version"]
        store = RedisJobStore(client, prefix=f"cb{size}", clock=StepClock(BASE_MS))
        log(f"private redis-server {version}; seeding {size:,} jobs")
        rate = seed(store, size)
        finished = int(size * FINISH_SHARE)
        log(f"{rate:,.0f} jobs/s; finishing {finished:,} (claim + ack)")
        finish_share(store, finished)
        deleted = damage(store, client, size)
        log(f"deleted {deleted} job hashes; checking")
        passes = [timed_check(store, client, "check (report only)", repair=False)]
        log("repairing")
        passes.append(timed_check(store, client, "check --repair", repair=True))
        log("checking again")
        passes.append(timed_check(store, client, "check after repair", repair=False))
        used = client.info("memory")["used_memory_human"]
        store.close()
        client.close()

    print(
        f"mqcheck at {label(size)} jobs ({len(NAMES)} names, {len(QUEUES)} queues, "
        f"{FINISH_SHARE:.0%} finished, {deleted} hashes deleted; redis-server {version}, "
        f"private, {used} used)"
    )
    print("| pass | jobs | problems | seconds | rows/s | Redis calls | p50 / p99 call | "
          "calls over 50 ms | longest call | slowest SLOWLOG entry |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for p in passes:
        op, worst = p.longest()
        samples = sorted(ms for v in p.calls.values() for ms in v)
        calls = len(samples)
        p50, p99 = samples[calls // 2], samples[min(calls - 1, calls * 99 // 100)]
        over = sum(1 for ms in samples if ms > LONGEST_CALL_TARGET_MS)
        print(
            f"| {p.name} | {p.report.jobs:,} | {p.report.problems:,} | {p.seconds:.1f} | "
            f"{p.report.jobs / p.seconds:,.0f} | {calls:,} | {p50:.1f} / {p99:.1f} ms | {over} | "
            f"{worst:.1f} ms ({op}) | {p.slowlog_ms:.1f} ms ({p.slowlog_op}) |"
        )
        if worst > LONGEST_CALL_TARGET_MS:
            ok = False
        top = sorted(((ms, o) for o, v in p.calls.items() for ms in v), reverse=True)[:5]
        log(f"{p.name}: slowest calls " + ", ".join(f"{o} {ms:.1f} ms" for ms, o in top))
    first, repaired, last = (p.report for p in passes)
    found = ", ".join(f"{k} {v:,}" for k, v in sorted(first.found.items()))
    print(f"found: {found}")
    if not (repaired.consistent and last.problems == 0 and first.problems > 0):
        print("FAIL: the repair did not leave the store consistent")
        ok = False
    print(f"target: longest single Redis call under {LONGEST_CALL_TARGET_MS:g} ms: "
          f"{'PASS' if ok else 'FAIL'}")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
