"""``manage.py mqlimits``: show, set and clear queue limits (in process, call_command)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from mqadmin import services
from store import Claimed, EnqueueRequest, QueueLimits, Rate, RedisJobStore
from tests.conftest import delete_prefix


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("mqlimits", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def one(settings: Any, redis_url: str, prefix: str) -> Iterator[RedisJobStore]:
    """One configured store, "main", on this test's prefix."""
    services.reset()
    settings.MQ_STORES = {"main": {"prefix": prefix, "url": redis_url}}
    yield services.get_named_store("main")
    services.reset()


@pytest.fixture
def two(settings: Any, redis_url: str, redis_client: Any, prefix: str) -> Iterator[RedisJobStore]:
    """Two configured stores, "main" (returned) and "side"."""
    services.reset()
    settings.MQ_STORES = {
        "main": {"prefix": prefix, "url": redis_url},
        "side": {"prefix": f"{prefix}-side", "url": redis_url},
    }
    yield services.get_named_store("main")
    services.reset()
    delete_prefix(redis_client, f"{prefix}-side")


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("100/s", Rate(100, 1000)),
        ("10/min", Rate(10, 60_000)),
        ("5/h", Rate(5, 3_600_000)),
        ("20/250ms", Rate(20, 250)),
        ("3/2s", Rate(3, 2000)),
    ],
)
def test_rate_forms(one: RedisJobStore, text: str, rate: Rate) -> None:
    run("mails", "--rate", text)
    assert one.queue_limits("mails").rate == rate
    assert one.queue_limits("mails").concurrency is None


def test_set_show_replace_and_clear(one: RedisJobStore) -> None:
    for _ in range(3):
        one.enqueue(EnqueueRequest(name="Send", queue="mails"))
    out = run("mails", "--concurrency", "4", "--rate", "10/min")
    assert "mails" in out and "0/4" in out and "10/min" in out
    limits = one.queue_limits("mails")
    assert (limits.concurrency, limits.rate, limits.waiting) == (4, Rate(10, 60_000), 3)

    run("other", "--concurrency", "2")
    table = run()
    lines = table.splitlines()
    assert lines[0].split()[:2] == ["store", "queue"]
    assert [line.split()[1] for line in lines[1:]] == ["mails", "other"]
    assert "3" in lines[1].split()  # waiting
    assert "mails" in run("mails") and "other" not in run("mails")

    run("mails", "--rate", "5/s")  # changes the rate, keeps the concurrency
    assert one.queue_limits("mails").concurrency == 4
    assert one.queue_limits("mails").rate == Rate(5, 1000)
    run("mails", "--concurrency", "none")  # removes that kind only
    assert one.queue_limits("mails").concurrency is None
    assert one.queue_limits("mails").rate == Rate(5, 1000)

    run("mails", "--clear")
    assert one.queue_limits("mails") == QueueLimits(queue="mails", waiting=3)
    assert one.limited_queues() == ["other"]
    assert "not limited" in run("mails")


def test_no_limited_queue(one: RedisJobStore) -> None:
    assert "no limited queues" in run()


def test_throttled_until_and_active_are_shown(one: RedisJobStore) -> None:
    one.set_queue_limits("mails", rate=Rate(1, 3_600_000))
    one.enqueue(EnqueueRequest(name="Send", queue="mails"))
    one.enqueue(EnqueueRequest(name="Send", queue="mails"))
    claimed = one.claim("mails", names=["Send"], token="t", lock_duration_ms=60_000)
    assert isinstance(claimed, Claimed)
    row = run("mails").splitlines()[1]
    assert row.split()[2] == "1/-"
    assert row.endswith("Z")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["mails", "--rate", "100"], "a rate looks like N/PERIOD"),
        (["mails", "--rate", "100/fortnight"], "a rate looks like N/PERIOD"),
        (["mails", "--rate", "0/s"], "limit"),
        (["mails", "--rate", "5/0ms"], "period \\(per_ms\\) must be between 1"),
        (["mails", "--rate=-1/s"], "a rate looks like N/PERIOD"),
        (["mails", "--concurrency", "0"], "at least 1"),
        (["mails", "--concurrency", "two"], "at least 1"),
        (["mails", "--concurrency", "2", "--rate", "x"], "a rate looks like N/PERIOD"),
        (["mails", "--concurrency", "2", "--clear"], "cannot be combined"),
        (["--concurrency", "2"], "name the QUEUE"),
        (["mails", "--concurrency", "2", "--group-concurrency", "0"], "at least 1"),
        (["mails", "--group-rate", "1/fortnight"], "a rate looks like N/PERIOD"),
        (["mails", "--concurrency", "2", "--store", "nope"], "nope"),
    ],
)
def test_bad_input_writes_nothing(
    one: RedisJobStore, redis_client: Any, args: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert not redis_client.exists(one.keys.limits)


def test_several_stores_need_store_to_change(two: RedisJobStore) -> None:
    with pytest.raises(CommandError, match="--store"):
        run("mails", "--concurrency", "2")
    run("mails", "--concurrency", "2", "--store", "side")
    assert two.limited_queues() == []
    assert services.get_named_store("side").limited_queues() == ["mails"]
    rows = run().splitlines()[1:]
    assert [row.split()[:2] for row in rows] == [["side", "mails"]]
    assert run("--store", "main").strip() == "no limited queues"


def test_group_limits_are_set_kept_and_removed(one: RedisJobStore) -> None:
    run("mails", "--group-concurrency", "1", "--group-rate", "10/min")
    limits = one.queue_limits("mails")
    assert (limits.group_concurrency, limits.group_rate) == (1, Rate(10, 60_000))
    row = run("mails").splitlines()[1].split()
    assert row[2:6] == ["0/-", "-", "1", "10/min"]
    run("mails", "--concurrency", "3")
    assert one.queue_limits("mails").group_concurrency == 1
    run("mails", "--group-concurrency", "none")
    limits = one.queue_limits("mails")
    assert (limits.concurrency, limits.group_concurrency) == (3, None)
    assert limits.group_rate == Rate(10, 60_000)
