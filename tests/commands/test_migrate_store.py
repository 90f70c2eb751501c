"""``manage.py migrate_store`` on a layout-1 store (tests/store/test_layout.py builds one)."""

from __future__ import annotations

import io
import os
import signal
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from store import RedisJobStore
from store.layout import LAYOUT, UnknownLayoutError, layout_key
from tests.store.helpers import req
from tests.store.test_layout import PAYLOAD_72, compact, to_layout_1

ROWS = 1200


@pytest.fixture
def layout_1(
    settings: Any, redis_url: str, prefix: str, make_store, redis_client
) -> tuple[RedisJobStore, dict[str, Any]]:
    """A layout-1 store of ROWS jobs (store name "old") and its records before conversion."""
    settings.MQ_REDIS_URL = redis_url
    settings.MQ_STORES = {
        "default": {"prefix": f"{prefix}-unused-default"},
        "old": {"prefix": prefix},
    }
    store = make_store()
    for start in range(0, ROWS, 500):
        store.enqueue_many(
            [req(payload={**PAYLOAD_72, "i": i}) for i in range(start, min(ROWS, start + 500))]
        )
    before = records(store)
    assert to_layout_1(redis_client, store) == ROWS
    return store, before


def records(store: RedisJobStore) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cursor = None
    while True:
        page = store.list(limit=500, cursor=cursor)
        out.update((job.id, job) for job in page.items)
        if not page.cursor:
            return out
        cursor = page.cursor


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("migrate_store", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_migrate_store_converts_every_hash_with_a_progress_bar(layout_1, make_store, redis_client):
    old, before = layout_1
    assert len(before) == ROWS
    sample = old.keys.job(next(iter(before)))
    assert redis_client.object("encoding", sample) == "hashtable"
    assert redis_client.get(layout_key(old.keys)) is None
    out, _ = run("--store", "old")
    assert "[##############################] 100%" in out
    assert f"{ROWS:,}/{ROWS:,} jobs" in out
    assert f"scanned {ROWS:,} jobs, rewrote {ROWS:,} hashes" in out
    # Then the sets (all, the name and queue indexes) become chunked sets.
    assert f"{3 * ROWS:,}/{3 * ROWS:,} members into chunks" in out
    assert f"moved {3 * ROWS:,} members of 3 sets into chunks" in out
    assert f"layout 1 -> {LAYOUT}" in out
    assert redis_client.get(layout_key(old.keys)) == str(LAYOUT)
    assert all(compact(redis_client, old.keys.job(job_id)) for job_id in before)
    assert records(make_store()) == before
    # Again: nothing left to do.
    out, _ = run("--store", "old")
    assert "rewrote 0 hashes, moved 0 members" in out


def test_migrate_store_refuses_a_bad_batch(layout_1):  # noqa: ARG001 (settings)
    with pytest.raises(CommandError, match="--batch must be between 1 and 500"):
        run("--store", "old", "--batch", "501")
    with pytest.raises(CommandError, match="--batch must be between 1 and 500"):
        run("--store", "old", "--batch", "0")


def test_a_layout_1_store_refuses_to_start_and_names_this_command(layout_1, make_store):
    with pytest.raises(UnknownLayoutError, match="layout 1.*migrate_store"):
        make_store()


def test_migrate_store_names_itself_for_an_unknown_layout(layout_1, redis_client):
    redis_client.set(layout_key(layout_1[0].keys), "5")
    with pytest.raises(CommandError, match="layout 5.*migrate_store"):
        run("--store", "old")


def test_migrate_store_stops_cleanly_on_sigint(layout_1, make_store, redis_client, monkeypatch):
    from mqadmin.management.commands import migrate_store

    old, before = layout_1
    sent: list[int] = []
    original = migrate_store.ProgressLine.report

    def report_and_interrupt(self: Any, text: str, *, force: bool = False) -> None:
        original(self, text, force=True)
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)  # as if the operator pressed Ctrl-C

    monkeypatch.setattr(migrate_store.ProgressLine, "report", report_and_interrupt)
    previous = signal.getsignal(signal.SIGINT)
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as stopped:
        call_command("migrate_store", "--store", "old", "--batch", "100", stdout=out, stderr=err)
    assert stopped.value.returncode == 130
    assert "run the command again" in str(stopped.value)
    assert "SIGINT: stopping after the current batch" in err.getvalue()
    assert signal.getsignal(signal.SIGINT) is previous
    assert redis_client.get(layout_key(old.keys)) is None
    converted = sum(compact(redis_client, old.keys.job(job_id)) for job_id in before)
    assert 0 < converted < ROWS
    out_text, _ = run("--store", "old")
    assert f"rewrote {ROWS - converted:,} hashes" in out_text
    assert redis_client.get(layout_key(old.keys)) == str(LAYOUT)
    assert records(make_store()) == before
