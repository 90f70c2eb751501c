"""``enqueue_on_commit``: Django tasks and the store's own ``Job.enqueue`` wait for the commit."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from mqadmin.tasks import InvalidTaskError, TaskResultDoesNotExist
from store import Job
from store.errors import InvalidRequestError, JobStoreError
from tests.tasks import sample_tasks as t
from tests.tasks.conftest import TASK_DEFAULTS, default_task_backend, tasks_setting

pytestmark = pytest.mark.django_db(transaction=True)


class Rollback(Exception):
    pass


def total(store: Any) -> int:
    return sum(store.counts().values())


def test_doesnt_wait_until_transaction_commit_by_default(main_store: Any) -> None:
    with transaction.atomic():
        result = t.noop_task.enqueue()
        assert result.enqueued_at is not None
        assert main_store.get_job(result.id) is not None
    assert total(main_store) == 1


def test_waits_until_transaction_commit(tasks_settings: Any, main_store: Any) -> None:
    tasks_settings.TASKS = tasks_setting(ENQUEUE_ON_COMMIT=True)
    with transaction.atomic():
        result = t.noop_task.enqueue(1, two=2)
        assert result.enqueued_at is None  # not written yet
        assert total(main_store) == 0
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(result.id)
    record = main_store.get_job(result.id)
    assert record is not None and record.payload == {"args": [1], "kwargs": {"two": 2}}
    result.refresh()
    assert result.enqueued_at is not None


def test_the_option_may_sit_at_the_top_of_the_tasks_entry(
    tasks_settings: Any, main_store: Any
) -> None:
    setting = tasks_setting()
    setting["default"]["ENQUEUE_ON_COMMIT"] = True  # where earlier django-tasks releases had it
    tasks_settings.TASKS = setting
    with transaction.atomic():
        result = t.noop_task.enqueue()
        assert total(main_store) == 0
    assert main_store.get_job(result.id) is not None


def test_rolled_back_transaction_enqueues_nothing(tasks_settings: Any, main_store: Any) -> None:
    tasks_settings.TASKS = tasks_setting(ENQUEUE_ON_COMMIT=True)
    with pytest.raises(Rollback), transaction.atomic():
        result = t.noop_task.enqueue()
        raise Rollback
    assert main_store.get_job(result.id) is None
    assert total(main_store) == 0


def test_outside_a_transaction_the_task_is_written_at_once(
    tasks_settings: Any, main_store: Any
) -> None:
    tasks_settings.TASKS = tasks_setting(ENQUEUE_ON_COMMIT=True)
    result = t.noop_task.enqueue()
    assert result.enqueued_at is not None
    assert main_store.get_job(result.id) is not None


def test_a_task_can_ask_for_on_commit_itself(backend: Any, main_store: Any) -> None:
    deferred = backend.task_class(
        func=t.noop_task.func, enqueue_on_commit=True, backend="default", **TASK_DEFAULTS
    )
    with transaction.atomic():
        result = deferred.enqueue()
        assert total(main_store) == 0
    assert main_store.get_job(result.id) is not None
    # ... and opt out of a backend-wide ENQUEUE_ON_COMMIT.
    immediate = backend.task_class(
        func=t.noop_task.func, enqueue_on_commit=False, backend="default", **TASK_DEFAULTS
    )
    with transaction.atomic():
        assert main_store.get_job(immediate.enqueue().id) is not None


def test_bad_arguments_are_refused_at_enqueue_even_when_deferred(
    tasks_settings: Any, main_store: Any
) -> None:
    tasks_settings.TASKS = tasks_setting(ENQUEUE_ON_COMMIT=True)
    with transaction.atomic():
        with pytest.raises(InvalidTaskError):
            t.echo.enqueue(object())
        with pytest.raises(InvalidTaskError):
            t.echo.enqueue(float("inf"))
    assert total(main_store) == 0


def test_store_job_enqueue_on_commit(main_store: Any) -> None:
    job = Job("tasks-test.Invite", store="main", enqueue_on_commit=True)
    with transaction.atomic():
        job_id = job.enqueue({"to": "a@example.com"})
        assert main_store.get_job(job_id) is None
    assert main_store.get_job(job_id).payload == {"to": "a@example.com"}

    with pytest.raises(Rollback), transaction.atomic():
        dropped = job.enqueue({"to": "b@example.com"})
        raise Rollback
    assert main_store.get_job(dropped) is None

    # Per call: on_commit=False writes at once; outside a transaction it is written at once too.
    with transaction.atomic():
        assert main_store.get_job(job.enqueue({}, on_commit=False)) is not None
    assert main_store.get_job(job.enqueue({})) is not None
    plain = Job("tasks-test.Plain", store="main")
    with transaction.atomic():
        late = plain.enqueue({}, on_commit=True, job_id="explicit-1")
        assert late == "explicit-1" and main_store.get_job(late) is None
    assert main_store.get_job("explicit-1") is not None


def test_store_job_on_commit_refuses_bad_input_now(main_store: Any) -> None:
    job = Job("tasks-test.Bad", store="main")
    with transaction.atomic():
        # The same refusal as an immediate enqueue gives, at the call, not at the commit.
        with pytest.raises(JobStoreError, match="not JSON-serialisable"):
            job.enqueue({"x": object()})
        with pytest.raises(JobStoreError, match="not JSON-serialisable"):
            job.enqueue({"x": object()}, on_commit=True)
        with pytest.raises(InvalidRequestError, match="dedupe"):
            job.enqueue({}, on_commit=True, dedupe="k")
    assert total(main_store) == 0
