"""The dashboard in a real browser: log in, filter, page, open a job, retry it, watch it
finish, open a flow, and the operations pages.  Each step saves a screenshot to
``tests/browser/artifacts/`` and no step may log a console error (a CSP violation
would be one)."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.core.management import call_command

from mqadmin import services
from store import Claimed, Complete, EnqueueRequest, Fail, RedisJobStore
from store.jobs import encode_failure
from tests.browser.conftest import ConsoleLog, shot
from tests.conftest import delete_prefix

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "browser-pass-1"


@dataclass
class Demo:
    main: RedisJobStore
    side: RedisJobStore
    flaky: str


@pytest.fixture
def demo(
    settings: Any, redis_url: str, redis_client: Any, prefix: str, django_user_model: Any
) -> Iterator[Demo]:
    """Two stores filled by seed_demo, a job that failed once, and an admin user."""
    settings.MQ_STORES = {
        "main": {"prefix": prefix, "url": redis_url},
        "side": {"prefix": f"{prefix}-side", "url": redis_url},
    }
    settings.MQ_DASHBOARD_READ_ONLY = False
    services.reset()
    call_command(
        "seed_demo", "--store", "main", "--jobs", "800", "--hours", "2", stdout=io.StringIO()
    )
    main, side = services.get_named_store("main"), services.get_named_store("side")
    flaky = main.enqueue(
        EnqueueRequest(
            name="FlakyExport", queue="browser", payload={"export": "ledger-2026-11.csv"}
        )
    ).id
    claimed = main.claim(queue="browser", names=["FlakyExport"], token="w-browser:1")
    assert isinstance(claimed, Claimed) and claimed.job.id == flaky
    try:
        raise ConnectionResetError("upstream closed the connection after 12,288 bytes")
    except ConnectionResetError as exc:
        main.ack(flaky, "w-browser:1", Fail(encode_failure(exc)))
    django_user_model.objects.create_superuser("ops", password=PASSWORD)
    yield Demo(main, side, flaky)
    services.reset()
    delete_prefix(redis_client, f"{prefix}-side")


def log_in(page: Any, base: str, path: str = "/") -> None:
    page.goto(base + path)
    assert "/accounts/login/" in page.url
    page.get_by_label("Username").fill("ops")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(re.escape(base + path.split("?")[0])))


def row_ids(page: Any) -> list[str]:
    return page.locator("#results table.jobs td.id a").all_inner_texts()


def wait_for_rows_change(page: Any, before: list[str]) -> list[str]:
    page.wait_for_function(
        "before => JSON.stringify(Array.from(document.querySelectorAll('#results table.jobs td.id a')).map(a => a.textContent)) !== before",
        arg=json.dumps(before, separators=(",", ":")),
    )
    return row_ids(page)


def test_log_in_filter_page_open_retry_and_watch_a_job(
    page: Any, live_server: Any, demo: Demo, console: ConsoleLog
) -> None:
    base = live_server.url
    log_in(page, base, "/")
    page.wait_for_selector("#stores table.stores")
    assert page.locator('#stores td[data-state="completed"]').first.inner_text() != "0"
    assert page.locator("svg.throughput polyline.line-completed").count() == 2
    shot(page, "01-overview")

    # Filter: completed ChargeCard jobs, 20 per page (an htmx swap that pushes the URL).
    page.get_by_role("link", name="Jobs", exact=True).click()
    page.wait_for_selector("#results table.jobs")
    shot(page, "02-explorer")
    page.get_by_label("Job name").fill("ChargeCard")
    page.locator('input[name="state"][value="completed"]').check()
    page.get_by_label("Per page").select_option("20")
    before = row_ids(page)
    page.get_by_role("button", name="Apply filters").click()
    first = wait_for_rows_change(page, before)
    page.wait_for_url(re.compile(r"name=ChargeCard.*state=completed"))
    assert len(first) == 20
    names = page.locator("#results table.jobs td.name").all_inner_texts()
    assert set(names) == {"ChargeCard"}
    assert set(page.locator("#results table.jobs td .badge").all_inner_texts()) == {"completed"}
    # Completed jobs of one name are read from that name's finished-time set (automatic order).
    assert "the finished-time sets of “ChargeCard” per state (completed)" in (
        page.locator(".plan").text_content() or ""
    )
    shot(page, "03-filtered")

    # Forward, back, and the browser's own history.
    page.get_by_role("link", name="Next ›").click()
    second = wait_for_rows_change(page, first)
    page.wait_for_url(re.compile(r"cursor="))
    assert not set(first) & set(second) and len(second) == 20
    shot(page, "04-second-page")
    page.get_by_role("link", name="‹ Previous").click()
    assert wait_for_rows_change(page, second) == first
    page.go_back()
    assert wait_for_rows_change(page, first) == second
    page.go_back()
    assert wait_for_rows_change(page, second) == first

    # Open a job by its id from the header's search box; it failed with a traceback.
    page.get_by_label("Search jobs").fill(demo.flaky)
    page.get_by_role("button", name="Search", exact=True).click()
    page.wait_for_url(re.compile(rf"/stores/main/jobs/{re.escape(demo.flaky)}$"))
    assert page.locator("#job-summary").get_attribute("data-state") == "failed"
    assert "ConnectionResetError" in page.locator("section.failure").inner_text()
    assert "Traceback (most recent call last)" in page.locator("pre.traceback").first.inner_text()
    shot(page, "05-job-failed")

    # Retry it: back to waiting, and the page follows the job while a worker runs it.
    page.get_by_role("button", name="Retry").click()
    page.wait_for_selector('#job-summary[data-state="waiting"]')
    assert f"Retried {demo.flaky}" in page.locator(".messages").inner_text()
    shot(page, "06-job-retried")
    claimed = demo.main.claim(
        queue="browser", names=["FlakyExport"], token="w-browser:2", lock_duration_ms=60_000
    )
    assert isinstance(claimed, Claimed) and claimed.job.id == demo.flaky
    page.wait_for_selector('#job-summary[data-state="active"]', timeout=10_000)
    assert "w-browser" in page.locator("section.lock-panel").inner_text()
    shot(page, "07-job-running")
    demo.main.ack(
        demo.flaky, "w-browser:2", Complete({"rows": 48_211, "file": "ledger-2026-11.csv"})
    )
    page.wait_for_selector('#job-summary[data-state="completed"]', timeout=10_000)
    outcomes = page.locator("ol.timeline .attempt-head .badge").all_inner_texts()
    assert outcomes == ["failed", "completed"]
    shot(page, "08-job-completed")

    # Open the demo flow from its parent's page and expand the nested flow (htmx, one level).
    page.goto(base + "/stores/main/jobs/demo/monthly-report")
    page.get_by_role("link", name="12 children").click()
    page.wait_for_selector("#children table.children")
    assert "Why is this parent still waiting?" in page.content()
    page.get_by_role("link", name="Expand flow").click()
    page.wait_for_selector(".nested-flow table.children")
    assert page.locator(".nested-flow table.children tbody tr").count() >= 3
    shot(page, "09-flow")
    page.get_by_role("link", name="Collapse flow").click()
    page.wait_for_selector(".nested-flow", state="detached")
    assert page.get_by_role("link", name="Expand flow").get_attribute("aria-expanded") == "false"

    assert console.errors == [], "\n".join(console.errors)


def test_operations_pages_and_actions(
    page: Any, live_server: Any, demo: Demo, console: ConsoleLog
) -> None:
    base = live_server.url
    log_in(page, base, "/outbox/")
    assert page.locator("text=no live worker routes it").count() >= 1
    shot(page, "10-outbox")

    page.goto(base + "/indexes/")
    assert page.locator(".badge.ok", has_text="enabled").count() == 4
    shot(page, "11-indexes")

    page.goto(base + "/schedules/")
    assert page.locator("text=at 07:00 on Monday to Friday").count() == 1
    page.locator("tr", has_text="CleanupTempFiles/every-15-min").get_by_role(
        "button", name="Trigger now"
    ).click()
    assert "Triggered “CleanupTempFiles/every-15-min”" in page.locator(".messages").inner_text()
    shot(page, "12-schedules")

    # Pause a queue from the overview (a confirm dialog, accepted), then resume it.
    page.goto(base + "/")
    page.locator("table.queues tr", has_text="emails").first.get_by_role(
        "button", name="Pause"
    ).click()
    page.wait_for_selector("table.queues .badge.paused")
    assert demo.main.paused_queues() == ["emails"]
    page.locator("table.queues tr", has_text="emails").first.get_by_role(
        "button", name="Resume"
    ).click()
    page.wait_for_load_state()
    assert demo.main.paused_queues() == []

    # Bulk: preview "retry every failed ChargeCard", then run it.
    page.goto(base + "/jobs/?store=main&name=ChargeCard&state=failed")
    failed_before = len(row_ids(page))
    assert failed_before > 0
    page.get_by_label("All matching this filter:").select_option("retry")
    page.get_by_role("button", name="Preview…").click()
    page.wait_for_selector("p.preview-count")
    assert f"{failed_before} job" in page.locator("p.preview-count").inner_text()
    shot(page, "13-bulk-preview")
    page.locator("form.confirm-form button").click()
    page.wait_for_selector("text=Every job matching the filter has been handled.")
    assert f"Bulk retry: {failed_before} succeeded, 0 failed" in page.locator("h1").inner_text()
    shot(page, "14-bulk-result")

    page.goto(base + "/audit/")
    actions = page.locator("table.audit td code").all_inner_texts()
    assert {"trigger_schedule", "pause", "resume", "bulk_retry"} <= set(actions)
    shot(page, "15-audit")

    assert console.errors == [], "\n".join(console.errors)


def test_polling_pauses_while_the_tab_is_hidden(page: Any, live_server: Any, demo: Demo) -> None:
    base = live_server.url
    log_in(page, base, "/")
    page.wait_for_selector("#stores")
    polls: list[str] = []
    page.on(
        "request",
        lambda request: polls.append(request.url) if request.headers.get("hx-request") else None,
    )

    page.evaluate(
        "() => { Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});"
        " document.dispatchEvent(new Event('visibilitychange')); }"
    )
    page.wait_for_timeout(6_500)
    hidden_polls = len(polls)
    page.evaluate(
        "() => { Object.defineProperty(document, 'hidden', {configurable: true, get: () => false});"
        " document.dispatchEvent(new Event('visibilitychange')); }"
    )
    page.wait_for_timeout(1_000)

    assert hidden_polls == 0
    # Back to visible: both fragments refresh at once, without waiting for the next tick.
    assert len(polls) >= 2


def test_set_group_limits_from_the_overview_and_see_the_busiest_groups(
    page: Any, live_server: Any, demo: Demo, console: ConsoleLog
) -> None:
    from store import Rate

    demo.main.set_queue_limits("emails", concurrency=3, rate=Rate(100, 1_000))
    for group, n in (("tenant-42", 3), ("<b>x</b>", 2)):
        for _ in range(n):
            demo.main.enqueue(EnqueueRequest(name="SyncTenant", queue="tenants", group=group))
    base = live_server.url
    log_in(page, base, "/")
    row = page.locator("table.queues tr", has=page.locator("a", has_text="emails")).first
    row.get_by_text("Set limits…").click()
    assert row.get_by_label("Concurrency:", exact=True).input_value() == "3"
    assert row.get_by_label("Rate:", exact=True).input_value() == "100/s"

    # Typing survives the 5 s refresh of the counts (it waits while the form is open).
    row.get_by_label("Group concurrency:", exact=True).fill("2")
    row.get_by_label("Group rate:", exact=True).fill("10/min")
    page.wait_for_timeout(6_000)
    assert row.get_by_label("Group rate:", exact=True).input_value() == "10/min"
    shot(page, "16-set-limits")
    row.get_by_role("button", name="Set limits", exact=True).click()
    page.wait_for_selector(".messages")
    limits = demo.main.queue_limits("emails")
    assert (limits.concurrency, limits.group_concurrency) == (3, 2)
    assert limits.group_rate == Rate(10, 60_000)
    assert (
        "max 2 running per group · group rate 10/min"
        in page.locator("[data-queue-limits]").first.inner_text()
    )

    page.locator("table.queues tr", has_text="tenants").first.get_by_role(
        "link", name="Job groups and limits of queue tenants"
    ).click()
    page.wait_for_selector("#groups table")
    names = page.locator("#groups tbody th").all_inner_texts()
    assert names == ["tenant-42", "<b>x</b>"]
    assert "2 groups with waiting jobs" in page.locator("#groups").inner_text()
    shot(page, "17-queue-groups")
    assert console.errors == [], "\n".join(console.errors)


def test_keyboard_and_selection(
    page: Any, live_server: Any, demo: Demo, console: ConsoleLog
) -> None:
    base = live_server.url
    log_in(page, base, "/jobs/?store=main&state=failed")
    apply = page.get_by_role("button", name="Apply to selected")
    assert apply.is_disabled()

    page.locator("input.select-all").check()
    assert page.locator("#results input[name=ids]:checked").count() == len(row_ids(page))
    assert apply.is_enabled()
    assert "selected" in page.locator(".selected-count").inner_text()

    # Another store reloads the whole page (its own names, queues and heading).
    page.locator("#f-store").select_option("side")
    page.wait_for_url(re.compile(r"store=side"))
    page.wait_for_selector("h1:has-text('side')")
    assert page.locator("#f-store").input_value() == "side"
    # The lookup box follows the page's store; the job we look up lives in main.
    assert page.locator("#lookup-store").input_value() == "side"
    page.locator("#lookup-store").select_option("main")

    page.locator("body").click(position={"x": 5, "y": 300})
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "lookup-id"
    page.keyboard.type(demo.flaky)
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/stores/main/jobs/"))
    assert console.errors == [], "\n".join(console.errors)
