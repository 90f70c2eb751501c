"""The search box: ids and id prefixes, error text, payload and metadata values (issue 29)."""

from __future__ import annotations

import html as htmllib
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client

from mqadmin.search import PAYLOAD_SEARCH_DENIED, Search, parse_search, payload_paths
from store import Claimed, EnqueueRequest, Fail, RedisJobStore
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, failed_job, text_of
from tests.mqadmin.test_views_explorer import row_ids

pytestmark = pytest.mark.django_db


def fail_with(store: RedisJobStore, etype: str, message: str, **kw: Any) -> str:
    job_id = store.enqueue(EnqueueRequest(name="Sync", queue="sync", **kw)).id
    claimed = store.claim(queue="sync", names=["Sync"], token="w-s:1", lock_duration_ms=30_000)
    assert isinstance(claimed, Claimed) and claimed.job.id == job_id
    store.ack(job_id, "w-s:1", Fail({"error": {"type": etype, "message": message}}))
    return job_id


def get(client: Client, q: str, **params: str) -> Any:
    return client.get("/jobs/", {"store": "main", "q": q, **params})


# ---------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("j-12", Search(text="j-12", id_text="j-12")),
        ("id:j-1", Search(text="id:j-1", id_text="j-1")),
        ('"an id"', Search(text='"an id"', id_text="an id")),
        (
            "error:connection refused by peer",
            Search(
                text="error:connection refused by peer", error_text="connection refused by peer"
            ),
        ),
        (
            'error:"timed out" args.order.id:42 meta.region:eu',
            Search(
                text='error:"timed out" args.order.id:42 meta.region:eu',
                error_text="timed out",
                payload={"order.id": "42"},
                metadata={"region": "eu"},
            ),
        ),
        (
            'error:timeout args.customer.name:"Ann Lee"',
            Search(
                text='error:timeout args.customer.name:"Ann Lee"',
                error_text="timeout",
                payload={"customer.name": "Ann Lee"},
            ),
        ),
        (
            "weird:id:with:colons",
            Search(text="weird:id:with:colons", id_text="weird:id:with:colons"),
        ),
    ],
)
def test_parse_search(text: str, expected: Search) -> None:
    assert parse_search(text) == expected
    again = parse_search(expected.render())
    assert (again.id_text, again.error_text, again.payload, again.metadata) == (
        expected.id_text,
        expected.error_text,
        expected.payload,
        expected.metadata,
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("two words", "one job id or id prefix at a time"),
        ("args..x:1", "is not a payload path"),
        ("error:", "needs some text"),
        ("x" * 1001, "at most 1000 characters"),
    ],
)
def test_bad_searches_answer_400_with_a_message(
    text: str, message: str, stores: Stores, admin_client_: Client
) -> None:
    response = get(admin_client_, text)
    assert response.status_code == 400
    assert message in htmllib.unescape(text_of(response))


def test_payload_paths_suggest_reachable_scalar_paths() -> None:
    paths = payload_paths(
        [
            {"order": {"id": 1, "lines": [{"sku": "a"}]}, "tags": ["x"], "a.b": 1, "": 2},
            {"order": {"id": 2, "note": None}, "user": "u"},
        ]
    )
    assert paths == ["order.id", "order.lines.0.sku", "tags", "order.note", "user"]


# ---------------------------------------------------------------------- ids


def test_an_exact_id_opens_the_job(stores: Stores, admin_client_: Client) -> None:
    job_id = stores.main.enqueue(EnqueueRequest(name="A", queue="q", id="order/77")).id
    response = get(admin_client_, job_id)
    assert response.status_code == 302
    assert response["Location"] == f"/stores/main/jobs/{job_id}"
    htmx = admin_client_.get("/jobs/", {"store": "main", "q": job_id}, HTTP_HX_REQUEST="true")
    assert htmx["HX-Redirect"] == f"/stores/main/jobs/{job_id}"


