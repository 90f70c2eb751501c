"""``manage.py migrate_store`` (store.layout.migrate) at scale, on a private redis-server.

    .venv/bin/python -m bench.migrate_bench                   # 100k jobs (~1 min on 2 cores)
    .venv/bin/python -m bench.migrate_bench --jobs 1000000    # the published 1M figure

Seeds ``--jobs`` jobs with ``enqueue_many`` (20 names, 5 queues, both list indexes; see
bench/list_bench.py) and finishes 10 % of them, then writes the store's sets back as layout 2
kept them (``to_layout_2``: ``all`` and every index one plain sorted set, the marker 2) and
times the conversion to the current layout.  Every atomic ``migrate_set`` call is timed
client-side (the gap between two progress reports is one call) and the server's SLOWLOG
(threshold 10 ms) is read.  Afterwards every set must hold exactly the members it held before,
in chunks of at most 64 listpack members.

Prints members moved per second, the calls, p50 / p99 and the longest call, the memory before
and after.  Target: no single call over 50 ms.  Exit status 1 if the target or the check fails.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
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
from store.chunks import CHUNK_CAPACITY, iter_members
from store.keys import NUL, StoreKeys
from store.layout import LAYOUT, MigrationResult, layout_key, migrate

LONGEST_CALL_TARGET_MS = 50.0
FINISH_SHARE = 0.1
#: Members per pipeline while the bench writes the old layout (set-up, not timed).
SETUP_BATCH = 5_000


def chunked_directories(client: Any, keys: StoreKeys) -> list[tuple[str, str, str]]:
    """(kind, name or queue, directory key) of every chunked set of the store."""
    found = [("all", "", keys.all)]
    for kind, base in (("byname", keys.byname("")), ("byqueue", keys.byqueue(""))):
        pattern = base.replace("[", "[[]") + "*"
        for key in sorted(set(client.scan_iter(match=pattern, count=500))):
            if NUL not in key:
                found.append((kind, key[len(base) :], key))
    return found


def to_layout_2(store: RedisJobStore, client: Any) -> dict[str, int]:
    """Rewrite every chunked set of ``store`` as one plain sorted set under its key, as layout 2
    kept it; drop the chunk keys, the size hash and the chunk counter; mark the store 2.
    Returns each set's size."""
    sizes: dict[str, int] = {}
    store._run("fold_head")  # layout 2 had no head: every row into its set first
    for kind, arg, directory in chunked_directories(client, store.keys):
        plain = f"{directory}{NUL}plain"
        count = 0
        pipe = client.pipeline(transaction=False)
        for page in iter_members(store._run, kind, arg, page=500):
            pipe.zadd(plain, {job_id: float(score) for job_id, score in page})
            count += len(page)
            if len(pipe) * 500 >= SETUP_BATCH:
                pipe.execute()
        pipe.execute()
        chunks = [f"{directory}{NUL}{e.rsplit(NUL, 1)[1]}" for e in client.zrange(directory, 0, -1)]
        for start in range(0, len(chunks), 500):
            client.unlink(*chunks[start : start + 500])
        client.unlink(directory)
        client.rename(plain, directory)
        sizes[directory] = count
    client.delete(store.keys.index_counts, store.keys.index_seq, store.keys.index_pending)
    client.set(layout_key(store.keys), "2")
    return sizes


