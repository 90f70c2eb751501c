"""The overview: store × queue × state counts, paused queues, oldest waiting, throughput."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from mqadmin.models import AuditEntry
from store import EnqueueRequest
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, completed_job, failed_job, text_of

pytestmark = pytest.mark.django_db


def queue_cell(html: str, store: str, queue: str, state: str) -> int:
    """The count in the row of ``queue`` of the queues table of ``store``."""
    section = html.split(f'Queues of <span class="store-name">{store}</span>', 1)[1]
    section = section.split("</table>", 1)[0]
    row = re.search(
        rf'jobs/\?store={re.escape(store)}&amp;queue={re.escape(queue)}">{re.escape(queue)}</a>(.*?)</tr>',
        section,
        re.DOTALL,
    )
    assert row, f"no row for {queue}"
    cell = re.search(rf'data-queue-state="{re.escape(state)}"[^>]*><a[^>]*>(\d+)</a>', row.group(1))
    assert cell, f"no {state} cell for {queue}"
    return int(cell.group(1))


def test_counts_per_store_queue_and_state(stores: Stores, admin_client_: Client) -> None:
    main, side = stores.main, stores.side
    for _ in range(3):
        main.enqueue(EnqueueRequest(name="SendEmail", queue="emails"))
    main.enqueue(EnqueueRequest(name="SendEmail", queue="emails", delay_ms=60_000))
    completed_job(main, name="Charge", queue="billing")
    failed_job(main, name="Charge", queue="billing")
    side.enqueue(EnqueueRequest(name="Render", queue="parts"))

    html = text_of(admin_client_.get("/"))

    assert queue_cell(html, "main", "emails", "waiting") == 3
    assert queue_cell(html, "main", "emails", "delayed") == 1
    assert queue_cell(html, "main", "billing", "completed") == 1
    assert queue_cell(html, "main", "billing", "failed") == 1
    assert queue_cell(html, "side", "parts", "waiting") == 1
    # Store totals, in the first table (cells keep the landing page's data-state markup).
    assert re.search(r'data-state="waiting"><a class="count-link"[^>]*>3<', html)


def test_oldest_waiting_job_of_each_queue_is_linked(stores: Stores, admin_client_: Client) -> None:
    first = stores.main.enqueue(EnqueueRequest(name="SendEmail", queue="emails")).id
    stores.main.enqueue(EnqueueRequest(name="Other", queue="emails"))

    html = text_of(admin_client_.get("/"))

    assert f'href="/stores/main/jobs/{first}"' in html
    assert (
        "none waiting"
        not in html.split("Queues of", 1)[1].split("emails", 1)[1].split("</tr>", 1)[0]
    )


def test_paused_queues_are_badged_and_can_be_resumed(stores: Stores, login: Any) -> None:
    stores.main.enqueue(EnqueueRequest(name="SendEmail", queue="emails"))
    stores.main.pause("emails")
    client = login("pause_queue")

    html = text_of(client.get("/"))

    assert 'class="badge paused"' in html
    assert 'action="/actions/queue/resume/"' in html

    response = client.post(
        "/actions/queue/resume/", {"store": "main", "queue": "emails"}, follow=True
    )

    assert response.status_code == 200
    assert stores.main.paused_queues() == []
    assert "Resumed queue “emails” of main." in text_of(response)
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.store, entry.target, entry.ok) == ("resume", "main", "emails", True)


def test_pause_a_queue(stores: Stores, login: Any) -> None:
    stores.main.enqueue(EnqueueRequest(name="SendEmail", queue="emails"))
    client = login("pause_queue")

    response = client.post("/actions/queue/pause/", {"store": "main", "queue": "emails"})

    assert response.status_code == 302
    assert response["Location"] == "/"
    assert stores.main.paused_queues() == ["emails"]
    assert AuditEntry.objects.get().action == "pause"


def test_pause_buttons_need_the_permission(stores: Stores, viewer: Client) -> None:
    stores.main.enqueue(EnqueueRequest(name="SendEmail", queue="emails"))

    html = text_of(viewer.get("/"))

    assert "/actions/queue/" not in html


def test_throughput_chart_draws_finished_jobs_per_minute(
    stores: Stores, admin_client_: Client
) -> None:
    for _ in range(3):
        completed_job(stores.main)
    failed_job(stores.main)

    html = text_of(admin_client_.get("/"))

    chart = html.split('id="throughput"', 1)[1]
    assert "completed 3" in chart
    assert "failed 1" in chart
    assert '<polyline class="line line-completed"' in chart
    assert '<polyline class="line line-failed"' in chart
    # One hover column per minute of the last 3 hours, each with a tooltip.
    assert chart.count('<rect class="hover"') >= 2 * 180
    # Per-minute tooltips (the jobs may straddle a minute boundary: sum them).
    minutes = re.findall(
        r"<title>\d\d:\d\d UTC: (\d+) completed, (\d+) failed, 0 cancelled</title>", chart
    )
    assert sum(int(c) for c, _ in minutes) == 3
    assert sum(int(f) for _, f in minutes) == 1


def test_counts_refresh_by_polling_that_skips_hidden_tabs(
    stores: Stores, admin_client_: Client
) -> None:
    html = text_of(admin_client_.get("/"))

    stores_div = re.search(r'<div id="stores"[^>]*>', html)
    assert stores_div
    assert 'hx-trigger="every 5s, mq:visible from:body, sse:jobs"' in stores_div.group(0)
    # app.js cancels requests of elements with class "poll" while the tab is hidden.
    assert 'class="poll"' in stores_div.group(0)
    assert "/static/mqadmin/app.js" in html


def test_the_counts_swap_leaves_the_chart_out(stores: Stores, admin_client_: Client) -> None:
    html = text_of(admin_client_.get("/", headers={"HX-Request": "true"}))

    assert 'id="throughput"' not in html
    assert "<polyline" not in html


def test_the_chart_refreshes_on_its_own(stores: Stores, admin_client_: Client) -> None:
    completed_job(stores.main)

    html = text_of(admin_client_.get("/overview/throughput/", headers={"HX-Request": "true"}))

    assert html.lstrip().startswith('<section id="throughput"')
    assert "completed 1" in html
    assert 'id="stores"' not in html


def test_oldest_runnable_sees_past_higher_priorities(stores: Stores, admin_client_: Client) -> None:
    from store import FakeClock, RedisJobStore

    clock = FakeClock(1_700_000_000_000)
    handle = RedisJobStore(stores.main.client, prefix=stores.main_prefix, clock=clock)
    starved = handle.enqueue(EnqueueRequest(name="SendEmail", queue="emails", priority=0)).id
    clock.advance(12 * 60_000)
    for _ in range(10):
        handle.enqueue(EnqueueRequest(name="SendEmail", queue="emails", priority=7))

    html = text_of(admin_client_.get("/"))
    row = html.split("Queues of", 1)[1].split("queue=emails", 1)[1].split("</tr>", 1)[0]
    assert f'href="/stores/main/jobs/{starved}" data-oldest-run-at="1700000000000"' in row
    assert "runnable since" in row and "2023-11-14 22:13:20 UTC" in row


def test_a_limited_queue_shows_its_limits_line(stores: Stores, admin_client_: Client) -> None:
    from store import Rate

    for _ in range(2):
        stores.main.enqueue(EnqueueRequest(name="SendEmail", queue="emails"))
    stores.main.enqueue(EnqueueRequest(name="SendEmail", queue="plain"))
    stores.main.set_queue_limits("emails", concurrency=3, rate=Rate(100, 1000))

    html = text_of(admin_client_.get("/"))

    assert html.count("data-queue-limits") == 1
    assert "0 of 3 running · rate 100/s · 2 waiting" in html
    assert 'action="/actions/queue/limits/"' in html
    assert 'action="/actions/queue/clear_limits/"' in html


def test_the_limits_line_escapes_the_queue_row(stores: Stores, admin_client_: Client) -> None:
    from tests.mqadmin.test_views_common import MARKUP

    stores.main.enqueue(EnqueueRequest(name="SendEmail", queue=MARKUP))
    stores.main.set_queue_limits(MARKUP, concurrency=1)

    html = text_of(admin_client_.get("/"))

    assert MARKUP not in html
    assert "0 of 1 running · 1 waiting" in html


def test_limits_buttons_need_the_permission(stores: Stores, login: Any) -> None:
    stores.main.enqueue(EnqueueRequest(name="SendEmail", queue="emails"))

    html = text_of(login("pause_queue").get("/"))

    assert "/actions/queue/limits/" not in html


def form_values(html: str, action: str, queue: str) -> dict[str, str | None]:
    """Input name -> value (None: no value attribute) of the ``action`` form of ``queue``."""
    for form in re.findall(r"<form .*?</form>", html, re.DOTALL):
        if f'action="{action}"' in form and f'name="queue" value="{queue}"' in form:
            values: dict[str, str | None] = {}
            for tag in re.findall(r"<input [^>]*>", form):
                name = re.search(r'name="([^"]*)"', tag)
                value = re.search(r'value="([^"]*)"', tag)
                if name:
                    values[name.group(1)] = value.group(1) if value else None
            return values
    raise AssertionError(f"no {action} form for {queue}")


LIMIT_INPUTS = ("concurrency", "rate", "group_concurrency", "group_rate")


def test_the_limits_form_shows_the_queues_current_limits(
    stores: Stores, admin_client_: Client
) -> None:
    from store import Rate

    stores.main.enqueue(EnqueueRequest(name="SendEmail", queue="emails"))
    stores.main.enqueue(EnqueueRequest(name="SendEmail", queue="grouped", group="g1"))
    stores.main.enqueue(EnqueueRequest(name="SendEmail", queue="plain"))
    stores.main.set_queue_limits("emails", concurrency=3, rate=Rate(20, 250))
    stores.main.set_queue_limits(
        "grouped", group_concurrency=1, group_rate=Rate(10, 60_000), rate=Rate(5, 3_600_000)
    )

    html = text_of(admin_client_.get("/"))

    emails = form_values(html, "/actions/queue/limits/", "emails")
    grouped = form_values(html, "/actions/queue/limits/", "grouped")
    plain = form_values(html, "/actions/queue/limits/", "plain")
    assert [emails[name] for name in LIMIT_INPUTS] == ["3", "20/250ms", None, None]
    assert [grouped[name] for name in LIMIT_INPUTS] == [None, "5/h", "1", "10/min"]
    assert [plain[name] for name in LIMIT_INPUTS] == [None, None, None, None]
    # Each row's labels point at that row's own inputs.
    ids = re.findall(r'<input [^>]*id="(id_limits_[^"]*)"', html)
    assert len(ids) == 3 * len(LIMIT_INPUTS) and len(set(ids)) == len(ids)
    for input_id in ids:
        assert f'for="{input_id}"' in html


def test_the_limits_line_shows_group_limits(stores: Stores, admin_client_: Client) -> None:
    from store import Rate

    stores.main.enqueue(EnqueueRequest(name="SendEmail", queue="grouped", group="g1"))
    stores.main.enqueue(EnqueueRequest(name="SendEmail", queue="both", group="g1"))
    stores.main.set_queue_limits("grouped", group_concurrency=1, group_rate=Rate(10, 60_000))
    stores.main.set_queue_limits("both", concurrency=4, group_concurrency=2)

    html = text_of(admin_client_.get("/"))

    assert "max 1 running per group · group rate 10/min · 1 waiting" in html
    assert "0 of 4 running · max 2 running per group · 1 waiting" in html


def test_each_queue_row_links_to_its_queue_page(stores: Stores, admin_client_: Client) -> None:
    stores.main.enqueue(EnqueueRequest(name="SendEmail", queue="emails"))
    stores.main.enqueue(EnqueueRequest(name="SendEmail", queue="a/b c"))

    html = text_of(admin_client_.get("/"))

    assert 'href="/stores/main/queues/emails"' in html
    assert 'href="/stores/main/queues/a/b%20c"' in html
    assert admin_client_.get("/stores/main/queues/a/b%20c").status_code == 200


def test_limits_beyond_the_read_bound_are_not_offered_blank(
    stores: Stores, admin_client_: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mqadmin.queries import overview

    monkeypatch.setattr(overview, "LIMITS_QUEUES", 1)
    for queue in ("a-first", "b-second"):
        stores.main.enqueue(EnqueueRequest(name="SendEmail", queue=queue))
        stores.main.set_queue_limits(queue, concurrency=2)

    html = text_of(admin_client_.get("/"))

    assert form_values(html, "/actions/queue/limits/", "a-first")["concurrency"] == "2"
    with pytest.raises(AssertionError, match="no /actions/queue/limits/ form for b-second"):
        form_values(html, "/actions/queue/limits/", "b-second")
    assert "limited: see its queue page" in html


def test_a_queue_whose_waiting_jobs_are_all_grouped_shows_its_oldest(
    stores: Stores, admin_client_: Client
) -> None:
    # The oldest-runnable search reads the grouped waiting jobs too.
    job_id = stores.main.enqueue(EnqueueRequest(name="SendEmail", queue="grouped", group="g1")).id

    html = text_of(admin_client_.get("/"))

    assert f"/stores/main/jobs/{job_id}" in html
    assert "not looked up" not in html and "not found" not in html
