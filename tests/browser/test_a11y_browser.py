"""Accessibility and phone layout in a real browser: axe-core finds no violation on any page
in light or dark mode; at 390 px no page scrolls sideways; the keyboard keeps its place
across live refreshes and explorer swaps, and a skip link leads to the content."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from store import Claimed, EnqueueRequest, Retry
from store.jobs import encode_failure
from tests.browser.conftest import ARTIFACTS, PHONE_PROBLEMS_JS, ConsoleLog, phone_page, shot
from tests.browser.test_dashboard_browser import Demo, demo, log_in  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

AXE = Path(__file__).resolve().parent / "vendor" / "axe.min.js"


def bulk_run_entry(demo: Demo) -> int:  # noqa: F811
    """The audit entry of a finished bulk run (its result page is one of the pages)."""
    from django.contrib.auth import get_user_model

    from mqadmin.models import AuditEntry

    user = get_user_model().objects.get(username="ops")
    entry = AuditEntry.record(
        user,
        "bulk_retry",
        store="main",
        target="store=main states=failed",
        params={
            "query": "store=main&state=failed",
            "verb": "retry",
            "count": 2,
            "succeeded": 1,
            "scanned": 2,
            "ids": [demo.flaky, "j-1"],
            "failed": [
                ["j-1", "Cannot retry j-1: the job is completed — only failed jobs can be retried."]
            ],
            "failed_count": 1,
            "done_before": 0,
            "expected": 2,
            "stopped_at": None,
        },
        result="retry: 1 succeeded, 1 failed",
        ok=False,
    )
    return int(entry.id)


def pages(demo: Demo) -> dict[str, str]:  # noqa: F811
    return {
        "bulk-result": f"/bulk/runs/{bulk_run_entry(demo)}/",
        "overview": "/",
        "explorer": "/jobs/?store=main",
        "explorer-failed": "/jobs/?store=main&state=failed",
        "job": f"/stores/main/jobs/{demo.flaky}",
        "flow": "/stores/main/flows/demo/monthly-report",
        "flows": "/flows/?store=main",
        "flows-settled": "/flows/?store=main&state=settled",
        "failures": "/failures/?store=main",
        "workers": "/workers/",
        "job-metrics": "/metrics/jobs/",
        "outbox": "/outbox/",
        "indexes": "/indexes/",
        "schedules": "/schedules/",
        "audit": "/audit/",
        "bulk-preview": "/bulk/preview/?store=main&verb=retry&state=failed",
        "queue": "/stores/main/queues/emails",
        "search-errors": "/jobs/?store=main&q=error%3Aerror",
    }


def run_axe(page: Any) -> list[dict[str, Any]]:
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        # Evaluated over the DevTools protocol, so the page's CSP does not block it.
        page.evaluate(AXE.read_text(encoding="utf-8"))
    result = page.evaluate("async () => JSON.stringify((await axe.run(document)).violations)")
    return json.loads(result)


def describe(violations: list[dict[str, Any]]) -> str:
    lines = []
    for v in violations:
        lines.append(f"{v['id']} ({v['impact']}): {v['help']}")
        for node in v["nodes"][:4]:
            lines.append(f"    {node['target']} {node.get('failureSummary', '')[:220]!r}")
    return "\n".join(lines)


@pytest.fixture
def axe_ready() -> None:
    if not AXE.exists():
        pytest.skip(
            "axe-core is not installed: run `make browser-deps` (.ci/install-browser-deps.sh)"
        )


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_finds_no_violation_on_any_page(
    page: Any,
    live_server: Any,
    demo: Demo,  # noqa: F811
    console: ConsoleLog,
    axe_ready: None,
    scheme: str,
) -> None:
    base = live_server.url
    page.emulate_media(color_scheme=scheme)
    log_in(page, base, "/")
    report = []
    for label, path in pages(demo).items():
        page.goto(base + path)
        page.wait_for_load_state("networkidle")
        violations = run_axe(page)
        if violations:
            report.append(f"== {label} ({path}) [{scheme}]\n{describe(violations)}")
        if scheme == "dark":
            shot(page, f"dark-{label}")
    assert not report, "\n".join(report)


def test_no_page_scrolls_sideways_or_has_small_controls_on_a_390px_phone(
    browser: Any,
    live_server: Any,
    demo: Demo,  # noqa: F811
) -> None:
    with phone_page(browser) as phone:
        base = live_server.url
        log_in(phone, base, "/")
        wide = []
        for label, path in pages(demo).items():
            phone.goto(base + path)
            phone.wait_for_load_state("networkidle")
            shot(phone, f"phone-{label}")
            phone.screenshot(path=str(ARTIFACTS / f"phone-{label}-top.png"))
            if AXE.exists():
                violations = run_axe(phone)
                if violations:
                    wide.append(f"{label} at 390 px: {describe(violations)}")
            # Touch-sized controls (>= 24 px) and button labels that keep whole words.
            found = phone.evaluate(PHONE_PROBLEMS_JS)
            if found["small"] or found["broken"]:
                wide.append(f"{label}: small {found['small'][:6]} broken {found['broken'][:6]}")
            width = phone.evaluate("document.documentElement.scrollWidth")
            if width > 390:
                culprits = phone.evaluate(
                    """() => [...document.querySelectorAll('body *')]
                        .filter(e => e.getBoundingClientRect().right > 391)
                        .filter(e => !e.closest('.table-scroll'))
                        .slice(0, 6)
                        .map(e => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))"""
                )
                wide.append(f"{label}: {width}px wide; {culprits}")
        assert not wide, "\n".join(wide)
        # The job table shows every column's value on a phone (rows become cards).
        phone.goto(base + "/jobs/?store=main&state=failed")
        row = phone.locator("#results table.jobs tbody tr").first
        for cell in ("name", "queue"):
            box = row.locator(f"td.{cell}").bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, cell
        # The explorer's filters start folded on a phone; the search box stays in view.
        assert phone.locator("details.filter-panel").get_attribute("open") is None
        assert phone.locator("#f-q").is_visible()
        shot(phone, "phone-explorer-folded")
        phone.locator("details.filter-panel > summary").click()
        assert phone.locator("#f-queue").is_visible()


def swapped(page: Any, selector: str, action: Any) -> None:
    """Run ``action`` and wait until ``selector`` was replaced by an htmx swap and settled
    (app.js puts focus back on htmx:afterSettle; its listener, added first, runs first)."""
    page.evaluate(
        """sel => {
          document.querySelector(sel).setAttribute('data-old', '1');
          window.__mqSettled = false;
          document.addEventListener('htmx:afterSettle', function settled() {
            const e = document.querySelector(sel);
            if (e && !e.hasAttribute('data-old')) {
              window.__mqSettled = true;
              document.removeEventListener('htmx:afterSettle', settled);
            }
          });
        }""",
        selector,
    )
    action()
    page.wait_for_function("() => window.__mqSettled === true")


def test_the_keyboard_keeps_its_place(
    page: Any,
    live_server: Any,
    demo: Demo,  # noqa: F811
    console: ConsoleLog,
) -> None:
    base = live_server.url
    log_in(page, base, "/")

    # The skip link is the first stop and leads to the content.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip-link"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"

    # A live refresh of the overview keeps focus on the same count link.
    link = page.locator("#stores table.queues a.count-link").nth(3)
    href = link.get_attribute("href")
    link.focus()
    swapped(
        page,
        "#stores",
        lambda: page.evaluate("document.body.dispatchEvent(new CustomEvent('mq:visible'))"),
    )
    assert page.evaluate("document.activeElement.getAttribute('href')") == href
    assert page.evaluate("document.activeElement.classList.contains('count-link')")

    # The chart's numbers are reachable without hovering.
    summary = page.locator("details.chart-values summary").first
    summary.focus()
    page.keyboard.press("Enter")
    assert page.locator("details.chart-values table").first.is_visible()
    assert page.locator("details.chart-values tbody tr").first.locator("td").count() == 3
    # They stay open, their summary focused, through the region's refreshes (every minute).
    swapped(
        page,
        "#throughput",
        lambda: page.evaluate("document.body.dispatchEvent(new CustomEvent('mq:visible'))"),
    )
    assert page.locator("details.chart-values table").first.is_visible()
    assert page.evaluate(
        "document.activeElement.matches('details.chart-values > summary')"
        " && document.activeElement.parentElement.isConnected"
    )

    # Next and Previous keep focus on the pager; Apply keeps it on the button.
    page.goto(base + "/jobs/?store=main&limit=20")
    page.locator("a[rel=next]").focus()
    swapped(page, "#results", lambda: page.keyboard.press("Enter"))
    assert page.evaluate("document.activeElement.getAttribute('rel')") == "next"
    page.locator("a[rel=prev]").focus()
    swapped(page, "#results", lambda: page.keyboard.press("Enter"))
    # Back on the first page there is no Previous any more: the results region has focus.
    assert page.evaluate("document.activeElement.id") == "results"
    page.locator("input[name=state][value=completed]").check()
    apply = page.get_by_role("button", name="Apply filters")
    apply.focus()
    swapped(page, "#results", lambda: page.keyboard.press("Enter"))
    assert page.evaluate("document.activeElement.textContent.trim()") == "Apply filters"
    shot(page, "keyboard-after-apply")
    assert not console.errors, console.errors


def test_live_explorer_and_local_times(
    page: Any,
    live_server: Any,
    demo: Demo,  # noqa: F811
    console: ConsoleLog,
) -> None:
    from store import EnqueueRequest

    base = live_server.url
    log_in(page, base, "/jobs/?store=main&queue=live&state=waiting")
    assert page.locator("#results table.jobs").count() == 0
    page.locator("#live-refresh").check()
    new_id = demo.main.enqueue(EnqueueRequest(name="LiveJob", queue="live")).id
    page.wait_for_selector(f'#results td.id a[title="{new_id}"]', timeout=12_000)

    # Absolute times switch to the browser's zone (here Tokyo) and back, remembered.
    tokyo = page.context.browser.new_context(timezone_id="Asia/Tokyo", locale="en-US")
    tab = tokyo.new_page()
    try:
        log_in(tab, base, f"/stores/main/jobs/{demo.flaky}")
        first = tab.locator("time.abs").first
        utc = first.inner_text()
        assert utc.endswith("UTC")
        tab.locator(".time-zone-toggle").click()
        assert tab.locator(".time-zone-toggle").get_attribute("aria-pressed") == "true"
        assert "GMT+9" in first.inner_text() and first.inner_text() != utc
        tab.reload()
        assert "GMT+9" in tab.locator("time.abs").first.inner_text()
        tab.locator(".time-zone-toggle").click()
        assert tab.locator("time.abs").first.inner_text() == utc
    finally:
        tokyo.close()
    assert not console.errors, console.errors


def test_a_running_jobs_refresh_keeps_the_attempts_the_reader_opened(
    page: Any,
    live_server: Any,
    demo: Demo,  # noqa: F811
    console: ConsoleLog,
) -> None:
    """The job page of a job still to run refreshes every few seconds; the attempt's
    traceback the reader opened stays open, the other stays closed."""
    job = demo.main.enqueue(
        EnqueueRequest(name="Retried", queue="browser-retry", attempts_max=3)
    ).id
    for attempt in (1, 2):
        claimed = demo.main.claim(queue="browser-retry", names=["Retried"], token=f"w:{attempt}")
        assert isinstance(claimed, Claimed) and claimed.job.id == job
        try:
            raise TimeoutError(f"the upstream took too long (try {attempt})")
        except TimeoutError as exc:
            # Retried at once, then in a minute: the job stays delayed, its page live.
            delay = 0 if attempt == 1 else 60_000
            demo.main.ack(job, f"w:{attempt}", Retry(delay, encode_failure(exc)))
    base = live_server.url
    log_in(page, base, f"/stores/main/jobs/{job}")
    attempts = page.locator("#job-summary li details")
    assert attempts.count() == 2
    assert [attempts.nth(i).get_attribute("open") for i in (0, 1)] == [None, None]
    attempts.nth(1).locator("summary").click()

    swapped(
        page,
        "#job-summary",
        lambda: page.evaluate("document.body.dispatchEvent(new CustomEvent('mq:visible'))"),
    )

    attempts = page.locator("#job-summary li details")
    assert attempts.nth(0).get_attribute("open") is None
    assert attempts.nth(1).get_attribute("open") is not None
    assert attempts.nth(1).locator("pre.traceback").is_visible()
    assert not console.errors, console.errors


def test_the_explorer_disables_impossible_combinations_before_submit(
    page: Any,
    live_server: Any,
    demo: Demo,  # noqa: F811
    console: ConsoleLog,
) -> None:
    base = live_server.url
    log_in(page, base, "/jobs/?store=main")
    order = page.locator("#f-order-by")

    def disabled_options() -> set[str]:
        return set(order.evaluate("s => [...s.options].filter(o => o.disabled).map(o => o.value)"))

    def disabled_states() -> set[str]:
        return set(
            page.locator("input[name=state]").evaluate_all(
                "els => els.filter(e => e.disabled).map(e => e.value)"
            )
        )

    # Nothing ticked: the state orders need states, so they are disabled.
    assert disabled_options() == {"run_at", "finished_at", "position"}
    page.locator("input[name=state][value=failed]").check()
    assert disabled_options() == {"run_at", "position"}
    order.select_option("finished_at")
    # Finished time serves terminal states only: the others cannot be ticked.
    assert disabled_states() == {"waiting", "delayed", "active", "waiting-children"}
    page.locator("input[name=state][value=completed]").check()
    before = page.locator("#results").inner_html()
    page.get_by_role("button", name="Apply filters").click()
    page.wait_for_function(
        "html => document.querySelector('#results').innerHTML !== html", arg=before
    )
    assert "finished-time sets of completed, failed jobs" in (page.text_content(".plan") or "")
    # Back to automatic: every state can be ticked again.
    order.select_option("auto")
    assert disabled_states() == set()
    page.locator("input[name=state][value=waiting]").check()
    assert disabled_options() == {"run_at", "finished_at", "position"}
    assert not console.errors, console.errors


def test_a_nested_flow_reads_on_a_390px_phone(
    browser: Any,
    live_server: Any,
    demo: Demo,  # noqa: F811
) -> None:
    """The flow page's child cards carry their labels, a child that is no flow has no empty
    "Nested flow" line, an expanded nested flow fills the card, and its page links back up."""
    context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=1)
    phone = context.new_page()
    phone.set_default_timeout(15_000)
    try:
        base = live_server.url
        root = "/stores/main/flows/demo/monthly-report"
        log_in(phone, base, root)
        empty = phone.locator("#children table.children td.flow-cell:empty").all()
        assert empty and not any(cell.is_visible() for cell in empty)
        label = phone.evaluate(
            "getComputedStyle(document.querySelector('#children th.child-key'), '::before').content"
        )
        assert label == '"Child"'
        phone.locator("#children").get_by_role("link", name="Expand flow").click()
        phone.wait_for_selector(".nested-flow table.children")
        shot(phone, "phone-flow-nested")
        card = phone.locator(".nested-flow table.children tbody tr").first
        box = card.bounding_box()
        assert box is not None and box["width"] > 250, box
        assert card.locator("th.child-key a").inner_text().strip()
        assert phone.evaluate("document.documentElement.scrollWidth") <= 390
        phone.locator(".nested-flow").get_by_role("link", name="open this flow").click()
        phone.wait_for_selector(".flow-crumbs a.ancestor")
        phone.get_by_role("link", name="Up to the parent flow").click()
        phone.wait_for_url(re.compile(re.escape(base + root) + "$"))
    finally:
        context.close()