def check_converted(client: Any, keys: StoreKeys, sizes: dict[str, int]) -> list[str]:
    """What is wrong with the converted sets (empty: nothing)."""
    problems = []
    counts = client.hgetall(keys.index_counts)
    for directory, size in sizes.items():
        entries = client.zrange(directory, 0, -1)
        cards = []
        pipe = client.pipeline(transaction=False)
        for entry in entries:
            pipe.zcard(f"{directory}{NUL}{entry.rsplit(NUL, 1)[1]}")
        cards = pipe.execute() if entries else []
        if sum(cards) != size or int(counts.get(directory, 0)) != size:
            problems.append(f"{directory!r}: {sum(cards)} members, size {counts.get(directory)}")
        if cards and max(cards) > CHUNK_CAPACITY:
            problems.append(f"{directory!r}: a chunk of {max(cards)} members")
    if list(client.scan_iter(match=f"{keys.tag}:migrate:*", count=500)):
        problems.append("a staging key was left behind")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="store size (default 100k)")
    parser.add_argument("--redis-server", default=shutil.which("redis-server"))
    args = parser.parse_args(argv)
    if not args.redis_server:
        from store.embedded import redis_server_binary

        args.redis_server = str(redis_server_binary())
    size = args.jobs
    with private_redis(args.redis_server) as url:
        client = connect(url)
        version = client.info("server")["redis_version"]
        prefix = f"mb{size}"
        store = RedisJobStore(client, prefix=prefix, clock=StepClock(BASE_MS))
        log(f"private redis-server {version}; seeding {size:,} jobs")
        seed(store, size)
        finish_share(store, int(size * FINISH_SHARE))
        memory_now = int(client.info("memory")["used_memory"])
        log("writing the sets back as layout 2")
        sizes = to_layout_2(store, client)
        store.close()
        memory_2 = int(client.info("memory")["used_memory"])
        client.config_set("slowlog-log-slower-than", SLOWLOG_US)
        client.config_set("slowlog-max-len", SLOWLOG_KEEP)
        client.slowlog_reset()

        gaps: list[float] = []
        last = [time.perf_counter()]

        def progress(_result: MigrationResult) -> None:
            now = time.perf_counter()
            gaps.append((now - last[0]) * 1000)
            last[0] = now

        log(f"migrating {sum(sizes.values()):,} members of {len(sizes)} sets")
        started = time.perf_counter()
        result = migrate(client, prefix, progress=progress)
        seconds = time.perf_counter() - started
        # The first gap also holds the SCAN for the sets and the size reads.
        calls = sorted(gaps[1:]) or [0.0]
        slow = client.slowlog_get(SLOWLOG_KEEP)
        slowest = max(slow, key=lambda e: e["duration"], default=None)
        memory_after = int(client.info("memory")["used_memory"])
        problems = check_converted(client, StoreKeys(prefix), sizes)
        client.close()

    p50 = calls[len(calls) // 2]
    p99 = calls[min(len(calls) - 1, len(calls) * 99 // 100)]
    over = sum(1 for ms in calls if ms > LONGEST_CALL_TARGET_MS)
    slow_text = "none over 10 ms"
    if slowest is not None:
        command = slowest["command"]
        if isinstance(command, bytes):
            command = command.decode(errors="replace")
        slow_text = f"{slowest['duration'] / 1000:.1f} ms ({str(command)[:40]})"
    print(
        f"migrate_store at {label(size)} jobs, layout 2 -> {LAYOUT} ({len(NAMES)} names, "
        f"{len(QUEUES)} queues, both indexes; redis-server {version}, private)"
    )
    print("| sets | members moved | seconds | members/s | calls | p50 / p99 call | "
          "calls over 50 ms | longest call | slowest SLOWLOG entry |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {result.sets} | {result.moved:,} | {seconds:.1f} | {result.moved / seconds:,.0f} | "
        f"{len(gaps):,} | {p50:.1f} / {p99:.1f} ms | {over} | {calls[-1]:.1f} ms | {slow_text} |"
    )
    print(
        f"used_memory: layout {LAYOUT} {memory_now / size:,.0f} B/job, as layout 2 "
        f"{memory_2 / size:,.0f} B/job, after migrating {memory_after / size:,.0f} B/job"
    )
    ok = not problems and result.layout_after == LAYOUT and calls[-1] <= LONGEST_CALL_TARGET_MS
    for problem in problems:
        print(f"FAIL: {problem}")
    print(f"target: longest single call under {LONGEST_CALL_TARGET_MS:g} ms, every member kept: "
          f"{'PASS' if ok else 'FAIL'}")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
