"""Django's own Tasks behaviour cases (Django 6.1's tests/tasks/), on StoreBackend.

Django tests its framework against its dummy and immediate backends; the cases that say
what *any* backend must do are restated here against ``mqadmin.tasks.StoreBackend``, on a
real Redis with a real worker (``runworker --burst`` in this process): result statuses and
fields, ``TaskResultDoesNotExist`` and ``TaskResultMismatch``, priority and queue name
validation, ``run_after``, ``takes_context``, the ``task_enqueued`` / ``task_started`` /
``task_finished`` signals, and the async variants.  Written from reading Django's tests,
not copied.  They run on Django 6.0 and 6.1 (``django.tasks``) and on 5.2 with the
django-tasks backport wherever its API is the same; a case that depends on one release
skips with the reason.  The store options of ``@task(attempts=..., ...)`` (Django 6.1 and
the backport pass them on to ``StoreTask``) are checked at the end.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import django
import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.utils import timezone

from mqadmin.tasks import (
    InvalidTaskBackendError,
    InvalidTaskError,
    StoreBackend,
    StoreTask,
    TaskResultDoesNotExist,
)
from store.records import BackoffPolicy
from tests.tasks import conformance_tasks as c
from tests.tasks import sample_tasks as t
from tests.tasks.conftest import tasks_setting

try:
    from django.tasks import TaskResultStatus, default_task_backend, task, task_backends
    from django.tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY
    from django.tasks.exceptions import TaskResultMismatch
    from django.tasks.signals import task_enqueued, task_finished, task_started

    FRAMEWORK = "django.tasks"
except ImportError:
    from django_tasks import TaskResultStatus, default_task_backend, task, task_backends
    from django_tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY
    from django_tasks.exceptions import TaskResultMismatch
    from django_tasks.signals import task_enqueued, task_finished, task_started

    FRAMEWORK = "django_tasks"

pytestmark = pytest.mark.django_db

DJANGO_61 = django.VERSION >= (6, 1)
needs_task_options = pytest.mark.skipif(
    not c.TASK_OPTIONS,
    reason="Django 6.0's @task passes no extra keyword arguments to the task class "
    "(the store options come from OPTIONS there)",
)


@pytest.fixture(autouse=True)
def conformance_tasks(tasks_settings: Any) -> None:
    """The tasks, decorated now that TASKS names StoreBackend (its task class)."""
    c.define()


# ---------------------------------------------------------------------- the backend


def test_the_framework_in_use_matches_the_django_release() -> None:
    assert ("django.tasks" if django.VERSION >= (6, 0) else "django_tasks") == FRAMEWORK
    assert default_task_backend.alias == "default"
    assert isinstance(task_backends["default"], StoreBackend)
    assert task_backends["default"].task_class is StoreTask


def test_decorated_functions_are_the_backends_task_class() -> None:
    for defined in (c.add, c.async_add, c.context_attempt):
        assert isinstance(defined, StoreTask)
        assert defined.backend == "default"
        assert defined.get_backend() is task_backends["default"]


def test_using_an_unknown_backend_is_refused() -> None:
    with pytest.raises(InvalidTaskBackendError, match="The connection 'unknown' doesn't exist."):
        c.add.using(backend="unknown")


# ---------------------------------------------------------------------- statuses


def test_an_enqueued_task_is_ready_until_a_worker_runs_it(run_worker: Any) -> None:
    result = c.add.enqueue(2, b=3)
    assert result.status == TaskResultStatus.READY
    assert not result.is_finished and result.attempts == 0
    assert (result.args, result.kwargs) == ([2], {"b": 3})
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018

    run_worker()
    result.refresh()

    assert result.status == TaskResultStatus.SUCCESSFUL and result.is_finished
    assert result.return_value == 5
    assert result.attempts == 1 and len(result.worker_ids) == 1
    assert result.errors == []
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at is not None
    assert result.task == c.add


def test_a_failing_task_is_failed_with_its_error(run_worker: Any) -> None:
    result = c.raise_value_error.enqueue()
    run_worker()
    result.refresh()

    assert result.status == TaskResultStatus.FAILED and result.is_finished
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    (error,) = result.errors
    assert error.exception_class is ValueError
    assert error.traceback.endswith("ValueError: conformance: this task failed\n")
    assert result.finished_at >= result.started_at >= result.enqueued_at


def test_system_exit_fails_the_task_not_the_worker(run_worker: Any) -> None:
    failing = t.failing_task_system_exit.enqueue()
    after = c.add.enqueue(1, 1)
    run_worker()

    assert failing.task.get_backend().get_result(failing.id).status == TaskResultStatus.FAILED
    assert c.add.get_result(after.id).return_value == 2


def test_refresh_keeps_what_is_unchanged(run_worker: Any) -> None:
    result = c.add.enqueue(1, 2)
    before = dataclasses.asdict(result)
    result.refresh()
    after = dataclasses.asdict(result)
    # enqueued_at: see test_get_result_equals_the_enqueued_result.
    assert abs(after.pop("enqueued_at") - before.pop("enqueued_at")) < timedelta(seconds=1)
    assert after == before


# ---------------------------------------------------------------------- get_result


@pytest.mark.parametrize("result_id", ["123", "j-999999", ""])
def test_an_unknown_id_does_not_exist(result_id: str) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        c.add.get_result(result_id)
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result_id)


def test_the_result_of_another_task_is_a_mismatch() -> None:
    other = c.async_add.enqueue(1, 2)
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        c.add.get_result(other.id)
    # The backend itself answers for any task.
    assert default_task_backend.get_result(other.id).task == c.async_add


def test_get_result_equals_the_enqueued_result() -> None:
    result = c.add.enqueue(4, 5)
    got = c.add.get_result(result.id)
    # enqueued_at: the enqueuing process reads the store's clock just before the write,
    # the stored job has the script's own time (the same clock, up to a few ms later).
    assert abs(got.enqueued_at - result.enqueued_at) < timedelta(seconds=1)
    assert got == dataclasses.replace(result, enqueued_at=got.enqueued_at)


# ---------------------------------------------------------------------- async variants


def test_async_variants(run_worker: Any) -> None:
    async def enqueue_both() -> tuple[Any, Any]:
        return await c.async_add.aenqueue(20, 22), await c.add.aenqueue(1, 1)

    first, second = async_to_sync(enqueue_both)()
    assert first.status == second.status == TaskResultStatus.READY

    run_worker()

    async def read() -> tuple[Any, Any]:
        got = await c.async_add.aget_result(first.id)
        await second.arefresh()
        return got, second

    got, refreshed = async_to_sync(read)()
    assert got.status == TaskResultStatus.SUCCESSFUL and got.return_value == 42
    assert refreshed.return_value == 2


def test_async_get_result_of_an_unknown_id_or_another_task() -> None:
    other = c.add.enqueue(1, 2)

    async def attempt() -> None:
        with pytest.raises(TaskResultDoesNotExist):
            await c.add.aget_result("123")
        with pytest.raises(TaskResultMismatch, match="Task does not match"):
            await c.async_add.aget_result(other.id)

    async_to_sync(attempt)()


def test_an_async_task_that_fails(run_worker: Any) -> None:
    result = c.async_raise_value_error.enqueue()
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is ValueError


def test_calling_a_task_runs_it_here() -> None:
    assert c.add.call(1, 2) == 3
    assert c.async_add.call(1, 2) == 3
    assert async_to_sync(c.add.acall)(2, 2) == 4


# ---------------------------------------------------------------------- priority


@pytest.mark.parametrize("priority", [TASK_MIN_PRIORITY - 1, TASK_MAX_PRIORITY + 1, 3.1])
def test_a_priority_out_of_range_is_refused(priority: Any) -> None:
    with pytest.raises(
        InvalidTaskError,
        match=f"priority must be a whole number between {TASK_MIN_PRIORITY} and {TASK_MAX_PRIORITY}",
    ):
        c.add.using(priority=priority)


@pytest.mark.parametrize("priority", [TASK_MIN_PRIORITY, 0, TASK_MAX_PRIORITY])
def test_priorities_in_range_reach_the_store(priority: int, main_store: Any) -> None:
    result = c.add.using(priority=priority).enqueue(1, 1)
    assert result.task.priority == priority
    assert main_store.get_job(result.id).priority == priority
    assert c.add.priority == 0  # using() made a new task


# ---------------------------------------------------------------------- queue names


def test_an_unknown_queue_is_refused_when_defined_and_when_enqueued(tasks_settings: Any) -> None:
    with pytest.raises(InvalidTaskError, match="Queue 'queue-2' is not valid for backend."):
        c.add.using(queue_name="queue-2")
    assert c.add.using(queue_name="queue-1").queue_name == "queue-1"

    elsewhere = c.add.using(queue_name="queue-1")
    tasks_settings.TASKS = tasks_setting(QUEUES=["default"])
    with pytest.raises(InvalidTaskError, match="Queue 'queue-1' is not valid for backend."):
        elsewhere.enqueue(1, 1)


def test_empty_queues_allow_any_queue(tasks_settings: Any, main_store: Any) -> None:
    tasks_settings.TASKS = tasks_setting(QUEUES=[])
    result = c.add.using(queue_name="anything-goes").enqueue(1, 1)
    assert main_store.get_job(result.id).queue == "anything-goes"


# ---------------------------------------------------------------------- run_after


def test_using_run_after_makes_a_new_task_and_chains() -> None:
    now = timezone.now()
    later = c.add.using(run_after=now)
    assert later.run_after == now and c.add.run_after is None
    both = later.using(priority=10)
    assert (both.run_after, both.priority) == (now, 10)
    assert later.priority == 0
    again = c.add.using()
    assert again == c.add and again is not c.add


def test_a_naive_run_after_is_refused() -> None:
    with pytest.raises(InvalidTaskError, match="run_after must be an aware datetime."):
        c.add.using(run_after=datetime.now())  # noqa: DTZ005


def test_run_after_delays_the_task_in_the_store(main_store: Any, run_worker: Any) -> None:
    result = c.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 1)
    assert result.status == TaskResultStatus.READY
    assert main_store.get_job(result.id).state == "delayed"
    run_worker()
    assert c.add.get_result(result.id).status == TaskResultStatus.READY  # not due: not run


def test_run_after_cannot_be_set_by_the_decorator() -> None:
    # Django 6.1 says why; the backport (which passes run_after itself) refuses the duplicate.
    with pytest.raises(TypeError):
        task(run_after=timezone.now())(c.add.func)


# ---------------------------------------------------------------------- takes_context


def test_takes_context_gets_the_running_result(run_worker: Any) -> None:
    first = c.context_attempt.enqueue()
    second = c.async_context_attempt.enqueue()
    run_worker()
    assert c.context_attempt.get_result(first.id).return_value == {"id": first.id, "attempt": 1}
    got = c.async_context_attempt.get_result(second.id).return_value
    assert got == {"id": second.id, "attempt": 1}


def test_takes_context_without_a_context_argument_is_refused() -> None:
    with pytest.raises(
        InvalidTaskError,
        match="Task takes context but does not have a first argument of 'context'.",
    ):
        task(takes_context=True)(c.add.func)


def test_a_function_not_at_module_level_is_refused() -> None:
    def local() -> None:
        return None

    for function in (local, any):
        with pytest.raises(
            InvalidTaskError, match="Task function must be defined at a module level."
        ):
            task()(function)


# ---------------------------------------------------------------------- arguments


def test_arguments_json_cannot_hold_are_a_type_error() -> None:
    with pytest.raises(TypeError, match="Unsupported type"):
        c.add.enqueue(datetime.now(), 1)  # noqa: DTZ005

    async def later() -> None:
        with pytest.raises(TypeError, match="Unsupported type"):
            await c.add.aenqueue(datetime.now(), 1)  # noqa: DTZ005

    async_to_sync(later)()


# ---------------------------------------------------------------------- signals


@pytest.fixture
def signals() -> Iterator[list[tuple[str, Any, Any]]]:
    """Every task signal sent: (signal name, sender, the task result's status)."""
    seen: list[tuple[str, Any, Any]] = []
    receivers = {}
    for name, signal in (
        ("enqueued", task_enqueued),
        ("started", task_started),
        ("finished", task_finished),
    ):

        def receiver(sender: Any, task_result: Any, _name: str = name, **kwargs: Any) -> None:
            seen.append((_name, sender, task_result))

        receivers[name] = receiver
        signal.connect(receiver, weak=False)
    yield seen
    task_enqueued.disconnect(receivers["enqueued"])
    task_started.disconnect(receivers["started"])
    task_finished.disconnect(receivers["finished"])


def test_signals_enqueued_started_finished(
    signals: list[tuple[str, Any, Any]], run_worker: Any
) -> None:
    result = c.add.enqueue(3, 4)
    assert [(name, sender) for name, sender, _ in signals] == [("enqueued", StoreBackend)]
    assert signals[0][2].id == result.id and signals[0][2].status == TaskResultStatus.READY

    run_worker()

    assert [name for name, _, _ in signals] == ["enqueued", "started", "finished"]
    _, sender, started = signals[1]
    assert sender is StoreBackend and started.id == result.id
    assert started.status == TaskResultStatus.RUNNING
    _, _, finished = signals[2]
    assert finished.status == TaskResultStatus.SUCCESSFUL and finished.return_value == 7


def test_the_finished_signal_of_a_failure(
    signals: list[tuple[str, Any, Any]], run_worker: Any
) -> None:
    c.raise_value_error.enqueue()
    run_worker()
    finished = [r for name, _, r in signals if name == "finished"]
    assert [r.status for r in finished] == [TaskResultStatus.FAILED]
    assert finished[0].errors[0].exception_class_path == "builtins.ValueError"


def test_an_async_enqueue_sends_the_enqueued_signal(signals: list[tuple[str, Any, Any]]) -> None:
    result = async_to_sync(c.async_add.aenqueue)(1, 2)
    assert [(name, r.id) for name, _, r in signals] == [("enqueued", result.id)]


# ---------------------------------------------------------------------- pickling (6.1)


@pytest.mark.skipif(not DJANGO_61, reason="tasks pickle by module path from Django 6.1 on")
def test_a_task_and_its_result_pickle() -> None:
    assert pickle.loads(pickle.dumps(c.add)) == c.add
    result = c.add.enqueue(1, 2)
    assert pickle.loads(pickle.dumps(result)) == result


# ---------------------------------------------------------------------- @task store options


@needs_task_options
def test_task_store_options_reach_the_job(main_store: Any, run_worker: Any) -> None:
    assert c.fails_once.attempts == 2
    assert c.fails_once.backoff == BackoffPolicy("fixed", 0)
    assert c.fails_once.timeout_ms == 20_000
    result = c.fails_once.enqueue()
    stored = main_store.get_job(result.id)
    assert (stored.attempts_max, stored.timeout_ms) == (2, 20_000)

    run_worker()
    result.refresh()

    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "attempt 2"
    assert result.attempts == 2 and len(result.worker_ids) == 2
    assert [e.exception_class for e in result.errors] == [ConnectionError]
    # using() keeps the options (a new task of the same class).
    assert c.fails_once.using(priority=5).attempts == 2


@needs_task_options
def test_task_store_options_are_kept_when_pickled() -> None:
    if not DJANGO_61:
        pytest.skip("tasks pickle by module path from Django 6.1 on")
    assert pickle.loads(pickle.dumps(c.fails_once)) == c.fails_once


@needs_task_options
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"attempts": 0}, "attempts must be a whole number"),
        ({"attempts": "2"}, "attempts must be a whole number"),
        ({"attempts": True}, "attempts must be a whole number"),
        ({"timeout_ms": 0}, "timeout_ms must be a positive whole number"),
        ({"timeout_ms": 1.5}, "timeout_ms must be a positive whole number"),
        ({"enqueue_on_commit": "yes"}, "enqueue_on_commit must be True, False or None"),
        ({"backoff": {"kind": "linear", "delay_ms": 5}}, "backoff must be a store backoff policy"),
        ({"backoff": {"delay_ms": 5}}, "backoff must be a store backoff policy"),
        ({"backoff": "fast"}, "backoff must be a store backoff policy"),
        ({"backoff": {"kind": "fixed", "delay_ms": -1}}, "backoff delay_ms must be"),
    ],
)
def test_bad_task_store_options_are_refused_when_the_task_is_defined(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidTaskError, match=message):
        task(**options)(c.add.func)


