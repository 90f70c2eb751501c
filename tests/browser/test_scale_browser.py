"""The dashboard at about 100,000 jobs in a real browser: every count link of the overview
opens a page whose rows all have the count's state (served from that state's own sets, so
no scan budget runs out behind newer jobs); the oldest runnable job of a queue is found
behind thousands of higher-priority ones; workers announce themselves and queues nobody
consumes are badged."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from mqadmin import services
from store.insights import InFlightJob
from tests.browser.conftest import ConsoleLog, shot
from tests.browser.scale_seed import Seeded, seed_scale
from tests.browser.test_dashboard_browser import PASSWORD, log_in

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def scale(
    settings: Any, redis_url: str, redis_client: Any, prefix: str, django_user_model: Any
) -> Iterator[Seeded]:
    settings.MQ_STORES = {"main": {"prefix": prefix, "url": redis_url}}
    settings.MQ_DASHBOARD_READ_ONLY = False
    services.reset()
    seeded = seed_scale(redis_client, prefix, int(time.time() * 1000))
    assert seeded.total >= 100_000
    main = services.get_named_store("main")
    # One worker, consuming mail only, running one of mail's active jobs.
    running = main.list_by_state(["active"], queue="mail", limit=1).items[0]
    main.register_worker(
        "w-mail-1",
        queues={"mail": ["SendEmail"]},
        routes=["main"],
        started_at=main.now() - 600_000,
        concurrency={"mail": 8},
        in_flight=[InFlightJob(running.id, "mail", "SendEmail", main.now() - 4000)],
        totals={"completed": 34_640, "failed": 360},
    )
    django_user_model.objects.create_superuser("ops", password=PASSWORD)
    yield seeded
    services.reset()


def count_links(page: Any) -> list[tuple[str, str, int]]:
    """(href, state, count) of every count link on the overview."""
    out = []
    for link in page.locator("a.count-link").all():
        href = link.get_attribute("href")
        state = re.search(r"[?&]state=([a-z-]+)", href).group(1)  # type: ignore[union-attr]
        out.append((href, state, int(link.inner_text().replace(",", ""))))
    return out


def test_every_count_link_opens_rows_of_its_state_at_100k_jobs(
    page: Any, live_server: Any, scale: Seeded, console: ConsoleLog
) -> None:
    base = live_server.url
    log_in(page, base, "/")
    shot(page, "scale-overview")
    links = count_links(page)
    nonzero = [(href, state, count) for href, state, count in links if count]
    # Store totals and queue cells, every state that holds jobs.
    assert {state for _, state, _ in nonzero} >= {
        "waiting",
        "delayed",
        "active",
        "waiting-children",
        "completed",
        "failed",
        "cancelled",
    }
    assert len(nonzero) >= 14
    slowest = 0.0
    for href, state, count in nonzero:
        started = time.monotonic()
        page.goto(base + href)
        slowest = max(slowest, time.monotonic() - started)
        badges = page.locator("#results table.jobs tbody tr td .badge[class*='state-']")
        states = [
            re.search(r"state-([a-z-]+)", c).group(1)  # type: ignore[union-attr]
            for c in badges.evaluate_all("els => els.map(e => e.className)")
        ]
        assert states == [state] * min(count, 50), (href, states[:5])
        assert page.locator(".scan-note").count() == 0, href
        # The explorer shows the exact total from the counters.
        if "queue=" in href:
            total = page.locator(".result-head .total").inner_text()
            assert f"{count:,} matching" in total, (href, total)
    assert slowest < 10, slowest
    page.goto(base + "/jobs/?store=main&queue=export&state=failed")
    shot(page, "scale-failed-export")
    assert "finished-time sets of every job name of queue “export”" in (
        page.text_content(".plan") or ""
    )
    assert not console.errors, console.errors


def test_oldest_runnable_and_worker_presence_at_100k_jobs(
    page: Any, live_server: Any, scale: Seeded, console: ConsoleLog
) -> None:
    base = live_server.url
    # The starved job was enqueued 12 minutes before the seed began; seeding 100k jobs on a
    # loaded machine takes a while, so the age the page shows is bounded by the clock around
    # the page load, whether it floors or rounds.
    age_low = (time.time() * 1000 - scale.starved_at_ms) / 60_000
    log_in(page, base, "/")
    row = page.locator("table.queues tbody tr", has=page.locator("th a", has_text="export"))
    oldest = row.locator("td.oldest a")
    assert oldest.get_attribute("href").endswith(f"/jobs/{scale.starved}")
    age_high = (time.time() * 1000 - scale.starved_at_ms) / 60_000
    age = re.fullmatch(r"(\d+) min", oldest.inner_text())
    assert age, oldest.inner_text()
    assert math.floor(age_low) <= int(age.group(1)) <= math.ceil(age_high), (
        oldest.inner_text(),
        age_low,
        age_high,
    )
    # export and billing have no consumer; mail has one live worker.
    assert row.locator(".no-worker").count() == 1
    mail = page.locator("table.queues tbody tr", has=page.locator("th a", has_text="mail"))
    assert mail.locator(".no-worker").count() == 0
    page.locator(".no-worker").first.click()
    page.wait_for_url(re.compile(r"/workers/"))
    worker = page.locator('tr[data-worker="w-mail-1"]')
    assert "×8" in worker.inner_text()
    assert "completed 34,640" in worker.inner_text()
    worker.locator("a.mono").first.click()
    page.wait_for_selector('#job-summary[data-state="active"]')
    page.goto(base + "/workers/")
    shot(page, "scale-workers")
    assert "Queues no live worker consumes" in page.inner_text("#workers")
    assert not console.errors, console.errors


def _result_ids(page: Any) -> list[str]:
    return page.locator("#results table.jobs td.id a").evaluate_all(
        "els => els.map(a => a.getAttribute('title'))"
    )


def _search_until_found(page: Any, pages_max: int = 12) -> tuple[list[str], int]:
    """Follow "Continue scanning" until a page has rows; returns (ids, continues followed)."""
    followed = 0
    while True:
        ids = _result_ids(page)
        if ids or followed >= pages_max:
            return ids, followed
        note = page.locator(".scan-note")
        assert note.count() == 1, "no rows and no scan note"
        assert "Scanned 2,000 jobs" in note.inner_text()
        before = page.url
        note.locator("a.continue").click()
        page.wait_for_function("before => location.href !== before", arg=before)
        page.wait_for_selector("#results")
        followed += 1


def test_search_finds_a_failed_job_by_error_text_and_payload_at_100k_jobs(
    page: Any, live_server: Any, scale: Seeded, console: ConsoleLog
) -> None:
    base = live_server.url
    main = services.get_named_store("main")
    # The oracle, read without the search: every failed export job, filtered here.
    expected: list[str] = []
    timeouts: list[str] = []
    cursor = None
    while True:
        result = main.list_by_state(["failed"], queue="export", cursor=cursor, limit=200)
        for job in result.items:
            if job.payload == {"n": 14}:
                expected.append(job.id)
                if "timed out" in str(job.exit):
                    timeouts.append(job.id)
        cursor = result.cursor
        if cursor is None:
            break
    assert len(expected) == 1 and timeouts == expected  # n=14 is the 15th run: a timeout

    log_in(page, base, "/")
    # Error text from the header box: one kind of failure, its failed jobs, then the payload.
    page.locator("#lookup-id").fill("error:timed out args.n:14")
    page.locator("#lookup-id").press("Enter")
    page.wait_for_url(re.compile(r"/jobs/\?"))
    assert "TimeoutError" in page.inner_text(".error-filter")
    found, continues = _search_until_found(page)
    shot(page, "scale-search-error-payload")
    assert found == expected, (found, continues)
    assert "payload n" in (page.text_content(".plan") or "")

    # A payload value alone, on the failed jobs: bounded pages of 2,000 rows and "continue".
    page.goto(base + "/jobs/?store=main&state=failed")
    page.locator("#f-q").fill("args.n:14")
    page.get_by_role("button", name="Apply filters").click()
    page.wait_for_function("() => location.search.includes('q=')")
    found, continues = _search_until_found(page)
    shot(page, "scale-search-payload")
    assert found == expected
    assert continues >= 1  # the job is older than the first 2,000 failures scanned
    # The exact id opens the job.
    page.locator("#lookup-id").fill(expected[0])
    page.locator("#lookup-id").press("Enter")
    page.wait_for_selector("#job-summary")
    assert expected[0] in page.url
    assert not console.errors, console.errors