def test_an_id_prefix_lists_the_jobs_it_starts(stores: Stores, admin_client_: Client) -> None:
    for i in range(12):
        stores.main.enqueue(EnqueueRequest(name="A", queue="q", id=f"inv-{i:02d}"))
    stores.main.enqueue(EnqueueRequest(name="A", queue="q", id="other-1"))
    response = get(admin_client_, "inv-1", order="asc")
    assert response.status_code == 200
    assert row_ids(text_of(response)) == [f"inv-{i}" for i in range(10, 12)]
    assert "id prefix" in text_of(response)  # named among the residual filters


# ---------------------------------------------------------------------- errors


def test_error_text_naming_one_kind_of_failure_lists_its_jobs(
    stores: Stores, admin_client_: Client
) -> None:
    gone = [
        fail_with(stores.main, "GatewayTimeout", f"upstream timed out after {s} s") for s in (3, 9)
    ]
    other = fail_with(stores.main, "KeyError", "missing field")
    stores.main.enqueue(EnqueueRequest(name="Sync", queue="sync"))  # not failed
    response = get(admin_client_, "error:timed out")
    html = text_of(response)
    assert response.status_code == 200
    assert sorted(row_ids(html)) == sorted(gone) and other not in row_ids(html)
    assert "GatewayTimeout" in html  # the error filter banner
    # The type alone finds it too, case-insensitively.
    assert sorted(row_ids(text_of(get(admin_client_, "error:gatewaytimeout")))) == sorted(gone)


def test_error_text_matching_several_kinds_lists_them_to_pick_from(
    stores: Stores, admin_client_: Client
) -> None:
    fail_with(stores.main, "GatewayTimeout", "upstream timed out")
    fail_with(stores.main, "ReadTimeout", "socket read timed out")
    fail_with(stores.main, "KeyError", "missing field")
    response = get(admin_client_, "error:timed out args.k:1")
    html = htmllib.unescape(text_of(response))
    assert response.status_code == 200
    assert "2 kinds of failure match “timed out”" in html
    assert row_ids(html) == []
    links = re.findall(r'<a href="(/jobs/\?[^"]*error=[0-9a-f]{16}[^"]*)"', html)
    assert len(links) == 2
    params = parse_qs(urlsplit(links[0]).query)
    assert params["q"] == ["args.k:1"]  # the other terms stay, the error term goes
    # Bulk actions never fall back to "every job": refused until one kind is picked.
    preview = admin_client_.get(
        "/bulk/preview/", {"store": "main", "verb": "retry", "q": "error:timed out"}
    )
    assert preview.status_code == 400
    assert "does not name one kind of failure" in htmllib.unescape(text_of(preview))


def test_error_text_matching_nothing_says_so(stores: Stores, admin_client_: Client) -> None:
    fail_with(stores.main, "KeyError", "missing field")
    html = htmllib.unescape(text_of(get(admin_client_, "error:no such thing")))
    assert "No failure matches “no such thing”" in html
    assert row_ids(html) == []


def test_bulk_retry_of_an_error_search_acts_on_that_kind_only(stores: Stores, login: Any) -> None:
    client = login("bulk_action", "retry_job", "view_payload")
    gone = [fail_with(stores.main, "GatewayTimeout", "upstream timed out") for _ in range(3)]
    other = fail_with(stores.main, "KeyError", "missing field")
    preview = client.get(
        "/bulk/preview/", {"store": "main", "verb": "retry", "q": "error:timed out"}
    )
    assert preview.status_code == 200
    run = client.post("/bulk/run/", {"store": "main", "verb": "retry", "q": "error:timed out"})
    assert run.status_code in (200, 302)
    states = {job_id: stores.main.get_job(job_id).state for job_id in [*gone, other]}
    assert all(states[j] == "waiting" for j in gone) and states[other] == "failed"


def test_without_view_payload_error_messages_are_not_searched(stores: Stores, login: Any) -> None:
    client = login()
    fail_with(stores.main, "GatewayTimeout", "secret host db-7 timed out")
    by_message = htmllib.unescape(text_of(get(client, "error:db-7")))
    assert "No failure matches “db-7”" in by_message
    assert "Error messages are not searched" in by_message
    assert len(row_ids(text_of(get(client, "error:GatewayTimeout")))) == 1


