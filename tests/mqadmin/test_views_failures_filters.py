"""The failures page sorts and filters the error groups (count, last and first seen; queue,
job name, time window), rejects malformed filters with a 400, shows each group's pattern
and example message (escaped, for view_payload holders only), and "retry all" of a group
retries every failure its normalised message merged."""

from __future__ import annotations

import html as htmllib
import re
import time
from typing import Any

import pytest
from django.test import Client

from store import Claimed, EnqueueRequest, Fail, FakeClock, RedisJobStore
from store.jobs import encode_failure
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, text_of

pytestmark = pytest.mark.django_db


def fail(store: RedisJobStore, message: str, queue: str = "export", name: str = "Export") -> str:
    job_id = store.enqueue(EnqueueRequest(name=name, queue=queue)).id
    claimed = store.claim(queue=queue, names=[name], token="w:1", lock_duration_ms=30_000)
    assert isinstance(claimed, Claimed)
    try:
        raise ValueError(message)
    except ValueError as raised:
        store.ack(job_id, "w:1", Fail(encode_failure(raised)))
    return job_id


def rows(html: str) -> list[tuple[str, str]]:
    """(group id, row html) of the groups listed, in page order."""
    return re.findall(r'<tr data-group="([0-9a-f]{16})">(.*?)</tr>', html, re.DOTALL)


def listed(client: Client, query: str) -> list[str]:
    """The first word of each listed group's example message, in page order."""
    response = client.get("/failures/?store=main&" + query)
    assert response.status_code == 200, text_of(response)[:500]
    return [
        re.search(
            r'class="error-message mono">(?:<span class="muted">e\.g\.</span> )?(\w+)', row
        ).group(1)  # type: ignore[union-attr]
        for _, row in rows(text_of(response))
    ]


@pytest.fixture
def seeded(stores: Stores, redis_client: Any) -> Stores:
    """Three groups: alpha (3 failures, oldest first seen, last seen 2 h ago, in queues
    billing then export), beta (1, latest), gamma (2, of job Report)."""
    past = FakeClock(int(time.time() * 1000) - 3 * 3_600_000)
    earlier = RedisJobStore(redis_client, prefix=stores.main_prefix, clock=past)
    fail(earlier, "alpha 1 broke", queue="billing", name="Charge")
    past.advance(3_600_000)
    fail(earlier, "alpha 2 broke", queue="export")
    fail(earlier, "alpha 3 broke", queue="export")
    earlier.close()
    fail(stores.main, "gamma 1 broke", name="Report")
    fail(stores.main, "gamma 2 broke", name="Report")
    time.sleep(0.01)
    fail(stores.main, "beta 1 broke")
    return stores


def test_groups_sort_by_last_seen_count_and_first_seen(
    seeded: Stores, admin_client_: Client
) -> None:
    assert listed(admin_client_, "") == ["beta", "gamma", "alpha"]  # last seen, latest first
    assert listed(admin_client_, "sort=last_seen&order=asc") == ["alpha", "gamma", "beta"]
    assert listed(admin_client_, "sort=count") == ["alpha", "gamma", "beta"]
    assert listed(admin_client_, "sort=count&order=asc") == ["beta", "gamma", "alpha"]
    assert listed(admin_client_, "sort=first_seen&order=asc") == ["alpha", "gamma", "beta"]


def test_column_headers_link_to_their_sort_and_toggle_it(
    seeded: Stores, admin_client_: Client
) -> None:
    html = text_of(admin_client_.get("/failures/?store=main&sort=count&queue=export"))
    links = dict(re.findall(r'<a href="/failures/\?([^"]+)" data-sort="(\w+)"', html))
    by_field = {field: htmllib.unescape(query) for query, field in links.items()}
    assert by_field["count"] == "store=main&sort=count&order=asc&queue=export"  # toggled
    assert by_field["last_seen"] == "store=main&queue=export"  # the default order
    assert by_field["first_seen"] == "store=main&sort=first_seen&queue=export"
    assert 'aria-sort="descending"' in html


