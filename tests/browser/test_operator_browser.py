"""Screens for operators in a real browser (issue 29): tables that hold all their rows sort by
any column; the id copy button copies.  (The phone checks, touch-sized controls, whole-word
labels and folded filters, run in test_a11y_browser.py's walk over every page at 390 px.)"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.browser.conftest import shot
from tests.browser.test_dashboard_browser import Demo, demo, log_in  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def test_tables_that_hold_all_their_rows_sort_by_any_column(
    page: Any,
    live_server: Any,
    demo: Demo,  # noqa: F811
) -> None:
    base = live_server.url
    log_in(page, base, "/")
    table = page.locator("table.queues").first
    header = table.locator("th", has_text="completed").locator("button.sort")

    def column() -> list[int]:
        cells = table.locator("tbody td[data-queue-state='completed']")
        return [int(v) for v in cells.evaluate_all("els => els.map(e => e.dataset.sort)")]

    assert len(column()) >= 3
    header.click()
    assert column() == sorted(column())
    assert table.locator("th[aria-sort='ascending']").count() == 1
    header.click()
    assert column() == sorted(column(), reverse=True)
    assert table.locator("th[aria-sort='descending']").count() == 1
    shot(page, "overview-sorted")
    # Job metrics sort by their values, not their formatted text.
    page.goto(base + "/metrics/jobs/?period=24h")
    metrics = page.locator("table.job-metrics").first
    metrics.locator("th", has_text="Runs").first.locator("button.sort").click()
    runs = metrics.locator("tbody td[data-metric='runs']").all_inner_texts()
    values = [int(re.sub(r"\D", "", v)) for v in runs]
    assert values == sorted(values)


def test_the_copy_button_copies_a_job_id(
    browser: Any,
    live_server: Any,
    demo: Demo,  # noqa: F811
) -> None:
    context = browser.new_context()
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    page = context.new_page()
    try:
        base = live_server.url
        log_in(page, base, "/jobs/?store=main&state=failed")
        first = page.locator("#results table.jobs tbody tr").first
        job_id = first.locator("td.id a").get_attribute("title")
        first.locator("button.copy").click()
        page.wait_for_selector("button.copy.copied")
        assert page.evaluate("navigator.clipboard.readText()") == job_id
    finally:
        context.close()
