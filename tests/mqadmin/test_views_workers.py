"""The Workers page, the overview's "no live worker" badge and the outbox's live workers, fed
by the presence records workers write."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from mqadmin.models import AuditEntry
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


def test_a_maintenance_only_worker_says_so_instead_of_blanks(
    stores: Stores, admin_client_: Client
) -> None:
    stores.main.register_worker(
        "w-maint",
        queues={},
        routes=["main"],
        started_at=stores.main.now(),
        totals={"completed": 0, "failed": 0},
        maintenance=True,
    )
    html = text_of(admin_client_.get("/workers/"))
    row = html.split('data-worker="w-maint"', 1)[1].split("</tr>", 1)[0]
    assert "maintenance only" in row
    assert "runs no jobs" in row
    # A worker that serves queues but has run nothing yet says so too.
    announce(stores, worker_id="w-new")
    stores.main.register_worker(
        "w-new",
        queues={"emails": ["SendEmail"]},
        routes=["main"],
        started_at=stores.main.now(),
        totals={"completed": 0},
    )
    row = text_of(admin_client_.get("/workers/")).split('data-worker="w-new"', 1)[1]
    assert "no jobs yet" in row.split("</tr>", 1)[0]


def post_worker(client: Client, verb: str, worker_id: str = "w-1") -> Any:
    return client.post(f"/actions/worker/{verb}/", {"store": "main", "worker_id": worker_id})


def test_quiet_resume_and_stop_set_the_command_and_are_audited(stores: Stores, login: Any) -> None:
    announce(stores)
    operator = login("control_worker")
    html = text_of(operator.get("/workers/"))
    row = html.split('data-worker="w-1"', 1)[1].split("</tr>", 1)[0]
    assert 'action="/actions/worker/quiet/"' in row and 'action="/actions/worker/stop/"' in row
    assert "data-confirm=" in row and "/actions/worker/resume/" not in row

    response = post_worker(operator, "quiet")
    assert response.status_code == 302 and response["Location"] == "/workers/"
    assert stores.main.worker_control("w-1") == "quiet"
    html = text_of(operator.get("/workers/"))
    assert 'data-worker="w-1" data-state="quiet"' in html
    row = html.split('data-worker="w-1"', 1)[1].split("</tr>", 1)[0]
    assert "quiet</span>" in row
    assert 'action="/actions/worker/resume/"' in row and "/actions/worker/quiet/" not in row
    # Quiet twice is refused with the reason (and audited as a failure).
    post_worker(operator, "quiet")

    post_worker(operator, "resume")
    assert stores.main.worker_control("w-1") is None
    post_worker(operator, "stop")
    assert stores.main.worker_control("w-1") == "stop"

    entries = list(AuditEntry.objects.order_by("id").values_list("action", "ok", "target"))
    assert entries == [
        ("quiet_worker", True, "w-1"),
        ("quiet_worker", False, "w-1"),
        ("resume_worker", True, "w-1"),
        ("stop_worker", True, "w-1"),
    ]
    assert "it is quiet" in AuditEntry.objects.order_by("id")[1].result


def test_worker_controls_need_the_permission_and_a_post(
    stores: Stores, viewer: Client, login: Any
) -> None:
    announce(stores)
    # No buttons without the permission.
    assert "/actions/worker/" not in text_of(viewer.get("/workers/"))
    for verb in ("quiet", "resume", "stop"):
        denied = post_worker(viewer, verb)
        assert denied.status_code == 403
        assert "control_worker" in text_of(denied)
    assert stores.main.worker_control("w-1") is None
    assert [e.ok for e in AuditEntry.objects.all()] == [False, False, False]
    # GET never changes anything.
    operator = login("control_worker")
    assert operator.get("/actions/worker/quiet/?store=main&worker_id=w-1").status_code == 405
    assert stores.main.worker_control("w-1") is None


def test_controlling_a_worker_that_is_gone_says_so(stores: Stores, login: Any) -> None:
    response = post_worker(login("control_worker"), "stop", worker_id="w-gone")
    assert response.status_code == 302
    assert stores.main.worker_control("w-gone") is None
    entry = AuditEntry.objects.get()
    assert not entry.ok and "no live worker" in entry.result


def test_worker_controls_need_the_csrf_token(stores: Stores, login: Any) -> None:
    announce(stores)
    client = login("control_worker", csrf=True)
    assert post_worker(client, "quiet").status_code == 403
    assert stores.main.worker_control("w-1") is None