# ---------------------------------------------------------------------- payload and metadata


def test_payload_and_metadata_values_find_jobs(stores: Stores, admin_client_: Client) -> None:
    main = stores.main
    hit = main.enqueue(
        EnqueueRequest(
            name="Ship", queue="q", payload={"order": {"id": 42}}, metadata={"region": "eu"}
        )
    ).id
    main.enqueue(
        EnqueueRequest(
            name="Ship", queue="q", payload={"order": {"id": 43}}, metadata={"region": "eu"}
        )
    )
    main.enqueue(
        EnqueueRequest(
            name="Ship", queue="q", payload={"order": {"id": 42}}, metadata={"region": "us"}
        )
    )
    response = get(admin_client_, "args.order.id:42 meta.region:eu")
    assert response.status_code == 200
    assert row_ids(text_of(response)) == [hit]
    assert "payload order.id" in text_of(response)


def test_a_failed_job_found_by_payload_among_its_error(
    stores: Stores, admin_client_: Client
) -> None:
    target = fail_with(stores.main, "CardError", "declined", payload={"card": "4242"})
    fail_with(stores.main, "CardError", "declined", payload={"card": "1111"})
    response = get(admin_client_, "error:declined args.card:4242")
    assert row_ids(text_of(response)) == [target]


@pytest.mark.parametrize("q", ["args.order.id:42", "meta.region:eu"])
def test_payload_search_is_refused_without_view_payload(q: str, stores: Stores, login: Any) -> None:
    client = login("bulk_action", "cancel_job")
    stores.main.enqueue(EnqueueRequest(name="Ship", queue="q", payload={"order": {"id": 42}}))
    response = get(client, q)
    assert response.status_code == 400
    assert PAYLOAD_SEARCH_DENIED in htmllib.unescape(text_of(response))
    preview = client.get("/bulk/preview/", {"store": "main", "verb": "cancel", "q": q})
    assert preview.status_code == 400
    assert PAYLOAD_SEARCH_DENIED in htmllib.unescape(text_of(preview))


def test_a_search_keeps_its_terms_when_the_scan_budget_runs_out(
    stores: Stores, admin_client_: Client
) -> None:
    main = stores.main
    needle = main.enqueue(EnqueueRequest(name="Imp", queue="q", payload={"k": "needle"})).id
    main.enqueue_many(
        [EnqueueRequest(name="Imp", queue="q", payload={"k": "hay"}) for _ in range(2100)]
    )
    first = text_of(get(admin_client_, "args.k:needle"))
    assert row_ids(first) == []
    assert "Continue scanning" in first
    cont = re.search(r'<a class="continue" href="([^"]*)"', first)
    assert cont is not None
    url = htmllib.unescape(cont.group(1))
    assert parse_qs(urlsplit(url).query)["q"] == ["args.k:needle"]
    assert row_ids(text_of(admin_client_.get(url))) == [needle]


# ---------------------------------------------------------------------- the box


def test_the_header_search_box_is_on_every_page(stores: Stores, admin_client_: Client) -> None:
    html = text_of(admin_client_.get("/failures/"))
    form = re.search(r'<form class="lookup" method="get" action="([^"]*)" role="search">', html)
    assert form is not None and form.group(1) == "/jobs/"
    assert 'name="q"' in html


def test_the_search_box_suggests_payload_paths(stores: Stores, login: Any) -> None:
    stores.main.enqueue(EnqueueRequest(name="Ship", queue="q", payload={"order": {"id": 1}}))
    failed_job(stores.main)
    with_payload = text_of(login("view_payload").get("/jobs/?store=main&name=Ship"))
    assert '<option value="args.order.id:"></option>' in with_payload
    without = text_of(login().get("/jobs/?store=main&name=Ship"))
    assert '<option value="args.order.id:">' not in without
