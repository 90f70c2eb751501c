"""The Workers page, the overview's "no live worker" badge and the outbox's live workers, fed
by the presence records workers write."""

from __future__ import annotations

import pytest
from django.test import Client

from store import EnqueueRequest
from store.insights import InFlightJob
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, text_of

pytestmark = pytest.mark.django_db


def announce(stores: Stores, worker_id: str = "w-1", queue: str = "emails") -> str:
    job_id = stores.main.enqueue(EnqueueRequest(name="SendEmail", queue=queue)).id
    stores.main.register_worker(
        worker_id,
        queues={queue: ["SendEmail"]},
        routes=["main"],
        started_at=stores.main.now() - 3_600_000,
        concurrency={queue: 4},
        in_flight=[InFlightJob(job_id, queue, "SendEmail", stores.main.now() - 5000)],
        totals={"completed": 12345, "failed": 2},
    )
    return job_id


def test_the_workers_page_lists_each_live_worker(stores: Stores, admin_client_: Client) -> None:
    job_id = announce(stores)
    stores.main.enqueue(EnqueueRequest(name="Charge", queue="billing"))

    response = admin_client_.get("/workers/")
    html = text_of(response)

    assert response.status_code == 200 and "<html" in html
    assert 'data-worker="w-1"' in html
    assert "×4" in html
    assert f'href="/stores/main/jobs/{job_id}"' in html
    assert "completed 12,345" in html
    assert "1 h ago" in html  # started
    # billing holds a job but nobody consumes it; the side store has no worker at all.
    assert "Queues no live worker consumes" in html and "queue=billing" in html
    assert "No live worker: no process serving this store" in html


def test_the_workers_partial_is_a_fragment(stores: Stores, admin_client_: Client) -> None:
    announce(stores)
    html = text_of(admin_client_.get("/workers/", headers={"HX-Request": "true"}))
    assert "<html" not in html and 'id="workers"' in html and 'data-worker="w-1"' in html


def test_the_overview_flags_queues_without_a_live_worker(
    stores: Stores, admin_client_: Client
) -> None:
    announce(stores, queue="emails")
    stores.main.enqueue(EnqueueRequest(name="Charge", queue="billing"))

    html = text_of(admin_client_.get("/"))
    emails = html.split("queue=emails", 1)[1].split("</tr>", 1)[0]
    billing = html.split("queue=billing", 1)[1].split("</tr>", 1)[0]
    assert "no live worker" not in emails
    assert "no live worker" in billing


def test_the_outbox_page_sees_announced_workers(stores: Stores, admin_client_: Client) -> None:
    html = text_of(admin_client_.get("/outbox/"))
    assert "none seen in the last minute" in html
    announce(stores)
    html = text_of(admin_client_.get("/outbox/"))
    assert "<code>w-1</code>" in html


def test_the_workers_page_needs_a_login(stores: Stores, client: Client) -> None:
    response = client.get("/workers/")
    assert response.status_code == 302 and "/login/" in response["Location"]
