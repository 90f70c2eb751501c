"""The index status page shows the last mqcheck result of each store."""

from __future__ import annotations

import pytest
from django.test import Client

from mqadmin.queries import operations
from store.consistency import check_store
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, text_of
from tests.store.helpers import req

pytestmark = pytest.mark.django_db


def test_no_check_yet(stores: Stores, admin_client_: Client) -> None:
    html = text_of(admin_client_.get("/indexes/"))
    assert "No check has run on this store yet." in html
    assert "python manage.py mqcheck --store main --repair" in html


def test_last_check_with_problems(stores: Stores, admin_client_: Client) -> None:
    job_id = stores.main.enqueue(req()).id
    stores.main.client.delete(stores.main.keys.job(job_id))
    check_store(stores.main)
    html = text_of(admin_client_.get("/indexes/"))
    main = html.split("<h2", 2)[1]
    assert '<span class="badge bad">problems found</span>' in main
    assert "<code>dangling_member</code>" in main
    assert "set members whose job hash is gone" in main
    side = html.split("<h2", 3)[2]
    assert "No check has run on this store yet." in side


def test_last_check_after_repair_in_the_partial(stores: Stores, admin_client_: Client) -> None:
    job_id = stores.main.enqueue(req()).id
    stores.main.client.delete(stores.main.keys.job(job_id))
    check_store(stores.main, repair=True)
    html = text_of(admin_client_.get("/indexes/", HTTP_HX_REQUEST="true"))
    assert "<html" not in html
    assert '<span class="badge ok">consistent</span>' in html
    assert "check and repair of 0 jobs" in html


def test_an_unreadable_saved_report_is_no_report(stores: Stores, admin_client_: Client) -> None:
    stores.main.client.set(stores.main.keys.check_last, "{not json")
    assert "No check has run" in text_of(admin_client_.get("/indexes/"))
    assert operations.last_check_summary({"found": {"x": "y"}}) is None
    assert operations.last_check_summary(None) is None


def test_dashboard_pages_survive_a_partial_hash(stores: Stores, admin_client_: Client) -> None:
    """A job hash that lost its identifying fields is shown, never a 500."""
    job_id = stores.main.enqueue(req(payload={"n": 1})).id
    other = stores.main.enqueue(req(payload={"n": 2})).id
    stores.main.client.hdel(stores.main.keys.job(job_id), "name", "queue", "payload")
    stores.main.client.hset(stores.main.keys.job(other), "priority", "high")
    for url in (
        f"/stores/main/jobs/{job_id}",
        f"/stores/main/jobs/{other}",
        "/jobs/?store=main",
        "/",
    ):
        response = admin_client_.get(url)
        assert response.status_code == 200, (url, response.status_code)
