"""Numbers that agree or say what they cover (issue 29): due apart from delayed, the running
attempt counted, no rate without runs, the chart legend's period, formatted counts."""

from __future__ import annotations

import html as htmllib
import re
import time

import pytest
from django.test import Client

from mqadmin.queries.metrics import NameRow
from store import Claimed, EnqueueRequest
from store.monitoring import JobNameMetrics
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, text_of

pytestmark = pytest.mark.django_db


def test_the_overview_says_how_many_delayed_jobs_are_due(
    stores: Stores, admin_client_: Client
) -> None:
    main = stores.main
    for _ in range(3):
        main.enqueue(EnqueueRequest(name="Later", queue="slow", delay_ms=1))
    main.enqueue(EnqueueRequest(name="Later", queue="slow", delay_ms=3_600_000))
    main.enqueue(EnqueueRequest(name="Later", queue="fresh", delay_ms=3_600_000))
    time.sleep(0.01)
    html = text_of(admin_client_.get("/"))
    due = re.findall(r'<div class="muted small due" data-due="(\d+)"', html)
    assert due == ["3"]  # queue "slow" only; "fresh" has nothing due
    assert "3 due" in html


def test_a_running_attempt_is_counted(stores: Stores, admin_client_: Client) -> None:
    main = stores.main
    job_id = main.enqueue(EnqueueRequest(name="Work", queue="w", attempts_max=3)).id
    claimed = main.claim(queue="w", names=["Work"], token="t:1", lock_duration_ms=60_000)
    assert isinstance(claimed, Claimed)
    page = htmllib.unescape(text_of(admin_client_.get(f"/stores/main/jobs/{job_id}")))
    assert "1 of 3, attempt #1 running" in page
    rows = htmllib.unescape(text_of(admin_client_.get("/jobs/?store=main&state=active")))
    assert 'title="attempt #1 is running">1/3</td>' in rows


def test_no_failure_rate_without_runs() -> None:
    assert NameRow(JobNameMetrics("Idle"), chart=None).failure_percent == "—"  # type: ignore[arg-type]
    busy = NameRow(JobNameMetrics("Busy", runs=8, failures=2), chart=None)  # type: ignore[arg-type]
    assert busy.failure_percent == "25.0 %"


def test_the_chart_legend_says_its_period_and_counts_are_formatted(
    stores: Stores, admin_client_: Client
) -> None:
    main = stores.main
    main.enqueue_many([EnqueueRequest(name="Bulk", queue="big") for _ in range(1234)])
    html = text_of(admin_client_.get("/"))
    assert '<span class="muted small">last 3 h:</span>' in html
    assert 'aria-label="1,234 waiting jobs in queue big">1,234</a>' in html
    assert 'aria-label="1234 ' not in html


def test_store_internals_sit_in_a_menu_and_the_overview_flags_an_outbox_backlog(
    stores: Stores, admin_client_: Client
) -> None:
    from store import Complete
    from tests.mqadmin.test_views_common import fan_out

    html = text_of(admin_client_.get("/"))
    menu = re.search(r'<details class="nav-more".*?</details>', html, re.DOTALL)
    assert menu is not None
    assert 'href="/outbox/"' in menu.group(0) and 'href="/indexes/"' in menu.group(0)
    nav = html.split('<nav class="nav"', 1)[1].split("</nav>", 1)[0]
    assert nav.count('href="/outbox/"') == 1  # only in the menu: nothing waits
    assert "outbox-note" not in html
    fan_out(stores.main, stores.side, ["a", "b"])
    claimed = stores.side.claim(
        queue="parts", names=["RenderPart"], token="w:1", lock_duration_ms=30_000
    )
    assert isinstance(claimed, Claimed)
    stores.side.ack(claimed.job.id, "w:1", Complete({"ok": True}))
    assert stores.side.outbox_depth() == 1
    html = htmllib.unescape(text_of(admin_client_.get("/")))
    assert re.findall(r'class="callout warning outbox-note" data-outbox="(\d+)"', html) == ["1"]
    assert "1 flow result waits in this store's outbox to be relayed to its parent" in html
