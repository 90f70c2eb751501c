"""A Redis user whose ACL refuses FUNCTION (and CONFIG, or more) can still run a store.

Each test creates a user of its own on the test's Redis (ACL SETUSER with a unique
name, deleted at the end) and connects as it.  On Redis 7 the store then runs its
operations as scripts (EVALSHA) instead of a Function library; a user who may not
run the scripts at all gets a JobStoreError naming the command, ``manage.py check``
reports an error and ``/readyz/`` answers 503.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from store import (
    Claimed,
    Complete,
    EnqueueRequest,
    Fail,
    FakeClock,
    JobStoreError,
    RedisJobStore,
    Retry,
    ScheduleRecord,
    connect,
)
from tests.flows.helpers import fanout_parent


def major(client: Any) -> int:
    return int(str(client.info("server")["redis_version"]).split(".")[0])


def user_url(url: str, user: str, password: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{user}:{password}@{rest}"


def rules_for(kind: str, prefix: str, server_major: int) -> list[str]:
    no_function = ["-function"] if server_major >= 7 else []  # 6.2 has no FUNCTION
    if kind == "no-function-config":
        return ["allkeys", "allchannels", "+@all", "-config", *no_function]
    if kind == "no-dangerous":
        return ["allkeys", "allchannels", "+@all", "-@dangerous", "-config", *no_function]
    if kind == "smallest":  # docs/guarantees.md "Restricted Redis users"
        tag = "{" + prefix + "}"
        return [
            f"~{tag}*",
            "resetchannels",
            f"&{tag}:wake",
            "-@all",
            "+@read",
            "+@write",
            "+evalsha",
            "+script|load",
            "+publish",
            "+subscribe",
            "+ping",
        ]
    if kind == "no-evalsha":
        return ["allkeys", "allchannels", "+@all", "-evalsha", "-config", *no_function]
    raise AssertionError(kind)


@pytest.fixture
def acl_user(redis_client: Any, redis_url: str, prefix: str) -> Iterator[Callable[[str], str]]:
    """``acl_user(kind)``: a new user with those rules; returns a URL that logs in as it."""
    made: list[str] = []

    def create(kind: str) -> str:
        name = f"mqtest-acl-{uuid.uuid4().hex[:10]}"
        password = uuid.uuid4().hex
        rules = rules_for(kind, prefix, major(redis_client))
        redis_client.execute_command("ACL", "SETUSER", name, "reset", "on", f">{password}", *rules)
        made.append(name)
        return user_url(redis_url, name, password)

    yield create
    for name in made:
        redis_client.execute_command("ACL", "DELUSER", name)


@pytest.fixture
def user_store(
    acl_user: Callable[[str], str], prefix: str, clock: FakeClock
) -> Iterator[Callable[[str], RedisJobStore]]:
    made: list[tuple[Any, Any]] = []

    def build(kind: str) -> RedisJobStore:
        client = connect(acl_user(kind))
        made.append((client, None))
        job_store = RedisJobStore(client, prefix=prefix, clock=clock)
        made[-1] = (client, job_store)
        return job_store

    yield build
    for client, job_store in made:
        if job_store is not None:
            job_store.close()
        client.close()


def claimed(job_store: RedisJobStore, queue: str = "default", name: str = "TestJob") -> Any:
    result = job_store.claim(queue=queue, names=[name], token="t-1", lock_duration_ms=30_000)
    assert isinstance(result, Claimed), result
    return result.job


@pytest.mark.parametrize("kind", ["no-function-config", "no-dangerous", "smallest"])
def test_the_conformance_subset_runs_as_a_restricted_user(
    user_store: Callable[[str], RedisJobStore], redis_client: Any, clock: FakeClock, kind: str
) -> None:
    job_store = user_store(kind)
    if major(redis_client) >= 7:
        assert job_store._scripts.mode == "scripts"  # FUNCTION refused: EVALSHA instead
    job_store.check_scripts()

    # enqueue, claim, ack complete / fail / retry
    done = job_store.enqueue(EnqueueRequest(name="TestJob", payload={"n": 1})).id
    failed = job_store.enqueue(EnqueueRequest(name="TestJob", payload={"n": 2})).id
    again = job_store.enqueue(EnqueueRequest(name="TestJob", payload={"n": 3}, attempts_max=3)).id
    assert claimed(job_store).id == done
    job_store.ack(done, "t-1", Complete({"ok": True}))
    assert claimed(job_store).id == failed
    job_store.ack(failed, "t-1", Fail({"error": "boom"}))
    assert claimed(job_store).id == again
    job_store.ack(again, "t-1", Retry(delay_ms=1000))
    counts = job_store.counts()
    assert (counts["completed"], counts["failed"], counts["delayed"]) == (1, 1, 1)

    # promote, retry, cancel, remove, list
    job_store.promote(again)
    assert job_store.counts()["waiting"] == 1
    job_store.retry(failed)
    assert job_store.counts()["waiting"] == 2
    job_store.cancel(failed)
    assert job_store.get_job(failed).state == "cancelled"  # type: ignore[union-attr]
    assert {j.id for j in job_store.list(limit=10).items} == {done, failed, again}
    assert job_store.remove(done)
    assert job_store.get_job(done) is None

    # pause / resume
    job_store.pause("default")
    assert job_store.paused_queues() == ["default"]
    job_store.resume("default")
    assert job_store.paused_queues() == []

    # schedules: upsert, due
    job_store.upsert_schedule(
        ScheduleRecord(
            key="nightly", job_name="Report", queue="q", every_ms=60_000, next_run_at=60_000
        )
    )
    assert job_store.due_schedules() == []
    clock.set(60_000)
    assert [s.key for s in job_store.due_schedules()] == ["nightly"]

    # a flow fan-out into this store
    parent = fanout_parent(job_store, ("a", "b"), store_key="default", queue="flows")
    assert job_store.get_job(parent).state == "waiting-children"  # type: ignore[union-attr]


def test_a_user_without_evalsha_gets_a_job_store_error_naming_it(
    user_store: Callable[[str], RedisJobStore],
) -> None:
    with pytest.raises(JobStoreError) as caught:
        job_store = user_store("no-evalsha")
        job_store.enqueue(EnqueueRequest(name="TestJob"))
    assert "EVALSHA" in caught.value.message
    assert "+evalsha" in caught.value.message
    assert type(caught.value) is JobStoreError


def test_check_scripts_refuses_a_user_without_evalsha(
    acl_user: Callable[[str], str], prefix: str
) -> None:
    from store.keys import StoreKeys
    from store.scripts import ScriptRegistry

    client = connect(acl_user("no-evalsha"))
    registry = ScriptRegistry(client, StoreKeys(prefix).tag)
    try:
        with pytest.raises(Exception, match="evalsha"):
            registry.probe()
    finally:
        registry.close()
        client.close()


@pytest.mark.django_db
def test_manage_py_check_and_readyz_report_a_store_that_cannot_run_scripts(
    acl_user: Callable[[str], str], prefix: str, settings: Any, client: Any
) -> None:
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    from mqadmin import services
    from mqadmin.checks import check_store_scripts

    url = acl_user("no-evalsha")
    settings.MQ_STORES = {"default": {"prefix": prefix, "url": url}}
    services.reset()
    try:
        messages = check_store_scripts()
        assert [m.id for m in messages] == ["mqadmin.E019"]
        assert "EVALSHA" in messages[0].msg
        with pytest.raises(SystemCheckError, match="mqadmin.E019"):
            call_command("check")
        response = client.get("/readyz/")
        assert response.status_code == 503
    finally:
        services.reset()


@pytest.mark.django_db
def test_readyz_and_check_pass_for_a_user_without_function(
    acl_user: Callable[[str], str], prefix: str, settings: Any, client: Any
) -> None:
    from mqadmin import services
    from mqadmin.checks import check_store_scripts

    settings.MQ_STORES = {"default": {"prefix": prefix, "url": acl_user("no-function-config")}}
    services.reset()
    try:
        assert check_store_scripts() == []
        assert client.get("/readyz/").status_code == 200
    finally:
        services.reset()


@pytest.mark.timeout(120)
def test_a_full_server_can_still_be_listed_and_drained_in_scripts_mode() -> None:
    """The EVALSHA fallback keeps the OOM-safe operations working on a full Redis 7
    (their scripts carry the allow-oom shebang flag) and refuses the others whole."""
    from bench.chaos import PrivateRedis
    from tests.chaos.test_memory_pressure import fill, limit_memory

    server = PrivateRedis().start()
    admin = connect(server.url)
    try:
        if major(admin) < 7:
            pytest.skip("the Function library (and so the fallback) needs Redis 7")
        admin.execute_command(
            "ACL", "SETUSER", "app", "reset", "on", ">pw", *rules_for("no-function-config", "", 7)
        )
        client = connect(user_url(server.url, "app", "pw"))
        job_store = RedisJobStore(client, prefix="full")
        try:
            assert job_store._scripts.mode == "scripts"
            limit_memory(admin, "noeviction")
            ids, error = fill(job_store)
            assert error is not None and "maxmemory" in str(error)
            assert len(job_store.list(limit=5).items) == 5
            assert job_store.remove(ids[0])
            assert job_store.get_job(ids[0]) is None
            admin.config_set("maxmemory", "0")
            assert job_store.counts()["waiting"] == len(ids) - 1
        finally:
            job_store.close()
            client.close()
    finally:
        admin.close()
        server.close()
