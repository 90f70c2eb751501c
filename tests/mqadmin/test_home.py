"""The landing page: login required, then every store's Redis and per-state counts."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from mqadmin import services

pytestmark = pytest.mark.django_db

STATES = ("waiting", "delayed", "active", "waiting-children", "completed", "failed", "cancelled")


@pytest.fixture
def user_client(client: Client, django_user_model: type[User]) -> Client:
    user = django_user_model.objects.create_user(username="viewer", password="pw-for-tests-1")
    client.force_login(user)
    return client


@pytest.fixture(autouse=True)
def fresh_services() -> Iterator[None]:
    services.reset()
    yield
    services.reset()


def cell(html: str, state: str) -> int:
    """The count shown in a store row's cell for ``state`` (first store row)."""
    match = re.search(
        rf'data-state="{re.escape(state)}"><a class="count-link"[^>]*>([\d,]+)<', html
    )
    assert match, f"no cell for {state}"
    return int(match.group(1).replace(",", ""))


def test_anonymous_visitors_are_sent_to_the_login_page(client: Client) -> None:
    response = client.get("/")

    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/"


def test_login_page_renders_and_logs_in(client: Client, django_user_model: type[User]) -> None:
    django_user_model.objects.create_user(username="ops", password="pw-for-tests-1")

    page = client.get("/accounts/login/?next=/")
    assert page.status_code == 200
    assert b'name="username"' in page.content
    assert b'name="password"' in page.content

    response = client.post(
        "/accounts/login/", {"username": "ops", "password": "pw-for-tests-1", "next": "/"}
    )
    assert response.status_code == 302
    assert response["Location"] == "/"


def test_home_shows_counts_per_state_of_each_store(
    user_client: Client,
    settings: Any,
    redis_url: str,
    redis_client: Any,
    prefix: str,
    make_store: Callable[..., Any],
) -> None:
    from store.records import EnqueueRequest

    job_store = make_store()
    job_store.enqueue(EnqueueRequest(name="Send", queue="mail"))
    job_store.enqueue(EnqueueRequest(name="Send", queue="mail"))
    job_store.enqueue(EnqueueRequest(name="Later", queue="mail", delay_ms=60_000))
    settings.MQ_STORES = {"primary": {"prefix": prefix, "url": redis_url}}

    response = user_client.get("/")

    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" in html
    assert "primary" in html
    assert prefix in html
    assert cell(html, "waiting") == 2
    assert cell(html, "delayed") == 1
    for state in STATES[2:]:
        assert cell(html, state) == 0
    version = redis_client.info("server")["redis_version"]
    assert f"Redis {version}" in html
    assert "htmx.min.js" in html


def test_home_partial_for_htmx_refresh(
    user_client: Client, settings: Any, redis_url: str, prefix: str
) -> None:
    settings.MQ_STORES = {"primary": {"prefix": prefix, "url": redis_url}}

    response = user_client.get("/", headers={"HX-Request": "true"})

    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" not in html
    assert html.lstrip().startswith('<div id="stores"')
    assert cell(html, "waiting") == 0


def test_an_unreachable_store_is_reported_without_its_password(
    user_client: Client, settings: Any, redis_url: str, prefix: str
) -> None:
    settings.MQ_STORES = {
        "healthy": {"prefix": prefix, "url": redis_url},
        "broken": {"prefix": "elsewhere", "url": "redis://:topsecret@127.0.0.1:1/0"},
    }

    response = user_client.get("/")

    assert response.status_code == 200
    html = response.content.decode()
    assert "topsecret" not in html
    assert "redis://:***@127.0.0.1:1/0" in html
    assert "Unavailable" in html
    assert cell(html, "waiting") == 0  # the healthy store still renders


def test_a_store_without_url_uses_the_embedded_redis(
    user_client: Client,
    settings: Any,
    prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from store.embedded import EmbeddedRedis

    data_dir = tmp_path / "embedded"
    monkeypatch.setenv("MQ_DATA_DIR", str(data_dir))
    settings.MQ_REDIS_URL = None
    settings.MQ_STORES = {"local": {"prefix": prefix}}
    server = EmbeddedRedis(data_dir)
    try:
        response = user_client.get("/")
        assert response.status_code == 200
        html = response.content.decode()
        assert f"embedded Redis at {server.socket_path}" in html
        assert cell(html, "waiting") == 0
        assert server.is_running()
    finally:
        services.reset()
        server.stop()


def test_a_store_of_an_old_layout_is_reported_with_the_command_that_converts_it(
    user_client: Client, settings: Any, redis_url: str, prefix: str, redis_client: Any
) -> None:
    # A store with jobs but no layout marker was written by the previous version (layout 1).
    redis_client.set(f"{{{prefix}-old}}:seq", "7")
    settings.MQ_STORES = {
        "healthy": {"prefix": prefix, "url": redis_url},
        "old": {"prefix": f"{prefix}-old", "url": redis_url},
    }
    try:
        response = user_client.get("/")
        assert response.status_code == 200
        html = response.content.decode()
        assert "Unavailable" in html
        assert "migrate_store" in html
        assert cell(html, "waiting") == 0  # the healthy store still renders
    finally:
        redis_client.delete(f"{{{prefix}-old}}:seq")
