"""A store whose Redis is down: its pages answer at once instead of waiting out retries.

The store client retries a refused or dropped connection five times with backoff (~1.5 s a
command), which workers need to ride out a Redis restart; a dashboard page with such a
store made one wait per call, seconds a page.  ``services.open_store`` looks at a Redis it
has no client for, and at one found unreachable (again every ``DOWN_RECHECK_S``), with
one connection that never retries, and reports it down at once in between.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from bench.chaos import PrivateRedis
from mqadmin import services
from store import EnqueueRequest, RedisJobStore, connect
from tests.mqadmin.test_views_common import *  # noqa: F403  (fixtures)
from tests.mqadmin.test_views_common import text_of

pytestmark = pytest.mark.django_db


class DroppingServer:
    """A TCP listener that accepts every connection and closes it at once (a Redis that
    drops its clients), counting the connections it was offered."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            conn.close()

    @property
    def url(self) -> str:
        return f"redis://:hunter2@127.0.0.1:{self.port}/0"

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def dropping() -> Iterator[DroppingServer]:
    server = DroppingServer()
    try:
        yield server
    finally:
        server.close()


def test_a_down_store_is_tried_with_one_connection_then_reported_down_at_once(
    settings: Any, dropping: DroppingServer, admin_client_: Client
) -> None:
    settings.MQ_STORES = {"broken": {"prefix": "x", "url": dropping.url}}

    first = admin_client_.get("/jobs/?store=broken")

    assert first.status_code == 503
    assert "Store “broken” is unavailable" in text_of(first)
    # One connection, not the store client's six (a first try and five retries).
    assert dropping.accepted == 1

    for url in ("/jobs/?store=broken", "/stores/broken/jobs/j-1", "/", "/outbox/"):
        response = admin_client_.get(url)
        html = text_of(response)
        assert response.status_code in (200, 503), url
        assert "unavailable" in html.lower(), url
        assert "the next try in" in html, url
        assert "hunter2" not in html, url
    assert dropping.accepted == 1  # known down: nothing tried until the recheck is due


def test_a_down_store_is_looked_at_again_after_the_recheck_interval(
    settings: Any, dropping: DroppingServer, admin_client_: Client
) -> None:
    settings.MQ_STORES = {"broken": {"prefix": "x", "url": dropping.url}}
    assert admin_client_.get("/jobs/?store=broken").status_code == 503
    assert dropping.accepted == 1

    settings.MQ_STORE_RECHECK_SECONDS = 0
    response = admin_client_.get("/jobs/?store=broken")

    assert response.status_code == 503
    assert "the next try in" not in text_of(response)  # a fresh look, not the memory
    assert dropping.accepted == 2


def test_the_recheck_interval_is_the_mq_store_recheck_seconds_setting(
    settings: Any, dropping: DroppingServer, admin_client_: Client
) -> None:
    settings.MQ_STORES = {"broken": {"prefix": "x", "url": dropping.url}}
    settings.MQ_STORE_RECHECK_SECONDS = 60
    assert admin_client_.get("/jobs/?store=broken").status_code == 503

    response = admin_client_.get("/jobs/?store=broken")

    found = re.search(r"the next try in (\d+\.\d) s", text_of(response))
    assert found and 55 < float(found[1]) <= 60  # not the 5 s default
    assert dropping.accepted == 1


def test_a_store_whose_redis_dies_and_comes_back_is_reported_then_served_again(
    settings: Any, admin_client_: Client
) -> None:
    # Every write on disk before it is acknowledged: the job outlives the crash below.
    server = PrivateRedis(appendonly=True, appendfsync="always").start()
    try:
        client = connect(server.url)
        RedisJobStore(client, prefix="down").enqueue(EnqueueRequest(name="Job", id="j-1"))
        client.close()
        settings.MQ_STORES = {"solo": {"prefix": "down", "url": server.url}}
        assert admin_client_.get("/stores/solo/jobs/j-1").status_code == 200

        server.kill()
        # The cached client finds out (after its retries), and the Redis is remembered down.
        assert admin_client_.get("/stores/solo/jobs/j-1").status_code == 503
        again = admin_client_.get("/stores/solo/jobs/j-1")
        assert again.status_code == 503
        assert "the next try in" in text_of(again)

        server.start()
        still = admin_client_.get("/stores/solo/jobs/j-1")
        assert still.status_code == 503  # until the recheck is due
        settings.MQ_STORE_RECHECK_SECONDS = 0
        back = admin_client_.get("/stores/solo/jobs/j-1")
        assert back.status_code == 200
        assert "j-1" in text_of(back)
        assert services._down == {}
    finally:
        services.reset()
        server.close()
