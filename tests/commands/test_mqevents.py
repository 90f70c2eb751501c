"""``manage.py mqevents``: print, filter and follow a store's event stream; set its length."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from mqadmin import services
from mqadmin.management.commands import mqevents
from store import EnqueueRequest, RedisJobStore


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("mqevents", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def one(settings: Any, redis_url: str, prefix: str) -> Iterator[RedisJobStore]:
    services.reset()
    settings.MQ_STORES = {"main": {"prefix": prefix, "url": redis_url}}
    yield services.get_named_store("main")
    services.reset()


def test_prints_the_newest_events_filtered(one: RedisJobStore) -> None:
    ids = [one.enqueue(EnqueueRequest(name="a", queue=q)).id for q in ("q1", "q2", "q1")]
    one.cancel(ids[0])
    lines = run().splitlines()
    assert len(lines) == 4 and "cancelled" in lines[-1] and ids[0] in lines[-1]
    assert " q1/a #0" in lines[0]
    assert len(run("--last", "2").splitlines()) == 2
    assert [line.split()[2] for line in run("--job", ids[0]).splitlines()] == [
        "enqueued",
        "cancelled",
    ]
    assert len(run("--queue", "q2").splitlines()) == 1
    first = lines[0].split()[1]
    assert len(run("--after", first).splitlines()) == 3


def test_sets_the_length_and_refuses_bad_input(one: RedisJobStore) -> None:
    assert "keeps about 500 events" in run("--max-len", "500")
    assert one.events_max_len() == 500
    with pytest.raises(CommandError, match="from 0"):
        run("--max-len", "-5")
    with pytest.raises(CommandError, match="after must be"):
        run("--after", "yesterday")
    with pytest.raises(CommandError, match="--last"):
        run("--last", "5000")


def test_follow_prints_new_events_as_they_come(one: RedisJobStore, monkeypatch: Any) -> None:
    monkeypatch.setattr(mqevents, "FOLLOW_BLOCK_MS", 200)
    out = io.StringIO()
    done = threading.Event()

    def write(text: str) -> None:
        out.write(text)
        if "completed" in text or "cancelled" in text:
            done.set()
            raise KeyboardInterrupt  # what Ctrl-C does

    class Out(io.StringIO):
        def write(self, text: str) -> int:
            write(text)
            return len(text)

    follower = threading.Thread(
        target=lambda: call_command("mqevents", "--follow", stdout=Out(), stderr=io.StringIO())
    )
    follower.start()
    time.sleep(0.3)
    job_id = one.enqueue(EnqueueRequest(name="a", queue="q")).id
    one.cancel(job_id)
    assert done.wait(5)
    follower.join(5)
    assert not follower.is_alive()
    assert "enqueued" in out.getvalue() and job_id in out.getvalue()
