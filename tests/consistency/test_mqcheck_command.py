"""``manage.py mqcheck``: summary per kind, exit status, repair, the saved report."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from store import RedisJobStore
from store.consistency import last_check
from tests.store.helpers import claim_job, req

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("mqcheck", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def configured(settings: Any, redis_url: str, prefix: str) -> None:
    settings.MQ_REDIS_URL = redis_url
    settings.MQ_STORES = {
        "default": {"prefix": f"{prefix}-unused-default"},
        "chk": {"prefix": prefix},
    }


@pytest.fixture
def damaged(make_store: Callable[..., RedisJobStore]) -> RedisJobStore:
    store = make_store()
    ids = [store.enqueue(req(payload={"i": i})).id for i in range(12)]
    claim_job(store)
    store.client.delete(store.keys.job(ids[0]))  # the active one
    store.client.delete(store.keys.job(ids[5]))  # a waiting one
    return store


def test_consistent_store_exits_zero(configured, make_store):
    store = make_store()
    store.enqueue(req())
    out, _ = run("--store", "chk")
    assert "consistent: no problems found" in out
    assert "1 jobs" in out


def test_problems_exit_one_with_a_summary_per_kind(configured, damaged):
    with pytest.raises(CommandError) as info:
        run("--store", "chk")
    assert info.value.returncode == 1
    assert "run with --repair" in str(info.value)
    saved = last_check(damaged)
    assert saved is not None and saved["consistent"] is False


def test_summary_lines(configured, damaged):
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("mqcheck", "--store", "chk", stdout=out, stderr=io.StringIO())
    text = out.getvalue()
    assert "dangling_member:" in text and "set members whose job hash is gone" in text
    assert "counter:" in text and "default|active" in text


def test_repair_then_check_exits_zero(configured, damaged):
    out, _ = run("--store", "chk", "--repair")
    assert "repaired" in out and "problems found and repaired" in out
    assert "removed the member" in out
    out, _ = run("--store", "chk")
    assert "consistent: no problems found" in out
    assert damaged.counts()["waiting"] == 10 and damaged.counts()["active"] == 0


def test_unknown_store_exits_two(configured):
    with pytest.raises(CommandError) as info:
        run("--store", "nope")
    assert info.value.returncode == 2


def test_unreachable_redis_exits_two(settings, prefix):
    settings.MQ_STORES = {"dead": {"prefix": prefix, "url": "redis://127.0.0.1:1/0"}}
    with pytest.raises(CommandError) as info:
        run("--store", "dead")
    assert info.value.returncode == 2


def test_exit_status_of_the_real_process(redis_url, damaged, tmp_path):
    """manage.py itself exits 1 then (after --repair) 0, with a progress line."""
    env = {
        "PATH": "/usr/bin:/bin",
        "MQ_REDIS_URL": redis_url,
        "MQ_PREFIX": damaged.prefix,
        "DJANGO_SETTINGS_MODULE": "mqadmin.settings",
        "DJANGO_SECRET_KEY": "test-only",
    }

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "mqcheck", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=120,
        )

    first = manage()
    assert first.returncode == 1, first.stdout + first.stderr
    assert "jobs" in first.stdout
    assert manage("--repair").returncode == 0
    assert manage().returncode == 0


def test_sigint_stops_after_the_current_page(configured, make_store, monkeypatch):
    import os
    import signal

    from mqadmin.management.commands import reclaim_indexes

    store = make_store()
    store.enqueue_many([req(payload={"i": i}) for i in range(1200)])
    sent: list[int] = []
    original = reclaim_indexes.ProgressLine.report

    def report_and_interrupt(self: Any, text: str, *, force: bool = False) -> None:
        original(self, text, force=True)
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)  # as if the operator pressed Ctrl-C

    monkeypatch.setattr(reclaim_indexes.ProgressLine, "report", report_and_interrupt)
    previous = signal.getsignal(signal.SIGINT)
    err = io.StringIO()
    with pytest.raises(CommandError) as stopped:
        call_command("mqcheck", "--store", "chk", stdout=io.StringIO(), stderr=err)
    assert stopped.value.returncode == 130
    assert "the check is incomplete" in str(stopped.value)
    assert "SIGINT: stopping after the current batch" in err.getvalue()
    assert signal.getsignal(signal.SIGINT) is previous
    saved = last_check(store)
    assert saved is not None and saved["interrupted"] is True and saved["jobs"] < 1200


def test_full_redis_exits_two_with_one_line(tmp_path, prefix):
    """A Redis out of memory (noeviction) is an error: exit 2 and one line, no traceback.

    A private redis-server (never the shared one) is filled, then capped at what it uses.
    """
    import redis

    from store.embedded import EmbeddedRedis

    server = EmbeddedRedis(tmp_path / "full-redis", appendonly=False)
    url = server.ensure_running()
    try:
        client = redis.Redis.from_url(url, decode_responses=True)
        store = RedisJobStore(client, prefix=prefix)
        store.enqueue_many([req(payload={"i": i, "pad": "x" * 200}) for i in range(2000)])
        store.close()
        env = {
            "PATH": "/usr/bin:/bin",
            "MQ_REDIS_URL": url,
            "MQ_PREFIX": prefix,
            "DJANGO_SETTINGS_MODULE": "mqadmin.settings",
            "DJANGO_SECRET_KEY": "test-only",
        }

        def mqcheck() -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, str(ROOT / "manage.py"), "mqcheck", "--repair"],
                capture_output=True,
                text=True,
                env=env,
                cwd=ROOT,
                timeout=120,
            )

        # A first run while there is room: the store's setup writes are done.
        assert mqcheck().returncode == 0
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", int(client.info("memory")["used_memory"]))
        pad = 0
        with contextlib.suppress(redis.exceptions.OutOfMemoryError):
            while pad < 10_000:  # fill the last bytes so that any write is refused
                client.set(f"{prefix}:pad:{pad}", "y" * 4096)
                pad += 1
        done = mqcheck()
        assert done.returncode == 2, done.stdout + done.stderr
        assert "Traceback" not in done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("CommandError")]
        assert len(errors) == 1 and "OOM" in errors[0], done.stderr
    finally:
        server.stop()


def test_a_raw_redis_error_during_the_check_exits_two(configured, make_store, monkeypatch):
    """An error that is not a StoreFailure (here Redis's OOM reply) still exits 2, one line."""
    import redis

    import store.consistency

    make_store().enqueue(req())

    def full(*args: Any, **kwargs: Any) -> Any:
        raise redis.exceptions.OutOfMemoryError(
            "command not allowed when used memory > 'maxmemory'."
        )

    monkeypatch.setattr(store.consistency, "check_store", full)
    with pytest.raises(CommandError) as info:
        run()
    assert info.value.returncode == 2
    assert "OutOfMemoryError" in str(info.value) and "\n" not in str(info.value)
