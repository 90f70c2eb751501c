"""``manage.py seed_demo``: realistic data in every state, through real store operations."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from mqadmin.management.commands.seed_demo import FLOW_PARENT_ID
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, text_of

pytestmark = pytest.mark.django_db


def seed(*args: str) -> str:
    out = io.StringIO()
    call_command("seed_demo", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_seed_demo_fills_every_state_and_the_flow_spans_two_stores(stores: Stores) -> None:
    output = seed("--store", "main", "--jobs", "400", "--hours", "1")

    assert "Seeded store 'main'" in output
    assert "its children in 'side'" in output
    main, side = stores.main, stores.side
    counts = main.counts()
    for state in (
        "waiting",
        "delayed",
        "active",
        "waiting-children",
        "completed",
        "failed",
        "cancelled",
    ):
        assert counts[state] > 0, (state, counts)
    assert sum(counts.values()) >= 400

    failed = main.list(states=["failed"], order_by="finished_at", limit=5).items
    assert failed and all(
        "Traceback (most recent call last)" in j.exit["error"]["traceback"] for j in failed
    )
    retried = [j for j in main.list(states=["completed"], limit=2000).items if j.attempts_made > 1]
    assert retried, "some jobs succeeded after a retry"
    assert any(a.outcome == "retried" for a in main.get_attempts(retried[0].id))
    stalled = [j for j in main.list(queue="maintenance").items if j.stalled_count]
    assert stalled and main.get_attempts(stalled[0].id)[0].outcome == "stalled"
    assert main.list(name="SendDigest").items[0].dedupe_key == "digest-user-42"

    schedules = {s.key: s for s in main.list_schedules()}
    assert schedules["SendDigest/weekday-morning"].tz == "Europe/Berlin"
    assert schedules["CleanupTempFiles/every-15-min"].every_ms == 900_000

    parent = main.get_job(FLOW_PARENT_ID)
    assert parent is not None and parent.state == "waiting-children"
    assert parent.flow is not None and parent.flow.total == 12
    assert parent.flow.completed == 6 and parent.flow.failed == 1
    children = main.list_child_results(FLOW_PARENT_ID).items
    assert {row.store_key for row in children} == {"side"}
    assert side.outbox_depth() >= 2  # finished children whose reports were not relayed
    assert any(j.flow is not None for j in side.list(states=["waiting-children"]).items)  # nested
    # The history is spread over the past hour, with per-minute throughput.
    completed_per_minute = [n for _, n in main.throughput(minutes=60)["completed"]]
    assert sum(1 for n in completed_per_minute if n) > 30
    assert main.paused_queues() == []


def test_seed_demo_twice_only_refreshes_the_schedules(stores: Stores) -> None:
    seed("--store", "main", "--jobs", "50", "--hours", "1")
    before = sum(stores.main.counts().values())

    again = seed("--store", "main", "--jobs", "50", "--hours", "1")

    assert "already holds the demo data" in again
    assert sum(stores.main.counts().values()) == before
    assert len(stores.main.list_schedules()) == 3


def test_seed_demo_with_one_store_explains_how_to_add_a_second(
    settings: Any, redis_url: str, prefix: str
) -> None:
    settings.MQ_STORES = {"only": {"prefix": prefix, "url": redis_url}}

    output = seed("--jobs", "30", "--hours", "1")

    assert "Only one store is configured" in output
    assert "MQ_STORES=" in output


def test_seed_demo_refuses_an_unknown_store(stores: Stores) -> None:
    with pytest.raises(CommandError, match="no store named 'nope'"):
        seed("--store", "nope")


def test_the_seeded_dashboard_renders(stores: Stores, admin_client_: Client) -> None:
    seed("--store", "main", "--jobs", "200", "--hours", "1")

    for url in (
        "/",
        "/jobs/?store=main",
        f"/stores/main/flows/{FLOW_PARENT_ID}",
        "/outbox/",
        "/schedules/",
        "/indexes/",
    ):
        response = admin_client_.get(url)
        assert response.status_code == 200, url
    flow = text_of(admin_client_.get(f"/stores/main/flows/{FLOW_PARENT_ID}"))
    assert "Expand flow" in flow
    assert "wait in outboxes" in flow
