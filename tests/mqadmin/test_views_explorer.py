"""The job explorer: filters, order, keyset paging both ways, query plan, scan budget."""

from __future__ import annotations

import html as htmllib
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client

from mqadmin import services
from store import (
    EnqueueRequest,
    FakeClock,
    RedisJobStore,
)
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, completed_job, failed_job, text_of

pytestmark = pytest.mark.django_db


def row_ids(html: str) -> list[str]:
    """Job ids of the explorer's rows, in order."""
    table = html.split('<table class="jobs dense">', 1)
    if len(table) < 2:
        return []
    body = table[1].split("</table>", 1)[0]
    return [
        htmllib.unescape(m)
        for m in re.findall(r'<td class="id"><a class="mono" href="[^"]*" title="([^"]*)"', body)
    ]


def link(html: str, rel: str) -> str | None:
    match = re.search(rf'<a rel="{rel}" href="([^"]*)"', html)
    return htmllib.unescape(match.group(1)) if match else None


def frozen_store(stores: Stores, at: int = 1_700_000_000_000) -> RedisJobStore:
    """Another handle on the "main" prefix whose clock never moves (equal timestamps)."""
    return RedisJobStore(
        stores.main.client, prefix=stores.main_prefix, store_key="main", clock=FakeClock(at)
    )


# ---------------------------------------------------------------------- filters


def test_filters_by_queue_name_states_and_metadata(stores: Stores, admin_client_: Client) -> None:
    main = stores.main
    # Created first: failed_job claims the queue's oldest waiting job.
    e = failed_job(main, name="SendEmail", queue="emails", metadata={"tenant": "globex"})
    a = main.enqueue(
        EnqueueRequest(
            name="SendEmail", queue="emails", metadata={"tenant": "acme", "tier": "gold"}
        )
    ).id
    b = main.enqueue(
        EnqueueRequest(name="SendEmail", queue="emails", metadata={"tenant": "acme"})
    ).id
    c = main.enqueue(
        EnqueueRequest(name="SendEmail", queue="other", metadata={"tenant": "acme", "tier": "gold"})
    ).id
    d = main.enqueue(
        EnqueueRequest(
            name="Charge",
            queue="emails",
            delay_ms=60_000,
            metadata={"tenant": "acme", "tier": "gold"},
        )
    ).id

    def ids(query: str) -> list[str]:
        response = admin_client_.get("/jobs/?store=main&" + query)
        assert response.status_code == 200, text_of(response)[:1500]
        return row_ids(text_of(response))

    assert ids("") == [d, c, b, a, e]
    assert ids("queue=emails") == [d, b, a, e]
    assert ids("name=SendEmail") == [c, b, a, e]
    assert ids("state=delayed&state=failed") == [d, e]
    assert ids("meta=tenant%3Dacme&meta=tier%3Dgold") == [d, c, a]
    assert ids("queue=emails&name=SendEmail&state=waiting&meta=tier%3Dgold") == [a]
    assert ids("meta=&meta=tenant%3Dglobex") == [e]  # blank metadata rows are ignored


def test_order_by_finished_and_run_time_in_both_directions(
    stores: Stores, admin_client_: Client
) -> None:
    main = stores.main
    clock = FakeClock(1_700_000_000_000)
    handle = RedisJobStore(main.client, prefix=stores.main_prefix, store_key="main", clock=clock)
    try:
        finished = []
        for _ in range(3):
            clock.advance(1000)
            finished.append(completed_job(handle))
        late = handle.enqueue(EnqueueRequest(name="SendEmail", queue="emails", delay_ms=90_000)).id
        soon = handle.enqueue(EnqueueRequest(name="SendEmail", queue="emails", delay_ms=10_000)).id
    finally:
        handle.close()  # its claims started a wake subscription

    def ids(query: str) -> list[str]:
        response = admin_client_.get("/jobs/?store=main&" + query)
        assert response.status_code == 200, text_of(response)[:1500]
        return row_ids(text_of(response))

    assert ids("state=completed&order_by=finished_at") == finished[::-1]
    assert ids("state=completed&order_by=finished_at&order=asc") == finished
    assert ids("queue=emails&state=delayed&order_by=run_at&order=asc") == [soon, late]
    assert ids("queue=emails&state=delayed&order_by=run_at") == [late, soon]


