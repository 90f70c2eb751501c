"""The job metrics page in a real browser: rows and charts render under the CSP, the
period switch works, and a phone-width viewport scrolls the table, not the page."""

from __future__ import annotations

from typing import Any

import pytest

from store import Claimed, Complete, EnqueueRequest, Fail
from tests.browser.conftest import ConsoleLog, shot
from tests.browser.test_dashboard_browser import Demo, demo, log_in  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def run(job_store: Any, name: str, outcome: Any) -> None:
    job_id = job_store.enqueue(EnqueueRequest(name=name, queue="metrics")).id
    claimed = job_store.claim(queue="metrics", names=[name], token="w-metrics:1")
    assert isinstance(claimed, Claimed) and claimed.job.id == job_id
    job_store.ack(job_id, "w-metrics:1", outcome)


def test_job_metrics_page(
    page: Any,
    live_server: Any,
    demo: Demo,  # noqa: F811
    console: ConsoleLog,
) -> None:
    for _ in range(6):
        run(demo.main, "BrowserMetricsJob", Complete(None))
    run(demo.main, "BrowserMetricsJob", Fail({"message": "no"}))
    base = live_server.url
    log_in(page, base, "/metrics/jobs/")
    row = page.locator('tr[data-job-name="BrowserMetricsJob"]')
    assert row.locator('[data-metric="runs"]').inner_text() == "7"
    assert row.locator('[data-metric="failures"]').inner_text() == "1"
    assert row.locator('[data-metric="failure-rate"]').inner_text() == "14.3 %"
    chart = row.locator("svg.run-chart")
    assert chart.is_visible()
    assert chart.locator("rect.bar-runs").count() >= 1
    assert chart.locator("rect.bar-failures").count() >= 1
    shot(page, "30-job-metrics")

    page.get_by_role("navigation", name="Period").get_by_role("link", name="72h").click()
    page.wait_for_url(f"{base}/metrics/jobs/?period=72h")
    assert (
        page.locator('tr[data-job-name="BrowserMetricsJob"] [data-metric="runs"]').inner_text()
        == "7"
    )
    assert "last 72 hours" in page.locator("h2").first.inner_text()
    shot(page, "31-job-metrics-72h")

    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(base + "/metrics/jobs/")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    shot(page, "32-job-metrics-phone")
    assert overflow <= 0, f"the page scrolls sideways by {overflow}px at 390px"
    assert console.errors == [], "\n".join(console.errors)