def test_filters_by_queue_name_and_window(seeded: Stores, admin_client_: Client) -> None:
    # alpha failed last in export, but once in billing: the group remembers both queues.
    assert listed(admin_client_, "queue=billing") == ["alpha"]
    assert listed(admin_client_, "queue=export") == ["beta", "gamma", "alpha"]
    assert listed(admin_client_, "name=Report") == ["gamma"]
    assert listed(admin_client_, "queue=billing&name=Report") == []
    assert listed(admin_client_, "window=1h") == ["beta", "gamma"]
    assert listed(admin_client_, "window=24h&sort=count") == ["alpha", "gamma", "beta"]
    html = text_of(admin_client_.get("/failures/?store=main&queue=nowhere"))
    assert "No error group matches these filters." in html
    assert "0 errors matching" in html
    assert "over all 3 error groups the store keeps" in html


def test_the_partial_keeps_the_filters_in_its_poll(seeded: Stores, admin_client_: Client) -> None:
    response = admin_client_.get(
        "/failures/?store=main&queue=a%26b&sort=count", headers={"HX-Request": "true"}
    )
    html = text_of(response)
    assert "<html" not in html and 'id="groups"' in html
    assert 'hx-get="/failures/?store=main&amp;sort=count&amp;queue=a%26b"' in html


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("sort=name", "is not a sort (use last_seen, count or first_seen)"),
        ("order=up", "is not a direction (use desc or asc)"),
        ("window=2h", "is not a time window (use 1h, 24h, 7d or all)"),
        ("queue=a%00b", "queue: Null characters are not allowed."),
        ("name=" + "x" * 1001, "name: Ensure this value has at most 1000 characters"),
    ],
)
def test_malformed_filters_are_400s(
    seeded: Stores, admin_client_: Client, query: str, message: str
) -> None:
    response = admin_client_.get("/failures/?store=main&" + query)
    assert response.status_code == 400
    assert message in htmllib.unescape(text_of(response))


def test_patterns_and_examples_are_shown_escaped_to_payload_viewers_only(
    stores: Stores, admin_client_: Client, login: Any
) -> None:
    fail(stores.main, "card 4242 declined for '<b>bob</b>@x.io' <script>")
    html = text_of(admin_client_.get("/failures/?store=main"))
    [(_, row)] = rows(html)
    assert '<div class="error-pattern mono"' in row
    assert "card &lt;n&gt; declined for &#x27;…&#x27; &lt;script&gt;" in row
    assert "card 4242 declined for &#x27;&lt;b&gt;bob&lt;/b&gt;@x.io&#x27; &lt;script&gt;" in row
    assert "<script>" not in row and "<b>" not in row
    assert "in export (1) · Export (1)" in row
    viewer = login("retry_job", "bulk_action")
    hidden = text_of(viewer.get("/failures/?store=main"))
    assert "declined" not in hidden and "error-pattern" not in hidden
    assert "Retry all with this error" in hidden  # retry rights without payload rights
    assert "Retry all with this error" not in text_of(login().get("/failures/?store=main"))


def test_retry_all_covers_failures_that_only_differed_in_values(
    stores: Stores, admin_client_: Client
) -> None:
    bob = fail(stores.main, "card 4242 declined for 'bob@x.io'", queue="billing", name="Charge")
    amy = fail(stores.main, "card 9999 declined for 'amy@y.io'", queue="billing", name="Charge")
    other = fail(stores.main, "connect to db-3.internal:5432 refused", queue="billing")
    page = text_of(admin_client_.get("/failures/?store=main&queue=billing&name=Charge"))
    [(group, row)] = rows(page)
    assert re.search(r'data-label="Failures">2<', row)
    preview_link = re.search(r'href="(/bulk/preview/\?[^"]+)">Retry all with this error', row)
    assert preview_link
    preview = text_of(admin_client_.get(htmllib.unescape(preview_link.group(1))))
    assert "<strong>2</strong> jobs match this filter (exact)." in preview
    form = dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)">', preview))
    form.pop("csrfmiddlewaretoken", None)
    assert form["error"] == group
    assert admin_client_.post("/bulk/run/", form, follow=True).status_code == 200
    assert stores.main.get_job(bob).state == "waiting"  # type: ignore[union-attr]
    assert stores.main.get_job(amy).state == "waiting"  # type: ignore[union-attr]
    assert stores.main.get_job(other).state == "failed"  # type: ignore[union-attr]
