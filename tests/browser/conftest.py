"""Browser tests: real headless Chromium (Debian's) driven by Playwright's Python package.

Install both with ``bash .ci/install-browser-deps.sh`` (``make browser-deps``).
Without them every test here is skipped with the reason, so ``make test`` on a fresh
machine still passes.  The browser binary is ``$MQ_CHROMIUM`` or ``/usr/bin/chromium``;
Playwright's own browser downloads (``playwright install``) are never used.

Screenshots go to ``tests/browser/artifacts/`` (git-ignored) for a human to look at.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    configured = os.environ.get("MQ_CHROMIUM")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    for candidate in ("/usr/bin/chromium", "/usr/bin/chromium-browser"):
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("chromium")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the browser tests, saying why, when chromium or playwright is missing."""
    reason = None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        reason = (
            "playwright is not installed: run `make browser-deps` (.ci/install-browser-deps.sh)"
        )
    if reason is None and chromium_path() is None:
        reason = "chromium not found (set MQ_CHROMIUM or run `make browser-deps`)"
    if reason is None:
        return
    here = Path(__file__).resolve().parent
    for item in items:
        if Path(str(item.fspath)).resolve().is_relative_to(here):
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the ORM calls these tests
    # make between browser steps are ordinary synchronous code.  Module scope: while that
    # loop is running no other test of the session could call asyncio.run() (pytest-django
    # runs these transactional tests before the plain ones, e.g. the runtime suite).
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


@pytest.fixture(scope="module", autouse=True)
def no_stray_embedded_redis() -> Iterator[None]:
    """A browser module leaves no embedded Redis running for the project's default store
    (the checkout's var/redis, when no MQ_REDIS_URL is set) that was not running before it:
    every test here serves stores of its own, so one would mean a request was served with
    the project's settings, and the server would outlive the run."""
    from mqadmin import services
    from store.embedded import EmbeddedRedis

    server = EmbeddedRedis(services.embedded_data_dir())
    before = server.is_running()
    yield
    if not before and server.is_running():
        server.stop()
        pytest.fail(
            f"a request was served with the project's default store: an embedded Redis was "
            f"started in {server.data_dir} (stopped now)"
        )


class ConsoleLog:
    """Console errors and page errors of one page (CSP violations are console errors)."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def attach(self, page: Any) -> None:
        self._page = page
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.errors.append(f"page error on {page.url}: {exc}"))

    def _console(self, message: Any) -> None:
        if message.type == "error":
            where = message.location.get("url", "") if message.location else ""
            self.errors.append(f"console error on {self._page.url} ({where}): {message.text}")


@pytest.fixture
def console() -> ConsoleLog:
    return ConsoleLog()


@pytest.fixture
def page(
    browser: Any, console: ConsoleLog, settings: Any, request: pytest.FixtureRequest
) -> Iterator[Any]:
    # settings: requested so that a test's settings (its MQ_STORES) are restored only after
    # the tab is closed and its last requests served.  A poll served after the restore
    # would open the project's default store -- an embedded Redis started in the
    # checkout's var/redis and left running.
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    # confirm() dialogs (data-confirm buttons) are accepted, as a user would.
    context.on("page", lambda p: p.on("dialog", lambda d: d.accept()))
    # Name the element and directive of any CSP violation in the console log.
    context.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => console.error("
        "'CSP violation: ' + e.violatedDirective + ' by ' + "
        "(e.target && e.target.outerHTML ? e.target.outerHTML.slice(0, 160) : e.sourceFile)));"
    )
    tab = context.new_page()
    tab.on("dialog", lambda dialog: dialog.accept())
    tab.set_default_timeout(15_000)
    console.attach(tab)
    server = (
        request.getfixturevalue("live_server") if "live_server" in request.fixturenames else None
    )
    try:
        yield tab
    finally:
        context.close()
        # The requests the tab sent last may still be served: let them end before the
        # test's database is flushed (tests/conftest.py InFlight).
        if server is not None:
            server.in_flight.wait_idle()


def shot(page: Any, name: str) -> Path:
    """A full-page screenshot in tests/browser/artifacts/<name>.png."""
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@contextlib.contextmanager
def phone_page(browser: Any) -> Iterator[Any]:
    """A page in a 390 x 844 px context (a phone), closed afterwards."""
    context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=1)
    phone = context.new_page()
    phone.set_default_timeout(15_000)
    try:
        yield phone
    finally:
        context.close()


#: Controls smaller than 24 px, and words broken across lines inside buttons and summaries.
PHONE_PROBLEMS_JS = """() => {
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
