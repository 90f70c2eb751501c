"""Smaller truths of issue 16: absolute times beside relative ones, overdue delayed jobs,
who retried a job, removal returning to the filter it came from, unknown queue or name
filters, the explorer's live refresh."""

from __future__ import annotations

import html as htmllib
import re
import time

import pytest
from django.test import Client

from store import EnqueueRequest, FakeClock, RedisJobStore
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, failed_job, text_of

pytestmark = pytest.mark.django_db


def test_the_job_page_shows_absolute_times_beside_relative_ones(
    stores: Stores, admin_client_: Client
) -> None:
    handle = RedisJobStore(
        stores.main.client, prefix=stores.main_prefix, clock=FakeClock(1_700_000_000_000)
    )
    job_id = handle.enqueue(EnqueueRequest(name="A", queue="q")).id
    html = text_of(admin_client_.get(f"/stores/main/jobs/{job_id}"))
    assert re.search(
        r'ago <span class="muted">·</span> <time class="abs" datetime="2023-11-14T22:13:20.000Z" '
        r'data-utc="2023-11-14 22:13:20.000 UTC">2023-11-14 22:13:20.000 UTC</time>',
        html,
    )
    assert 'class="link-button small time-zone-toggle" aria-pressed="false"' in html


def test_delayed_jobs_past_their_run_time_are_flagged_overdue(
    stores: Stores, admin_client_: Client
) -> None:
    past = RedisJobStore(
        stores.main.client,
        prefix=stores.main_prefix,
        clock=FakeClock(int(time.time() * 1000) - 600_000),
    )
    late = past.enqueue(EnqueueRequest(name="A", queue="q", delay_ms=60_000)).id
    fine = stores.main.enqueue(EnqueueRequest(name="A", queue="q", delay_ms=600_000)).id
    listing = text_of(admin_client_.get("/jobs/?store=main&queue=q&state=delayed"))
    rows = dict(
        re.findall(
            r'title="([^"]+)">[^<]+</a>(?:<button[^>]*>[^<]*</button>)?</td>(.*?)</tr>',
            listing,
            re.DOTALL,
        )
    )
    assert 'class="badge overdue"' in rows[late]
    assert "overdue" not in rows[fine]
    page = text_of(admin_client_.get(f"/stores/main/jobs/{late}"))
    assert re.search(r'class="badge overdue"[^>]*>overdue by 9 min', page)


def test_a_manually_retried_job_says_who_retried_it(stores: Stores, admin_client_: Client) -> None:
    job_id = failed_job(stores.main)
    response = admin_client_.post(
        "/actions/job/retry/", {"store": "main", "job_id": job_id}, follow=True
    )
    assert response.status_code == 200
    html = text_of(admin_client_.get(f"/stores/main/jobs/{job_id}"))
    assert "0 of 1 made" in html
    assert "since its last manual retry (1 run in all)" in html
    assert re.search(r"Retried by <strong>u\d+</strong>", html)


def test_remove_returns_to_the_filter_the_job_was_opened_from(
    stores: Stores, admin_client_: Client
) -> None:
    job_id = stores.main.enqueue(EnqueueRequest(name="A", queue="q")).id
    origin = "/jobs/?store=main&queue=q&state=waiting"
    page = text_of(
        admin_client_.get(f"/stores/main/jobs/{job_id}", HTTP_REFERER="http://testserver" + origin)
    )
    back = re.search(r'<input type="hidden" name="back" value="([^"]+)">', page)
    assert back and htmllib.unescape(back.group(1)) == origin
    # The page's own refresh keeps it.
    assert "?back=" in page
    response = admin_client_.post(
        "/actions/job/remove/",
        {
            "store": "main",
            "job_id": job_id,
            "next": f"/stores/main/jobs/{job_id}",
            "back": htmllib.unescape(back.group(1)),
        },
    )
    assert response.status_code == 302 and response["Location"] == origin
    # A foreign referer or a non-explorer path is ignored.
    other = text_of(
        admin_client_.get(
            f"/stores/main/jobs/{failed_job(stores.main)}",
            HTTP_REFERER="http://evil.example/jobs/?store=main",
        )
    )
    assert 'name="back"' not in other


def test_an_unknown_queue_or_name_says_so(stores: Stores, admin_client_: Client) -> None:
    stores.main.enqueue(EnqueueRequest(name="SendEmail", queue="emails"))
    html = text_of(admin_client_.get("/jobs/?store=main&queue=emials"))
    assert "No queue named “emials” has ever held a job in this store." in html
    html = text_of(admin_client_.get("/jobs/?store=main&name=SendEmial&queue=emails"))
    assert "No job named “SendEmial” has ever been enqueued in this store." in html
    assert "No queue named" not in html
    known = text_of(admin_client_.get("/jobs/?store=main&queue=emails&state=failed"))
    assert "has ever" not in known


def test_the_explorer_offers_live_refresh(stores: Stores, admin_client_: Client) -> None:
    html = text_of(admin_client_.get("/jobs/?store=main&queue=q&state=waiting"))
    assert 'id="live-refresh" data-refresh="#results" data-every="5000"' in html
    assert re.search(
        r'<section id="results"[^>]*hx-get="/jobs/\?store=main&amp;queue=q&amp;state=waiting" '
        r'hx-trigger="mq:refresh, sse:jobs, mq:visible from:body"[^>]*data-live-when="#live-refresh"',
        html,
    )