def test_the_plan_note_names_the_structure_and_the_residual_filters(
    stores: Stores, admin_client_: Client
) -> None:
    stores.main.enqueue(EnqueueRequest(name="SendEmail", queue="emails"))

    by_name = text_of(
        admin_client_.get(
            "/jobs/?store=main&name=SendEmail&state=waiting&meta=a%3Db&order_by=enqueued_at"
        )
    )
    plain = text_of(admin_client_.get("/jobs/?store=main"))
    finished = text_of(
        admin_client_.get("/jobs/?store=main&state=failed&order_by=finished_at&queue=emails")
    )

    assert 'data-route="byname:SendEmail"' in by_name
    assert "the name index of “SendEmail”" in by_name
    assert "Checked job by job (states, metadata), up to 2,000 jobs per page" in by_name
    assert 'data-route="all"' in plain
    assert "Every job read matches" in plain
    # A queue's failed jobs come from the per-name finished sets of that queue's names.
    assert 'data-route="terminal:&lt;state&gt;:&lt;names of emails&gt;"' in finished
    assert "Checked job by job (queue)" in finished
    everywhere = text_of(admin_client_.get("/jobs/?store=main&state=failed&order_by=finished_at"))
    assert 'data-route="finished:&lt;state&gt;"' in everywhere


def test_exact_totals_come_from_counters_when_the_filter_allows(
    stores: Stores, admin_client_: Client
) -> None:
    for _ in range(4):
        stores.main.enqueue(EnqueueRequest(name="SendEmail", queue="emails"))
    stores.main.enqueue(EnqueueRequest(name="SendEmail", queue="other"))

    html = text_of(admin_client_.get("/jobs/?store=main&queue=emails&state=waiting"))
    by_name = text_of(admin_client_.get("/jobs/?store=main&name=SendEmail"))

    assert '<p class="total">4 matching jobs</p>' in html
    assert "The total comes from the store's counters and is exact" in html
    assert "store's counters" not in by_name and 'class="total"' not in by_name


# ---------------------------------------------------------------------- paging


def walk(client: Client, first_url: str) -> tuple[list[list[str]], list[str]]:
    """Follow "next" from ``first_url``: the pages' ids and the URLs visited."""
    pages: list[list[str]] = []
    urls: list[str] = []
    url: str | None = first_url
    while url:
        response = client.get(url)
        assert response.status_code == 200, text_of(response)[:1500]
        html = text_of(response)
        pages.append(row_ids(html))
        urls.append(url)
        url = link(html, "next")
        assert len(pages) < 50
    return pages, urls


@pytest.mark.parametrize("order", ["desc", "asc"])
def test_paging_forward_and_back_is_exact_even_when_every_timestamp_is_equal(
    order: str, stores: Stores, admin_client_: Client
) -> None:
    handle = frozen_store(stores)
    ids = [
        r.id
        for r in handle.enqueue_many(
            [EnqueueRequest(name="SendEmail", queue="emails") for _ in range(23)]
        )
    ]

    pages, urls = walk(admin_client_, f"/jobs/?store=main&limit=5&order={order}")

    assert [len(p) for p in pages] == [5, 5, 5, 5, 3]
    flat = [job_id for page in pages for job_id in page]
    assert sorted(flat) == sorted(ids) and len(set(flat)) == 23
    # Same timestamp everywhere: the order is the id's, compared as strings.
    assert flat == sorted(ids, reverse=order == "desc")
    # Back from the last page, one "previous" at a time, gives the same pages.
    html = text_of(admin_client_.get(urls[-1]))
    for expected in reversed(pages[:-1]):
        previous = link(html, "prev")
        assert previous is not None
        assert "before=" in previous
        html = text_of(admin_client_.get(previous))
        assert row_ids(html) == expected
    assert link(html, "prev") is None
    assert "First page" not in html


def test_previous_then_next_returns_to_the_same_page(stores: Stores, admin_client_: Client) -> None:
    frozen_store(stores).enqueue_many([EnqueueRequest(name="A", queue="q") for _ in range(12)])
    pages, urls = walk(admin_client_, "/jobs/?store=main&limit=4")

    middle = text_of(admin_client_.get(urls[1]))
    back = text_of(admin_client_.get(link(middle, "prev") or ""))
    forward = text_of(admin_client_.get(link(back, "next") or ""))

    assert row_ids(back) == pages[0]
    assert row_ids(forward) == pages[1]


