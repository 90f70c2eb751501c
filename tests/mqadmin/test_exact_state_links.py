"""Every count link of the overview opens an explorer page served from the sets of exactly
that state: the page is full and every row has the count's state, however many newer rows
of other states the queue holds (the 2,000-row scan budget never runs out behind them)."""

from __future__ import annotations

import html as htmllib
import re

import pytest
from django.test import Client

from store import EnqueueRequest
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, completed_job, failed_job, text_of

pytestmark = pytest.mark.django_db


def states_of_rows(html: str) -> list[str]:
    table = html.split('<table class="jobs dense">', 1)
    if len(table) < 2:
        return []
    body = table[1].split("</table>", 1)[0]
    return re.findall(r'<span class="badge state-([a-z-]+)"', body)


def count_links(html: str) -> list[tuple[str, int]]:
    """(href, count) of every count link on the overview."""
    return [
        (htmllib.unescape(href), int(count.replace(",", "")))
        for href, count in re.findall(
            r'<a class="count-link" href="([^"]+)"[^>]*>([\d,]+)</a>', html
        )
    ]


def test_every_count_link_opens_rows_of_its_state(stores: Stores, admin_client_: Client) -> None:
    main = stores.main
    failed = [failed_job(main, queue="export", name="Export") for _ in range(5)]
    completed_job(main, queue="export", name="Export")
    main.enqueue(EnqueueRequest(name="Export", queue="export", delay_ms=3_600_000))
    main.claim(queue="export", names=["Export"], token="w:1", lock_duration_ms=60_000)
    # 2,500 newer waiting jobs: a state check row by row in enqueued order would give up.
    main.enqueue_many(
        [EnqueueRequest(name="Export", queue="export", payload=i) for i in range(2500)]
    )
    main.enqueue(EnqueueRequest(name="Charge", queue="billing", priority=3))

    overview = text_of(admin_client_.get("/"))
    links = count_links(overview)
    assert len(links) >= 14
    checked = 0
    for href, count in links:
        state = re.search(r"state=([a-z-]+)", href).group(1)  # type: ignore[union-attr]
        response = admin_client_.get(href)
        assert response.status_code == 200, href
        html = text_of(response)
        rows = states_of_rows(html)
        assert rows == [state] * min(count, 50), (href, rows[:5])
        if count:
            assert "Scanned" not in html, href
            checked += 1
    assert checked >= 6
    failed_page = text_of(admin_client_.get("/jobs/?store=main&queue=export&state=failed"))
    assert 'data-route="terminal:&lt;state&gt;:&lt;names of export&gt;"' in failed_page
    assert all(job_id in failed_page for job_id in failed)


def test_the_automatic_order_follows_the_states(stores: Stores, admin_client_: Client) -> None:
    stores.main.enqueue(EnqueueRequest(name="A", queue="q", delay_ms=60_000))
    routes = {
        "state=failed&state=cancelled": "finished:&lt;state&gt;",
        "queue=q&state=delayed": "delayed:q",
        "state=delayed": "delayed:&lt;every queue&gt;",
        "queue=q&state=waiting": "waiting:q/&lt;every name&gt;",
        "state=active": "active",
        "queue=q&state=waiting-children": "parked:q",
        "queue=q&state=waiting&state=failed": "byqueue:q",
        "queue=q&state=failed&order_by=enqueued_at": "byqueue:q",
    }
    for query, route in routes.items():
        html = text_of(admin_client_.get("/jobs/?store=main&" + query))
        assert f'data-route="{route}"' in html, query
    # The permalink keeps the choice automatic (no order_by in the link).
    html = text_of(admin_client_.get("/jobs/?store=main&queue=q&state=delayed"))
    assert re.search(r'href="/jobs/\?store=main&amp;queue=q&amp;state=delayed" title="A link', html)


def test_the_explorer_marks_which_states_each_order_serves(
    stores: Stores, admin_client_: Client
) -> None:
    html = text_of(admin_client_.get("/jobs/?store=main"))
    assert '<option value="auto" selected' in html or '<option value="auto">' in html
    assert 'value="run_at" data-states="delayed"' in html
    assert 'value="finished_at" data-states="completed failed cancelled"' in html
    assert (
        'value="position" data-states="waiting active waiting-children" data-single-state' in html
    )
    assert 'id="order-conflict"' in html


def test_too_many_waiting_sets_fall_back_to_enqueued_time(
    stores: Stores, admin_client_: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    import store.listing

    monkeypatch.setattr(store.listing, "MAX_STATE_SOURCES", 2)
    for name in ("A", "B", "C"):
        stores.main.enqueue(EnqueueRequest(name=name, queue="q"))
    auto = admin_client_.get("/jobs/?store=main&state=waiting")
    assert auto.status_code == 200
    assert 'data-route="all"' in text_of(auto)
    explicit = admin_client_.get("/jobs/?store=main&state=waiting&order_by=position")
    assert explicit.status_code == 400
    assert "too many sorted sets" in text_of(explicit)


def test_paging_waiting_jobs_in_claim_order_both_ways(
    stores: Stores, admin_client_: Client
) -> None:
    ids = [
        stores.main.enqueue(EnqueueRequest(name="A", queue="q", payload=i, priority=i % 3)).id
        for i in range(45)
    ]
    first = text_of(admin_client_.get("/jobs/?store=main&queue=q&state=waiting&limit=20&order=asc"))
    seen = []
    html = first
    pages = []
    while True:
        page = re.findall(r'<td class="id"><a class="mono" href="[^"]*" title="([^"]*)"', html)
        pages.append(page)
        seen.extend(page)
        nxt = re.search(r'<a rel="next" href="([^"]*)"', html)
        if not nxt:
            break
        html = text_of(admin_client_.get(htmllib.unescape(nxt.group(1))))
    assert sorted(seen) == sorted(ids) and len(seen) == 45
    # Claim order: the highest priority first, then arrival.
    assert [stores.main.get_job(j).priority for j in seen] == sorted(  # type: ignore[union-attr]
        (stores.main.get_job(j).priority for j in ids),
        reverse=True,  # type: ignore[union-attr]
    )
    prev = re.search(r'<a rel="prev" href="([^"]*)"', html)
    assert prev
    back = text_of(admin_client_.get(htmllib.unescape(prev.group(1))))
    assert (
        re.findall(r'<td class="id"><a class="mono" href="[^"]*" title="([^"]*)"', back)
        == pages[-2]
    )
