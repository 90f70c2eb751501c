"""The dashboard shows Django tasks like any job: name = module path, arguments readable."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.test import Client
from django.urls import NoReverseMatch, reverse

from tests.tasks import sample_tasks as t

pytestmark = pytest.mark.django_db


def visible(content: bytes) -> str:
    """The page's text as a reader sees it (tags dropped, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", "", content.decode()))


def url(name: str, **kwargs: Any) -> str:
    """The URL of a dashboard view, namespaced (``mqadmin:``) where the app namespaces them."""
    try:
        return reverse(f"mqadmin:{name}", kwargs=kwargs)
    except NoReverseMatch:
        return reverse(name, kwargs=kwargs)


@pytest.fixture
def admin(django_user_model: Any) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser(username="root", password=None))
    return client


def test_job_page_of_a_task_shows_its_module_path_and_arguments(
    admin: Client, run_worker: Any
) -> None:
    result = t.echo.enqueue("hello <b>", 42, flag=True)
    page = admin.get(url("job", store="main", job_id=result.id))
    assert page.status_code == 200
    text = visible(page.content)
    assert t.echo.module_path in text
    assert '"args": [\n    "hello <b>",\n    42\n  ]' in text and '"flag": true' in text
    assert "hello <b>" not in page.content.decode()  # escaped in the markup

    run_worker()
    page = admin.get(url("job", store="main", job_id=result.id))
    text = visible(page.content)
    assert "completed" in text and '"return_value"' in text

    partial = admin.get(url("job", store="main", job_id=result.id), HTTP_HX_REQUEST="true")
    assert partial.status_code == 200 and "<html" not in partial.content.decode()


def test_explorer_lists_tasks_by_module_path(admin: Client) -> None:
    t.labelled.enqueue("a")
    t.labelled.using(queue_name="queue-1").enqueue("b")
    page = admin.get(url("jobs") + "?store=main&name=" + t.labelled.module_path)
    assert page.status_code == 200
    text = page.content.decode()
    assert text.count(t.labelled.module_path) >= 2
    assert "queue-1" in text
