"""Operations pages: the outbox backlog, index status and schedules."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from mqadmin import services
from mqadmin.queries import operations
from store import Claimed, Complete, EnqueueRequest, ScheduleRecord
from store.schedules import next_cron
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import Stores, fan_out, text_of

pytestmark = pytest.mark.django_db


def finish_children(stores: Stores, n: int) -> None:
    for k in range(n):
        claimed = stores.side.claim(
            queue="parts", names=["RenderPart"], token=f"w:{k}", lock_duration_ms=60_000
        )
        assert isinstance(claimed, Claimed)
        stores.side.ack(claimed.job.id, f"w:{k}", Complete(None))


# ---------------------------------------------------------------------- outbox


def test_outbox_depth_age_entries_and_routes(stores: Stores, admin_client_: Client) -> None:
    flow_id = fan_out(stores.main, stores.side, ["a", "b", "c"])
    finish_children(stores, 2)

    html = text_of(admin_client_.get("/outbox/"))

    side_row = re.search(r'<a href="/outbox/\?store=side">side</a></th>(.*?)</tr>', html, re.DOTALL)
    assert side_row
    assert '<td class="num">2</td>' in side_row.group(1)
    assert "old" in side_row.group(1)
    assert "none seen in the last minute" in side_row.group(1)
    # The store with a backlog is selected by default; its entries list their targets.
    assert "Entries of side, oldest first" in html
    assert html.count(f'href="/stores/main/flows/{flow_id}"') == 2
    assert "<code>main</code> (2):" in html
    assert "no live worker routes it" in html


def test_entries_are_routable_when_a_live_worker_lists_the_target(
    stores: Stores, admin_client_: Client
) -> None:
    fan_out(stores.main, stores.side, ["a"])
    finish_children(stores, 1)
    stores.side.register_worker(
        "w-1", queues={"parts": ["RenderPart"]}, routes=["main"], started_at=stores.side.now()
    )

    html = text_of(admin_client_.get("/outbox/?store=side"))

    assert "<code>w-1</code>" in html
    assert "a live worker routes it" in html
    assert "no live worker routes it" not in html


def test_outbox_pages_by_entry_number(
    stores: Stores, admin_client_: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(operations, "OUTBOX_PAGE", 2)
    fan_out(stores.main, stores.side, ["a", "b", "c", "d", "e"])
    finish_children(stores, 5)

    first = text_of(admin_client_.get("/outbox/?store=side"))
    nxt = re.search(r'<a rel="next" href="/outbox/\?store=side&amp;after=(\d+)"', first)
    assert nxt
    second = text_of(admin_client_.get(f"/outbox/?store=side&after={nxt.group(1)}"))
    third_link = (
        re.search(r'after=(\d+)"', second.split('rel="next"', 1)[1])
        if 'rel="next"' in second
        else None
    )
    assert third_link
    third = text_of(admin_client_.get(f"/outbox/?store=side&after={third_link.group(1)}"))

    def keys(html: str) -> list[str]:
        return re.findall(r'<td><code class="wrap">([^<]*)</code></td>', html)

    assert keys(first) + keys(second) + keys(third) == ["a", "b", "c", "d", "e"]
    assert 'rel="next"' not in third


def test_empty_outboxes(stores: Stores, admin_client_: Client) -> None:
    html = text_of(admin_client_.get("/outbox/"))

    assert "Every outbox is empty" in html


# ---------------------------------------------------------------------- indexes


def test_index_status_per_store_and_kind(stores: Stores, admin_client_: Client) -> None:
    stores.main.enqueue(EnqueueRequest(name="A", queue="q1"))
    stores.main.enqueue(EnqueueRequest(name="B", queue="q2"))
    stores.main.enqueue(EnqueueRequest(name="B", queue="q2"))

    html = text_of(admin_client_.get("/indexes/"))

    main = html.split("<h2", 2)[1]
    assert main.count('<span class="badge ok">enabled</span>') == 2
    assert re.search(
        r'<td class="num">2 <span class="muted small">of 2 known names</span></td>\s*<td class="num">3</td>',
        main,
    )
    assert re.search(
        r'<td class="num">2 <span class="muted small">of 2 known queues</span></td>\s*<td class="num">3</td>',
        main,
    )
    assert "set <time" in main
    assert "python manage.py reindex --store main --kind name" in main


def test_index_warnings_come_with_the_command_to_run(
    settings: Any, redis_url: str, redis_client: Any, prefix: str, admin_client_: Client
) -> None:
    settings.MQ_STORES = {"on": {"prefix": prefix, "url": redis_url}}
    services.get_named_store("on").enqueue(EnqueueRequest(name="A", queue="q"))
    redis_client.delete("{" + prefix + "}:index:queue:ready")
    settings.MQ_STORES = {"off": {"prefix": prefix, "url": redis_url, "indexes": {"name": False}}}

    html = text_of(admin_client_.get("/indexes/"))

    assert '<span class="badge off">disabled</span>' in html
    assert "Disabled, but 1 index zsets remain" in html
    assert "python manage.py reclaim_indexes --store off --kind name --dry-run" in html
    assert "Enabled but the ready marker is missing" not in html  # this boot re-stamped it


def test_a_missing_marker_is_a_warning(
    settings: Any, redis_url: str, redis_client: Any, prefix: str, admin_client_: Client
) -> None:
    settings.MQ_STORES = {"s": {"prefix": prefix, "url": redis_url}}
    services.get_named_store("s")
    redis_client.delete("{" + prefix + "}:index:name:ready")

    html = text_of(admin_client_.get("/indexes/"))

    assert "Enabled but the ready marker is missing" in html


# ---------------------------------------------------------------------- schedules


def test_schedules_in_words_with_next_runs_and_overdue_flags(stores: Stores, login: Any) -> None:
    main = stores.main
    now = main.now()
    main.upsert_schedule(
        ScheduleRecord(
            key="Digest/weekday-morning",
            job_name="Digest",
            queue="mail",
            cron="0 7 * * 1-5",
            tz="Europe/Berlin",
            group="mail-app",
            next_run_at=next_cron("0 7 * * 1-5", "Europe/Berlin", now) or 0,
        )
    )
    main.upsert_schedule(
        ScheduleRecord(
            key="Cleanup/15", job_name="Cleanup", every_ms=900_000, next_run_at=now - 3_600_000
        )
    )
    client = login("trigger_schedule")

    html = text_of(client.get("/schedules/"))

    cron_row = html.split("Digest/weekday-morning", 1)[1].split("</tr>", 1)[0]
    every_row = html.split("Cleanup/15", 1)[1].split("</tr>", 1)[0]
    assert "at 07:00 on Monday to Friday" in cron_row
    assert "<td>Europe/Berlin</td>" in cron_row
    assert len(re.findall(r"<li><time", cron_row)) == 5
    assert re.search(r"(Mon|Tue|Wed|Thu|Fri) \d{4}-\d\d-\d\d 07:00 CES?T", cron_row)
    assert "overdue" not in cron_row
    assert "<td>mail-app</td>" in cron_row
    assert "every 15 minutes" in every_row
    assert "overdue by 1 h" in every_row
    assert 'class="overdue-row"' in html
    assert 'action="/actions/schedule/trigger/"' in html
    assert 'action="/actions/schedule/remove/"' not in html


def test_next_runs_of_an_overdue_interval_schedule_collapse_missed_slots(stores: Stores) -> None:
    now = stores.main.now()
    slot = now - 25 * 60_000
    stores.main.upsert_schedule(
        ScheduleRecord(key="Every/10", job_name="X", every_ms=600_000, next_run_at=slot)
    )

    row = operations.schedules_overview()[0].rows[0]

    # The owed slot first; the missed ones collapse into it; then the grid after now.
    assert row.next_runs[0] == slot
    assert row.next_runs[1] == slot + 30 * 60_000 > now
    assert [b - a for a, b in zip(row.next_runs[1:], row.next_runs[2:], strict=False)] == [
        600_000
    ] * 3
    assert row.overdue_by >= 25 * 60_000