def test_every_page_is_a_permalink(stores: Stores, admin_client_: Client) -> None:
    frozen_store(stores).enqueue_many(
        [EnqueueRequest(name="A", queue="q", metadata={"t": "x"}) for _ in range(9)]
    )
    _, urls = walk(admin_client_, "/jobs/?store=main&limit=4&queue=q&meta=t%3Dx&order=asc")
    html = text_of(admin_client_.get(urls[1]))

    permalink = re.search(r'<a href="([^"]*)" title="A link to exactly this page">', html)
    assert permalink
    url = htmllib.unescape(permalink.group(1))
    query = parse_qs(urlsplit(url).query)
    assert query["queue"] == ["q"] and query["meta"] == ["t=x"] and query["order"] == ["asc"]
    assert "cursor" in query
    assert row_ids(text_of(admin_client_.get(url))) == row_ids(html)


def test_paging_links_swap_the_results_with_htmx_and_push_the_url(
    stores: Stores, admin_client_: Client
) -> None:
    frozen_store(stores).enqueue_many([EnqueueRequest(name="A", queue="q") for _ in range(6)])

    html = text_of(admin_client_.get("/jobs/?store=main&limit=3"))
    nxt = re.search(
        r'<a rel="next" href="[^"]*" hx-get="([^"]*)" hx-target="#results" hx-swap="outerHTML" hx-push-url="true"',
        html,
    )
    assert nxt
    partial = text_of(
        admin_client_.get(htmllib.unescape(nxt.group(1)), headers={"HX-Request": "true"})
    )

    assert partial.lstrip().startswith('<section id="results"')
    assert len(row_ids(partial)) == 3


def test_a_scan_cut_short_by_the_budget_offers_to_continue(
    stores: Stores, admin_client_: Client
) -> None:
    clock = FakeClock(1_700_000_000_000)
    handle = RedisJobStore(
        stores.main.client, prefix=stores.main_prefix, store_key="main", clock=clock
    )
    match = handle.enqueue(EnqueueRequest(name="A", queue="q", metadata={"needle": "yes"})).id
    clock.advance(1)
    handle.enqueue_many(
        [EnqueueRequest(name="A", queue="q", metadata={"needle": "no"}) for _ in range(2100)]
    )

    html = text_of(admin_client_.get("/jobs/?store=main&meta=needle%3Dyes"))

    assert "Scanned 2,000 jobs and found 0 matches so far" in html
    assert row_ids(html) == []
    continue_link = re.search(r'<a class="continue" href="([^"]*)"', html)
    assert continue_link
    rest = text_of(admin_client_.get(htmllib.unescape(continue_link.group(1))))
    assert row_ids(rest) == [match]
    assert "Scanned" not in rest


# ---------------------------------------------------------------------- refused queries


@pytest.mark.parametrize(
    ("query", "explanation"),
    [
        (
            "order_by=run_at&state=delayed&state=waiting",
            "Ordering by run time needs the state “delayed” alone",
        ),
        ("order_by=run_at&queue=q&state=waiting", "Ordering by run time needs the state"),
        ("order_by=position&state=waiting&state=active", "Ordering by queue position needs"),
        ("order_by=position", "Ordering by queue position needs"),
        ("order_by=finished_at", "Ordering by finished time needs states made only of completed"),
        ("order_by=finished_at&state=completed&state=waiting", "tick only terminal states"),
    ],
)
def test_unsupported_combinations_are_explained_in_the_form(
    query: str, explanation: str, stores: Stores, admin_client_: Client
) -> None:
    response = admin_client_.get("/jobs/?store=main&" + query)

    assert response.status_code == 400
    html = text_of(response)
    assert "The store cannot serve this query." in html
    assert explanation in html
    # The explanation sits under the control that caused it.
    assert re.search(r'name="order_by".*?<p class="field-error">[^<]*Ordering by', html, re.DOTALL)


def test_a_disabled_index_is_explained(
    settings: Any, redis_url: str, prefix: str, admin_client_: Client
) -> None:
    settings.MQ_STORES = {"noidx": {"prefix": prefix, "url": redis_url, "indexes": {"name": False}}}
    services.get_named_store("noidx").enqueue(EnqueueRequest(name="A", queue="q"))

    refused = admin_client_.get("/jobs/?store=noidx&name=A")
    served = admin_client_.get(
        "/jobs/?store=noidx&name=A&state=waiting&state=failed&order_by=finished_at"
    )

    assert refused.status_code == 400
    assert (
        "MQ_STORES[&#x27;noidx&#x27;][&#x27;indexes&#x27;][&#x27;name&#x27;] is false"
        in text_of(refused)
    )
    assert served.status_code == 400  # waiting is not terminal
    ok = admin_client_.get("/jobs/?store=noidx&name=A&state=failed&order_by=finished_at")
    assert ok.status_code == 200
    assert 'data-route="terminal:&lt;state&gt;:A"' in text_of(ok)