@needs_task_options
def test_a_task_group_reaches_the_job_and_the_queue_limits_apply(main_store: Any) -> None:
    first = c.per_tenant.enqueue(7, amount=1)
    second = c.per_tenant.enqueue(tenant=7, amount=2)
    other = c.per_tenant.enqueue(8)
    assert [main_store.get_job(r.id).group for r in (first, second, other)] == [
        "tenant-7",
        "tenant-7",
        "tenant-8",
    ]
    fixed = task(group="nightly")(c.add.func).enqueue(1, 2)
    assert main_store.get_job(fixed.id).group == "nightly"
    # Queue limits apply to tasks like any job: one run per tenant at a time.
    queue = c.per_tenant.queue_name
    main_store.set_queue_limits(queue, group_concurrency=1)
    try:
        names = [c.per_tenant.module_path]
        taken = []
        for token in ("a", "b", "c"):
            got = main_store.claim(queue=queue, names=names, token=token, lock_duration_ms=30_000)
            taken.append(getattr(got, "job", None))
        groups = [j.group for j in taken if j is not None]
        assert sorted(groups) == ["tenant-7", "tenant-8"]
        assert taken[2] is None
    finally:
        main_store.clear_queue_limits(queue)


@needs_task_options
@pytest.mark.parametrize("group", ["", "a\0b", 42])
def test_a_bad_task_group_is_refused_when_the_task_is_defined(group: Any) -> None:
    with pytest.raises(InvalidTaskError, match="group"):
        task(group=group)(c.add.func)


@needs_task_options
def test_unknown_task_options_are_a_type_error() -> None:
    with pytest.raises(TypeError):
        task(retries=3)(c.add.func)


@pytest.mark.skipif(
    c.TASK_OPTIONS, reason="only Django 6.0's @task refuses the store options outright"
)
def test_django_60_task_takes_no_store_options() -> None:
    with pytest.raises(TypeError):
        task(attempts=2)(c.add.func)


@needs_task_options
@pytest.mark.django_db(transaction=True)
def test_task_enqueue_on_commit_waits_for_the_commit(main_store: Any) -> None:
    assert c.on_commit_task.enqueue_on_commit is True
    with transaction.atomic():
        result = c.on_commit_task.enqueue()
        assert result.enqueued_at is None
        assert main_store.get_job(result.id) is None
    assert main_store.get_job(result.id) is not None
