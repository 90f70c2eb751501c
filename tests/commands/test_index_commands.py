"""``manage.py reclaim_indexes`` and ``manage.py reindex`` against a test prefix.

The commands read their store from ``settings.MQ_STORES``; every test points a
store name at its own unique prefix, so the real ``mq`` prefix is never touched.
"""

from __future__ import annotations

import io
import os
import re
import signal
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from store import FakeClock, RedisJobStore
from store.indexes import index_pattern
from tests.store.helpers import chunked_members, chunked_remove, req

ROWS = 1250


class TtyIO(io.StringIO):
    def isatty(self) -> bool:
        return True


def run(*args: str, stdout: io.StringIO | None = None) -> tuple[str, str]:
    out = stdout if stdout is not None else io.StringIO()
    err = io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def configure(settings: Any, redis_url: str, prefix: str) -> Callable[..., None]:
    """Point store name "idx" at this test's prefix with the given indexes setting."""

    def apply(indexes: Any = True) -> None:
        settings.MQ_REDIS_URL = redis_url
        settings.MQ_STORES = {
            "default": {"prefix": f"{prefix}-unused-default"},
            "idx": {"prefix": prefix, "indexes": indexes},
        }

    return apply


@pytest.fixture
def seeded(make_store: Callable[..., RedisJobStore], redis_client: Any) -> RedisJobStore:
    """ROWS jobs with distinct names (ROWS name zsets) over three queues, indexes on."""
    store = make_store()
    store.enqueue_many(
        [req(name=f"N{i}", queue=f"q{i % 3}", payload={"i": i}) for i in range(ROWS)]
    )
    return store


def name_keys(redis_client: Any, store: RedisJobStore) -> set[str]:
    """Every key of the name index: a directory and one chunk per name (store/chunks.py)."""
    return set(redis_client.scan_iter(match=index_pattern(store, "name"), count=1000))


# ---------------------------------------------------------------------- reclaim_indexes


def test_reclaim_dry_run_reports_and_deletes_nothing(configure, seeded, redis_client):
    configure(indexes={"name": False})
    before = name_keys(redis_client, seeded)
    out, _ = run("reclaim_indexes", "--kind", "name", "--store", "idx", "--dry-run")
    summary = rf"would delete {2 * ROWS} keys \({ROWS} index sets\), {ROWS} members, ~\d+\.\d\d MB"
    assert re.search(summary, out), out
    assert "freed" not in out.splitlines()[-1]
    assert name_keys(redis_client, seeded) == before
    assert len(before) == 2 * ROWS


def test_reclaim_deletes_the_kind_and_prints_a_summary(configure, seeded, redis_client):
    configure(indexes={"name": False})
    # The name marker exists (seeded store); the command's own boot drops it anyway.
    out, _ = run("reclaim_indexes", "--kind", "name", "--store", "idx")
    summary = rf"deleted {2 * ROWS} keys \({ROWS} index sets\), {ROWS} members, ~\d+\.\d\d MB freed"
    assert re.search(summary, out), out
    assert name_keys(redis_client, seeded) == set()
    assert redis_client.get(seeded.keys.index_ready("name")) is None
    # The queue index and the rows are untouched.
    assert len(chunked_members(redis_client, seeded.keys.byqueue("q0"))) == len(range(0, ROWS, 3))
    assert seeded.get_job(seeded.list(limit=1).items[0].id) is not None


def test_reclaim_refuses_while_the_index_is_enabled_in_settings(configure, seeded, redis_client):
    configure(indexes={"queue": False})  # name stays enabled
    before = name_keys(redis_client, seeded)
    with pytest.raises(CommandError) as refused:
        run("reclaim_indexes", "--kind", "name", "--store", "idx")
    message = str(refused.value)
    assert "refusing" in message and "enabled" in message
    assert "--force" in message and "'indexes'" in message
    assert name_keys(redis_client, seeded) == before
    with pytest.raises(CommandError):
        run("reclaim_indexes", "--kind", "name", "--store", "idx", "--dry-run")


def test_reclaim_with_force_deletes_an_enabled_index(configure, seeded, redis_client):
    configure(indexes=True)
    out, _ = run("reclaim_indexes", "--kind", "queue", "--store", "idx", "--force")
    # Three queues of ~417 members: a directory and its chunks (128 members at most) each.
    assert re.search(rf"deleted \d+ keys \(3 index sets\), {ROWS} members", out), out
    assert not redis_client.exists(*(seeded.keys.byqueue(f"q{i}") for i in range(3)))
    assert not redis_client.keys(seeded.keys.byqueue("") + "*")
    assert len(name_keys(redis_client, seeded)) == 2 * ROWS


