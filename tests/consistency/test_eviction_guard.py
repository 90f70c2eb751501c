"""The eviction guard, on private redis-servers of the test's own (never CONFIG SET on a shared one)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client

from bench.chaos import PrivateRedis
from mqadmin import services
from mqadmin.checks import check_eviction_policy
from store import RedisJobStore, eviction
from store.eviction import eviction_status

pytestmark = pytest.mark.django_db


@pytest.fixture
def private_redis() -> Iterator[Callable[..., PrivateRedis]]:
    servers: list[PrivateRedis] = []

    def start(*extra: str) -> PrivateRedis:
        server = PrivateRedis(extra=list(extra))
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.close()


@pytest.fixture(autouse=True)
def fresh_warnings() -> Iterator[None]:
    eviction._warned.clear()
    services.reset()
    yield
    eviction._warned.clear()
    services.reset()


def _warnings(caplog: Any) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "store.eviction"]


def test_noeviction_is_quiet(private_redis, caplog):
    server = private_redis("--maxmemory-policy", "noeviction")
    caplog.set_level(logging.WARNING, logger="store.eviction")
    store = RedisJobStore(server.client(), prefix="ev")
    assert store.eviction.policy == "noeviction" and not store.eviction.evicting
    assert _warnings(caplog) == []
    store.close()


def test_an_evicting_policy_is_warned_once_at_start(private_redis, caplog):
    server = private_redis("--maxmemory-policy", "allkeys-lru")
    caplog.set_level(logging.WARNING, logger="store.eviction")
    first = RedisJobStore(server.client(), prefix="ev1")
    second = RedisJobStore(server.client(), prefix="ev2")
    assert first.eviction.evicting and first.eviction.policy == "allkeys-lru"
    logged = _warnings(caplog)
    assert len(logged) == 1
    assert "allkeys-lru" in logged[0] and "noeviction" in logged[0]
    first.close()
    second.close()


def test_a_refused_config_get_is_said_once_and_the_store_goes_on(private_redis, caplog):
    server = private_redis("--rename-command", "CONFIG", "")
    caplog.set_level(logging.WARNING, logger="store.eviction")
    status = eviction_status(server.client())
    assert status.policy is None and "refused" in status.unreadable
    stores = [RedisJobStore(server.client(), prefix=f"m{i}") for i in range(2)]
    logged = _warnings(caplog)
    assert len(logged) == 1 and "could not read" in logged[0]
    # The store works normally.
    from tests.store.helpers import req

    assert stores[0].enqueue(req()).id
    for store in stores:
        store.close()


def test_acl_refusal_too(private_redis):
    server = private_redis()
    admin = server.client()
    admin.execute_command("ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-config")
    status = eviction_status(server.client(username="app", password="pw"))
    assert status.policy is None and "refused" in status.unreadable


def test_system_check_warns(private_redis, settings):
    bad = private_redis("--maxmemory-policy", "volatile-lru")
    good = private_redis()
    settings.MQ_STORES = {
        "a": {"prefix": "a", "url": bad.url},
        "b": {"prefix": "b", "url": good.url},
    }
    messages = check_eviction_policy()
    assert [m.id for m in messages] == ["mqadmin.W003"]
    assert "volatile-lru" in messages[0].msg and "stores a on" in messages[0].msg
    assert "noeviction" in messages[0].hint


def test_system_check_says_when_the_policy_cannot_be_read(private_redis, settings):
    managed = private_redis("--rename-command", "CONFIG", "")
    settings.MQ_STORES = {"m": {"prefix": "m", "url": managed.url}}
    messages = check_eviction_policy()
    assert [m.id for m in messages] == ["mqadmin.W004"]


def test_manage_py_check_shows_it(private_redis, settings):
    import io

    from django.core.management import call_command

    bad = private_redis("--maxmemory-policy", "allkeys-random")
    settings.MQ_STORES = {"x": {"prefix": "x", "url": bad.url}}
    err = io.StringIO()
    call_command("check", stdout=io.StringIO(), stderr=err)
    assert "mqadmin.W003" in err.getvalue() and "allkeys-random" in err.getvalue()


def test_overview_shows_it(private_redis, settings, admin_client: Client):
    bad = private_redis("--maxmemory-policy", "allkeys-lfu")
    settings.MQ_STORES = {"x": {"prefix": "x", "url": bad.url}}
    html = admin_client.get("/").content.decode()
    assert 'class="warning-text eviction"' in html and "allkeys-lfu" in html
    partial = admin_client.get("/", HTTP_HX_REQUEST="true").content.decode()
    assert "<html" not in partial and "allkeys-lfu" in partial


def test_overview_is_quiet_under_noeviction(private_redis, settings, admin_client: Client):
    good = private_redis()
    settings.MQ_STORES = {"x": {"prefix": "x", "url": good.url}}
    html = admin_client.get("/").content.decode()
    assert 'class="warning-text eviction"' not in html
