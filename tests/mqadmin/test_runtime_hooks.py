"""The worker treats Django's database connections the way Django expects around each job."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.contrib.auth.models import User

from mqadmin import runtime
from store import Job, RedisJobStore, StoreRegistry, Worker
from store.clock import system_clock


@pytest.mark.django_db(transaction=True)
def test_stale_connections_are_closed_before_and_after_each_sync_job(
    make_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(
        runtime, "close_old_connections", lambda: calls.append(threading.current_thread().name)
    )
    store: RedisJobStore = make_store(clock=system_clock)
    registry = StoreRegistry()
    registry.register(store)
    User.objects.create_user("alice")
    job = Job("CountUsers", registry=registry, handler=lambda payload: User.objects.count())
    worker = Worker(store, [job], registry=registry, job_hooks=runtime.django_job_hooks())
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        assert job.execute({}, timeout_s=20) == 1  # the ORM works from the worker's job thread
        assert job.execute({}, timeout_s=20) == 1
    finally:
        worker.request_stop()
        thread.join(20)
    assert len(calls) == 4  # before and after each of the two jobs
    assert all(name.startswith("mq-job") for name in calls)  # in the job's own thread
