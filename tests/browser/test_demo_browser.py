"""The living demo in a real browser: with `make run`'s demo worker running, `seed_demo`
fills the store and the dashboard shows jobs completing within seconds; the Workers page
lists the worker with its queues and job names, and quiets and resumes it."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from mqadmin import services
from tests.browser.conftest import ConsoleLog, shot
from tests.browser.test_a11y_browser import AXE, describe, run_axe
from tests.browser.test_dashboard_browser import PASSWORD, log_in
from tests.conftest import delete_prefix

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def count_of(page: Any, state: str) -> int:
    text = page.locator(f'#stores td[data-state="{state}"]').first.inner_text()
    return int(re.sub(r"\D", "", text) or 0)


@pytest.fixture
def demo_worker(
    settings: Any, redis_url: str, redis_client: Any, prefix: str, django_user_model: Any
) -> Iterator[str]:
    """The demo worker (runworker with mqadmin/demo's handlers) serving store "main"."""
    stores = {
        "main": {"prefix": prefix, "url": redis_url},
        "side": {"prefix": f"{prefix}-side", "url": redis_url},
    }
    settings.MQ_STORES = stores
    settings.MQ_DASHBOARD_READ_ONLY = False
    services.reset()
    env = {
        **os.environ,
        "MQ_STORES": json.dumps(stores),
        "MQ_DEMO": "1",
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "mqadmin.settings",
    }
    env.pop("MQ_JOB_MODULES", None)
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runworker", "--store", "main"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    main = services.get_named_store("main")
    try:
        deadline = time.monotonic() + 60
        while not main.live_workers():
            assert worker.poll() is None, "the demo worker exited"
            assert time.monotonic() < deadline, "the demo worker never announced itself"
            time.sleep(0.1)
        django_user_model.objects.create_superuser("ops", password=PASSWORD)
        yield main.live_workers()[0].worker_id
    finally:
        worker.terminate()
        worker.wait(30)
        services.reset()
        delete_prefix(redis_client, f"{prefix}-side")


def test_seed_demo_then_jobs_complete_on_the_dashboard(
    page: Any, live_server: Any, demo_worker: str, console: ConsoleLog
) -> None:
    out = io.StringIO()
    call_command("seed_demo", "--store", "main", "--jobs", "400", "--hours", "1", stdout=out)
    deadline = time.monotonic() + 10
    # The counts when the data was in, before the worker was let go.
    seeded = {
        state: int(n)
        for state, n in re.findall(r"(\w[\w-]*) (\d+)", out.getvalue().split("Seeded store", 1)[1])
    }
    assert f"Live workers resumed: {demo_worker}" in out.getvalue()

    base = live_server.url
    log_in(page, base, "/")
    page.wait_for_selector("#stores table.stores")
    # The overview shows more jobs completed than seed_demo left, within 10 s of seeding.
    page.wait_for_function(
        "n => Number(document.querySelector('#stores td[data-state=\"completed\"]')"
        ".innerText.replace(/\\D/g, '')) > n",
        arg=seeded["completed"],
        timeout=max(1_000, int((deadline - time.monotonic()) * 1000)),
    )
    assert count_of(page, "completed") > seeded["completed"]
    shot(page, "demo-01-overview-moving")

    # The Workers page: what the worker serves, and the buttons to quiet it.
    page.goto(base + "/workers/")
    row = page.locator(f'tr[data-worker="{demo_worker}"]')
    row.wait_for()
    assert "emails" in row.inner_text() and "SendWelcomeEmail" in row.inner_text()
    # ...and what it has done (a busy worker announces its totals every 2 s).
    totals = row.locator('td[data-label="Totals"]')
    for _ in range(20):
        if "completed" in totals.inner_text():
            break
        time.sleep(0.5)
        page.reload()
    assert re.search(r"completed [\d,]+", totals.inner_text()), totals.inner_text()
    shot(page, "demo-02-workers")
    if AXE.exists():  # the controls column too (the other axe tests have no live worker)
        violations = run_axe(page)
        assert not violations, describe(violations)
    row.get_by_role("button", name="Quiet").click()  # the confirm() is accepted
    page.wait_for_selector(f'tr[data-worker="{demo_worker}"][data-state="quiet"]')
    page.locator(f'tr[data-worker="{demo_worker}"]').get_by_role("button", name="Resume").click()
    page.wait_for_selector(f'tr[data-worker="{demo_worker}"][data-state="running"]')
    shot(page, "demo-03-workers-resumed")
    assert not console.errors, console.errors
