"""Hidden means hidden: without ``view_payload`` no filter reveals a metadata value (issue 23, defect 5).

A user who may not see metadata values used to be able to confirm a guess with
``/jobs/?meta=tenant=<guess>`` (the job was listed only when the guess was right), and
the same through a bulk preview's count.  Such filters are now refused with 400 and
the reason; users with the permission filter as before.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client

from store import EnqueueRequest
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, text_of

pytestmark = pytest.mark.django_db

REASON = "needs the “view_payload” permission"


def same_page(a: str, b: str) -> bool:
    token = re.compile(r'(csrfmiddlewaretoken" value="|CSRFToken": ")[^"]*')
    return token.sub("", a) == token.sub("", b)


@pytest.fixture
def secret_job(stores: Stores) -> str:
    return stores.main.enqueue(
        EnqueueRequest(name="Invoice", queue="billing", metadata={"tenant": "acme"})
    ).id


def test_metadata_filter_is_refused_without_view_payload(secret_job, login) -> None:
    client: Client = login("bulk_action", "retry_job", "cancel_job")
    right = client.get("/jobs/?store=main&meta=tenant=acme")
    wrong = client.get("/jobs/?store=main&meta=tenant=globex")
    for response in (right, wrong):
        assert response.status_code == 400
        assert REASON in text_of(response)
        assert secret_job not in text_of(response)
    # The two answers are the same (but for the guess and the CSRF token): nothing confirmed.
    assert same_page(text_of(right).replace("acme", "X"), text_of(wrong).replace("globex", "X"))
    preview = client.get("/bulk/preview/?store=main&verb=cancel&meta=tenant=acme")
    assert preview.status_code == 400 and REASON in text_of(preview)
    run = client.post("/bulk/run/", {"store": "main", "verb": "cancel", "meta": "tenant=acme"})
    assert run.status_code == 400 and REASON in text_of(run)
    # Nothing was cancelled.
    assert client.get(f"/stores/main/jobs/{secret_job}").status_code == 200


def test_the_explorer_tells_users_without_view_payload(secret_job, login) -> None:
    html = text_of(login().get("/jobs/?store=main"))
    assert "Filtering by metadata values needs the “view_payload” permission" in html
    assert 'placeholder="key=value"' not in html


def test_metadata_filter_works_with_view_payload(secret_job, login) -> None:
    client: Client = login("view_payload", "bulk_action", "cancel_job")
    assert secret_job in text_of(client.get("/jobs/?store=main&meta=tenant=acme"))
    assert secret_job not in text_of(client.get("/jobs/?store=main&meta=tenant=globex"))
    preview = client.get("/bulk/preview/?store=main&verb=cancel&meta=tenant=acme")
    assert preview.status_code == 200


def test_the_reason_is_the_forms_message() -> None:
    from mqadmin.forms import METADATA_FILTER_DENIED

    assert REASON in METADATA_FILTER_DENIED
