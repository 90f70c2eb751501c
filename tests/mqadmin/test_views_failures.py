"""Failed jobs, errors first: the error column of the explorer, the failures view grouped by
error type and message, the explorer's error filter, and "retry all with this error"
through the bulk preview."""

from __future__ import annotations

import html as htmllib
import re
import time

import pytest
from django.test import Client

from store import Claimed, EnqueueRequest, Fail
from store.jobs import encode_failure
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, text_of
from tests.mqadmin.test_views_explorer import row_ids

pytestmark = pytest.mark.django_db


def fail(stores: Stores, exc: BaseException, queue: str = "export", name: str = "Export") -> str:
    main = stores.main
    job_id = main.enqueue(EnqueueRequest(name=name, queue=queue)).id
    claimed = main.claim(queue=queue, names=[name], token="w:1", lock_duration_ms=30_000)
    assert isinstance(claimed, Claimed)
    try:
        raise exc
    except BaseException as raised:
        main.ack(job_id, "w:1", Fail(encode_failure(raised)))
    return job_id


def seed(stores: Stores) -> tuple[list[str], list[str]]:
    timeouts = [fail(stores, TimeoutError(f"upstream timed out after {n} s")) for n in (30, 31, 45)]
    time.sleep(0.01)  # a later millisecond: the latest error is listed first
    declined = [fail(stores, ValueError("card <b>declined</b>"), "billing", "Charge")]
    return timeouts, declined


def test_the_failures_view_groups_errors_with_counts(stores: Stores, admin_client_: Client) -> None:
    timeouts, declined = seed(stores)

    response = admin_client_.get("/failures/?store=main")
    html = text_of(response)

    assert response.status_code == 200 and "<html" in html
    rows = re.findall(r'<tr data-group="([0-9a-f]{16})">(.*?)</tr>', html, re.DOTALL)
    assert len(rows) == 2
    first_type = re.search(r'class="error-type">([^<]+)<', rows[0][1]).group(1)  # type: ignore[union-attr]
    assert first_type == "ValueError"  # the latest error first
    timeout_row = rows[1][1]
    assert "TimeoutError" in timeout_row
    assert "upstream timed out after 30 s" in timeout_row
    assert re.search(r'data-label="Failures">3<', timeout_row)
    assert f"/stores/main/jobs/{timeouts[-1]}" in timeout_row
    assert "card &lt;b&gt;declined&lt;/b&gt;" in rows[0][1]  # escaped
    assert "Retry all with this error" in timeout_row
    assert "4 jobs failed now" in html


def test_the_failures_partial_is_a_fragment(stores: Stores, admin_client_: Client) -> None:
    seed(stores)
    html = text_of(admin_client_.get("/failures/?store=main", headers={"HX-Request": "true"}))
    assert "<html" not in html and 'id="groups"' in html and "TimeoutError" in html


def test_the_explorer_shows_the_error_and_filters_by_it(
    stores: Stores, admin_client_: Client
) -> None:
    timeouts, declined = seed(stores)
    listing = text_of(admin_client_.get("/jobs/?store=main&state=failed"))
    cells = re.findall(r'<td class="error-cell">(.*?)</td>', listing, re.DOTALL)
    assert len(cells) == 4 and all("error=" in c for c in cells)
    assert '<span class="error-type">TimeoutError</span>' in listing
    link = re.search(
        r'<td class="error-cell"><a href="([^"]+)"[^>]*><span class="error-type">TimeoutError',
        listing,
    )
    assert link
    filtered = admin_client_.get(htmllib.unescape(link.group(1)))
    html = text_of(filtered)
    assert filtered.status_code == 200
    assert row_ids(html) == timeouts[::-1]
    assert 'data-route="error:' in html
    assert "Failed with <strong>TimeoutError</strong>" in html
    assert "remove this filter" in html
    # A retried job drops out of the error's list.
    stores.main.retry(timeouts[0])
    again = text_of(admin_client_.get(htmllib.unescape(link.group(1))))
    assert row_ids(again) == timeouts[1:][::-1]


def test_retry_all_with_this_error_goes_through_the_preview(
    stores: Stores, admin_client_: Client
) -> None:
    timeouts, declined = seed(stores)
    page = text_of(admin_client_.get("/failures/?store=main"))
    preview_link = re.findall(r'href="(/bulk/preview/\?[^"]+)">Retry all with this error', page)[1]
    preview = admin_client_.get(htmllib.unescape(preview_link))
    html = text_of(preview)
    assert preview.status_code == 200
    assert "<strong>3</strong> jobs match this filter (exact)." in html
    assert re.search(r'<input type="hidden" name="error" value="[0-9a-f]{16}">', html)
    form = dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)">', html))
    form.pop("csrfmiddlewaretoken", None)
    response = admin_client_.post("/bulk/run/", form, follow=True)
    assert response.status_code == 200
    assert all(stores.main.get_job(j).state == "waiting" for j in timeouts)  # type: ignore[union-attr]
    assert stores.main.get_job(declined[0]).state == "failed"  # type: ignore[union-attr]


def test_bad_error_filters_are_400s(stores: Stores, admin_client_: Client) -> None:
    assert admin_client_.get("/jobs/?store=main&error=nothex").status_code == 400
    refused = admin_client_.get("/jobs/?store=main&error=" + "0" * 16 + "&state=waiting")
    assert refused.status_code == 400
    assert "Filtering by error lists failed jobs" in text_of(refused)
    gone = admin_client_.get("/jobs/?store=main&error=" + "0" * 16)
    assert gone.status_code == 200 and "no longer keeps" in text_of(gone)
    assert admin_client_.get("/failures/?store=nope").status_code == 400


def test_error_messages_need_the_view_payload_permission(stores: Stores, viewer: Client) -> None:
    seed(stores)
    for url in ("/failures/?store=main", "/jobs/?store=main&state=failed"):
        html = text_of(viewer.get(url))
        assert "TimeoutError" in html, url  # the type stays visible
        assert "upstream timed out" not in html and "declined" not in html, url