def test_reclaim_progress_rewrites_one_line_on_a_terminal(configure, seeded):
    configure(indexes={"name": False})
    tty = TtyIO()
    out, _ = run("reclaim_indexes", "--kind", "name", "--store", "idx", stdout=tty)
    lines = out.split("\n")  # not splitlines(): it would split at the "\r" too
    # Progress overwrites one line in place, then the summary starts on a fresh line.
    assert lines[0].startswith("\r\x1b[2K") and lines[0].endswith("so far")
    assert lines[1].startswith(f"deleted {2 * ROWS} keys ({ROWS} index sets), {ROWS} members")
    assert all(not line.startswith("\r") for line in lines[1:])


def test_reclaim_stops_cleanly_on_sigint(configure, seeded, redis_client, monkeypatch):
    configure(indexes={"name": False})
    from mqadmin.management.commands import reclaim_indexes

    sent: list[int] = []
    original = reclaim_indexes.ProgressLine.report

    def report_and_interrupt(self: Any, text: str, *, force: bool = False) -> None:
        original(self, text, force=True)
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)  # as if the operator pressed Ctrl-C

    monkeypatch.setattr(reclaim_indexes.ProgressLine, "report", report_and_interrupt)
    previous = signal.getsignal(signal.SIGINT)
    out = io.StringIO()
    err = io.StringIO()
    with pytest.raises(CommandError) as stopped:
        call_command("reclaim_indexes", "--kind", "name", "--store", "idx", stdout=out, stderr=err)
    assert stopped.value.returncode == 130
    assert "run the command again" in str(stopped.value)
    assert "SIGINT: stopping after the current batch" in err.getvalue()
    assert re.search(r"deleted 500 keys \(\d+ index sets\), \d+ members", out.getvalue())
    assert len(name_keys(redis_client, seeded)) == 2 * ROWS - 500
    assert signal.getsignal(signal.SIGINT) is previous  # handlers restored

    # Running it again finishes the job.
    rest, _ = run("reclaim_indexes", "--kind", "name", "--store", "idx")
    assert f"deleted {2 * ROWS - 500} keys" in rest
    assert name_keys(redis_client, seeded) == set()


def test_reclaim_unknown_store_and_bad_kind(configure):
    configure()
    with pytest.raises(CommandError) as unknown:
        run("reclaim_indexes", "--kind", "name", "--store", "nope")
    assert "'nope'" in str(unknown.value) and "idx" in str(unknown.value)
    with pytest.raises(CommandError):
        run("reclaim_indexes", "--kind", "state", "--store", "idx")


# ---------------------------------------------------------------------- reindex


def test_reindex_rebuilds_and_prints_rows_per_second(configure, seeded, redis_client, prefix):
    configure(indexes=True)
    # An old hole (marker moved past the rows' tail window first): boot would not heal it.
    RedisJobStore(redis_client, prefix=prefix, clock=FakeClock(10_000_000)).close()
    victim = seeded.list(name="N600").items[0].id
    chunked_remove(redis_client, seeded.keys.byname("N600"), victim)
    out, _ = run("reindex", "--kind", "name", "--store", "idx")
    assert re.search(
        rf"reindexed {ROWS} rows of the name index of store 'idx' \(prefix '{prefix}'\) "
        r"in \d+\.\d\d s \([\d,]+ rows/s\); ready marker \d+",
        out,
    ), out
    assert [job.id for job in seeded.list(name="N600").items] == [victim]
    marker = int(redis_client.get(seeded.keys.index_ready("name")))
    assert marker > 10_000_000  # stamped with the command's (wall) clock


def test_reindex_refuses_a_disabled_index(configure, seeded, redis_client):
    configure(indexes={"queue": False})
    with pytest.raises(CommandError) as refused:
        run("reindex", "--kind", "queue", "--store", "idx")
    assert "disabled" in str(refused.value)
    assert redis_client.get(seeded.keys.index_ready("queue")) is not None


def test_reindex_progress_on_a_terminal(configure, seeded):
    configure(indexes=True)
    out, _ = run("reindex", "--kind", "queue", "--store", "idx", stdout=TtyIO())
    assert "\r\x1b[2K" in out and "rows/s)" in out
    assert f"reindexed {ROWS} rows" in out
