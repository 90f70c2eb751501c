"""The live dashboard in a real browser: a running job's progress bar and log lines appear
on its page as the handler writes them, its state follows, and the overview's counts
change, all without a reload and without timed polling while the stream is live; with
the stream refused (over the connection limit) the pages poll as before."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from mqadmin import live, services
from store import Claimed, Complete, EnqueueRequest, RedisJobStore
from tests.browser.conftest import ConsoleLog, shot
from tests.browser.test_a11y_browser import AXE, describe, run_axe

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "browser-pass-1"
#: The first store's waiting count reads the given text.
WAITING_IS = (
    "n => document.querySelector('#stores td[data-state=\"waiting\"]').textContent.trim() === n"
)


@pytest.fixture
def main(
    settings: Any, redis_url: str, prefix: str, django_user_model: Any
) -> Iterator[RedisJobStore]:
    settings.MQ_STORES = {"main": {"prefix": prefix, "url": redis_url}}
    settings.MQ_DASHBOARD_READ_ONLY = False
    settings.MQ_EVENTS_INTERVAL_MS = 200
    services.reset()
    django_user_model.objects.create_superuser("ops", password=PASSWORD)
    yield services.get_named_store("main")
    services.reset()


def log_in(page: Any, base: str, path: str) -> None:
    page.goto(base + path)
    page.get_by_label("Username").fill("ops")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(re.escape(base + path.split("?")[0])))


def wait_live(page: Any) -> None:
    page.wait_for_selector('[sse-connect][data-stream="live"]', state="attached")


def polls(page: Any) -> list[str]:
    """The htmx requests the page makes from now on (method and URL)."""
    seen: list[str] = []
    page.on(
        "request",
        lambda r: seen.append(f"{r.method} {r.url}") if r.headers.get("hx-request") else None,
    )
    return seen


def test_a_running_job_shows_its_progress_and_log_lines_as_they_are_written(
    page: Any, live_server: Any, main: RedisJobStore, console: ConsoleLog
) -> None:
    job_id = main.enqueue(EnqueueRequest(id="export/2026-12", name="Export", queue="q")).id
    claimed = main.claim(queue="q", names=["Export"], token="w:1", lock_duration_ms=60_000)
    assert isinstance(claimed, Claimed)
    base = live_server.url
    log_in(page, base, f"/stores/main/jobs/{job_id}")
    wait_live(page)
    assert page.locator("#job-progress-bar").count() == 0
    assert page.locator(".live-status").first.inner_text() == "live: updates as the job changes"
    requests = polls(page)

    main.set_progress(job_id, "w:1", 25)
    main.append_log(job_id, "w:1", "reading <ledger> rows")
    page.wait_for_function("() => document.getElementById('job-progress-bar')?.value === 25")
    page.wait_for_selector("#job-log-lines li >> text=reading <ledger> rows")
    for n in range(1, 4):
        main.append_log(job_id, "w:1", f"batch {n} written")
    main.set_progress(job_id, "w:1", 75)
    page.wait_for_function("() => document.getElementById('job-progress-bar')?.value === 75")
    page.wait_for_selector("#job-log-lines li >> text=batch 3 written")
    shot(page, "live-01-job-running")

    lines = page.locator("#job-log-lines li .log-message").all_inner_texts()
    assert lines == [
        "reading <ledger> rows",
        "batch 1 written",
        "batch 2 written",
        "batch 3 written",
    ]
    assert page.locator(".log-empty").is_hidden()
    # Progress and lines came over the stream: the summary made no request for them.
    assert not [r for r in requests if "/stores/main/jobs/" in r]

    if AXE.exists():
        violations = run_axe(page)
        assert not violations, describe(violations)

    main.ack(job_id, "w:1", Complete({"rows": 3}))
    page.wait_for_selector('#job-summary[data-state="completed"]')
    assert page.locator("#job-progress-bar").get_attribute("value") == "75"
    shot(page, "live-02-job-completed")
    assert console.errors == []


def test_the_overview_counts_change_without_a_reload_or_a_poll(
    page: Any, live_server: Any, main: RedisJobStore, console: ConsoleLog
) -> None:
    main.enqueue(EnqueueRequest(name="Mail", queue="mail"))
    base = live_server.url
    log_in(page, base, "/")
    wait_live(page)
    waiting = page.locator('#stores td[data-state="waiting"]').first
    assert waiting.inner_text() == "1"
    requests = polls(page)

    # Twice the 5 s polling period: the live page makes no timed poll.
    page.wait_for_timeout(6_000)
    assert requests == []

    for n in range(5):
        main.enqueue(EnqueueRequest(id=f"m-{n}", name="Mail", queue="mail"))
    page.wait_for_function(
        WAITING_IS,
        arg="6",
        timeout=5_000,
    )
    # One burst, one refresh (the stream coalesces; the page does not fetch per event).
    assert 1 <= len(requests) <= 2
    assert page.locator('td[data-queue-state="waiting"]').first.inner_text() == "6"
    shot(page, "live-03-overview")
    assert console.errors == []


#: The explorer's result rows number the given count.
ROWS_ARE = "n => document.querySelectorAll('#results tbody tr').length === n"


def test_the_explorer_follows_changes_while_its_live_box_is_ticked(
    page: Any, live_server: Any, main: RedisJobStore, console: ConsoleLog
) -> None:
    for n in range(3):
        main.enqueue(EnqueueRequest(id=f"e-{n}", name="Mail", queue="mail"))
    base = live_server.url
    log_in(page, base, "/jobs/?store=main&queue=mail")
    wait_live(page)
    assert page.locator("#results tbody tr").count() == 3
    requests = polls(page)

    # Unticked, the stream's events leave the results alone (a reader keeps their place).
    main.enqueue(EnqueueRequest(id="e-3", name="Mail", queue="mail"))
    page.wait_for_timeout(1_500)
    assert page.locator("#results tbody tr").count() == 3
    assert requests == []

    page.locator("#live-refresh").check()
    for n in range(4, 7):
        main.enqueue(EnqueueRequest(id=f"e-{n}", name="Mail", queue="mail"))
    page.wait_for_function(ROWS_ARE, arg=7, timeout=5_000)
    # One burst, one refresh or two (the stream coalesces events).
    assert 1 <= len(requests) <= 2
    # A state change shows in its row.
    claimed = main.claim("mail", ["Mail"], "w:1", 30_000).job
    assert claimed is not None
    row = page.locator("#results tbody tr", has=page.locator(f'a[title="{claimed.id}"]'))
    row.locator(".badge", has_text="active").wait_for(timeout=5_000)
    # And no timed poll while the stream is live: twice the 5 s period, nothing.
    settled = len(requests)
    page.wait_for_timeout(6_000)
    assert len(requests) == settled
    shot(page, "live-04-explorer")
    assert console.errors == []


def test_over_the_connection_limit_the_page_polls_instead(
    page: Any, live_server: Any, main: RedisJobStore, settings: Any, console: ConsoleLog
) -> None:
    # One slot, held here for the whole test (streams of earlier tests' pages may still be
    # open: a full house probes them, and those end, but this one never does).
    settings.MQ_EVENTS_MAX_CONNECTIONS = 1
    held = live.SLOTS.acquire(10**9)
    try:
        base = live_server.url
        log_in(page, base, "/")
        assert page.locator("[sse-connect]").count() == 1
        assert page.locator('[data-stream="live"]').count() == 0
        main.enqueue(EnqueueRequest(name="Mail", queue="mail"))
        # Refused after the stream waited SLOT_WAIT_S for a slot; picked up by the 5 s poll.
        page.wait_for_function(
            WAITING_IS,
            arg="1",
            timeout=20_000,
        )
        status = page.locator(".live-status").first.inner_text()
        assert status == "Refreshes every 5 seconds while this tab is visible."
    finally:
        if held is not None:
            held.release()
    # The refused stream is the only error: the browser's 503 and htmx's sseError log.
    unexpected = [e for e in console.errors if "/events/" not in e and "[object Event]" not in e]
    assert unexpected == []
    assert any("503" in e for e in console.errors)
