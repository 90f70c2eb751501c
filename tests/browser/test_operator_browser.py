"""Screens for operators in a real browser (issue 29): on a 390 px phone every control is at
least 24 px and no button label breaks inside a word, the explorer's filters start folded;
tables that hold all their rows sort by any column; the id copy button copies."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.browser.conftest import phone_page, shot
from tests.browser.test_a11y_browser import pages
from tests.browser.test_dashboard_browser import Demo, demo, log_in  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

#: Controls smaller than 24 px, and words broken across lines inside buttons and summaries.
PROBLEMS_JS = """() => {
  const out = {small: [], broken: []};
  // Rendered, and not inside a visually hidden (clipped) container such as a phone's thead.
  const visible = e => {
    if (e.offsetParent === null || getComputedStyle(e).visibility === 'hidden') return false;
    for (let a = e.parentElement; a; a = a.parentElement) {
      const r = a.getBoundingClientRect();
      if (r.width <= 1 || r.height <= 1) return false;
    }
    return true;
  };
  const controls = document.querySelectorAll(
    'button, input:not([type=hidden]), select, a.small-button, summary');
  for (const e of controls) {
    if (!visible(e) || e.closest('.visually-hidden')) continue;
    const r = e.getBoundingClientRect();
    if (r.width < 24 || r.height < 24) {
      out.small.push(`${e.tagName}.${e.className} "${(e.innerText || e.value || e.name || '').slice(0, 30)}" ${Math.round(r.width)}x${Math.round(r.height)}`);
    }
  }
  for (const e of document.querySelectorAll('button, a.small-button, summary, .badge')) {
    if (!visible(e)) continue;
    const walker = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const text = node.textContent;
      const re = /\\S+/g;
      let m;
      while ((m = re.exec(text))) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set([...range.getClientRects()].filter(x => x.width > 0).map(x => Math.round(x.top)));
        if (tops.size > 1) out.broken.push(`${e.tagName} "${m[0]}"`);
      }
    }
  }
  return out;
}"""


def test_phone_controls_are_touch_sized_and_labels_keep_whole_words(
    browser: Any,
    live_server: Any,
    demo: Demo,  # noqa: F811
) -> None:
    with phone_page(browser) as phone:
        base = live_server.url
        log_in(phone, base, "/")
        report = []
        for label, path in pages(demo).items():
            phone.goto(base + path)
            phone.wait_for_load_state("networkidle")
            found = phone.evaluate(PROBLEMS_JS)
            if found["small"] or found["broken"]:
                report.append(f"{label}: small {found['small'][:6]} broken {found['broken'][:6]}")
        assert not report, "\n".join(report)
        # The explorer's filters start folded on a phone; the search box stays in view.
        phone.goto(base + "/jobs/?store=main&state=failed")
        assert phone.locator("details.filter-panel").get_attribute("open") is None
        assert phone.locator("#f-q").is_visible()
        shot(phone, "phone-explorer-folded")
        phone.locator("details.filter-panel > summary").click()
        assert phone.locator("#f-queue").is_visible()


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
