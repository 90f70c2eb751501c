"""The behaviour cases of the django-tasks backport's own backend tests, on StoreBackend.

Real Redis, real worker (``runworker --burst`` in this process) wherever a result is needed.
"""

from __future__ import annotations

import logging
import time
import types
import weakref
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from mqadmin import services
from mqadmin.tasks import (
    InvalidTaskArguments,
    InvalidTaskError,
    StoreBackend,
    TaskCancelled,
    TaskNotImportable,
    TaskResultDoesNotExist,
)
from store import EnqueueRequest
from store.errors import InvalidRequestError
from tests.conftest import delete_prefix
from tests.tasks import sample_tasks as t
from tests.tasks.conftest import TASK_DEFAULTS, default_task_backend, tasks_setting

try:
    from django.tasks import TaskResultStatus, task_backends
    from django.tasks.base import Task

    TASKS_LOGGER = "django.tasks"  # the framework's own log (Django 6)
except ImportError:
    from django_tasks import TaskResultStatus, task_backends
    from django_tasks.base import Task

    TASKS_LOGGER = "django_tasks"  # the backport's

pytestmark = pytest.mark.django_db


def stored(store: Any, result_id: str) -> Any:
    record = store.get_job(result_id)
    assert record is not None
    return record


# ---------------------------------------------------------------------- configuration


def test_using_correct_backend(backend: Any) -> None:
    assert default_task_backend.alias == "default"
    assert isinstance(task_backends["default"], StoreBackend)
    assert backend.supports_defer and backend.supports_priority
    assert backend.supports_get_result and backend.supports_async_task
    assert backend.queues == {"default", "queue-1"}
    assert backend.store_key == "main"


def test_unknown_option_is_refused(tasks_settings: Any) -> None:
    tasks_settings.TASKS = tasks_setting(COLOUR="blue")
    with pytest.raises(Exception, match="unknown OPTIONS .*COLOUR"):
        task_backends["default"]  # noqa: B018


# ---------------------------------------------------------------------- enqueue


@pytest.mark.parametrize("task", [t.noop_task, t.noop_task_async])
def test_enqueue_task(task: Task, main_store: Any) -> None:
    result = task.enqueue(1, two=3)

    assert result.status == TaskResultStatus.READY
    assert not result.is_finished
    assert result.started_at is None and result.last_attempted_at is None
    assert result.finished_at is None
    assert result.enqueued_at is not None
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018
    assert result.task == task
    assert result.args == [1] and result.kwargs == {"two": 3}
    assert result.attempts == 0
    # One job in the store: the module path as its name, the task's queue, readable arguments.
    record = stored(main_store, result.id)
    assert record.name == task.module_path
    assert record.queue == "default" and record.state == "waiting"
    assert record.payload == {"args": [1], "kwargs": {"two": 3}}


@pytest.mark.parametrize("task", [t.noop_task, t.noop_task_async])
def test_enqueue_task_async(task: Task, main_store: Any) -> None:
    result = async_to_sync(task.aenqueue)()
    assert result.status == TaskResultStatus.READY
    assert result.args == [] and result.kwargs == {}
    assert result.attempts == 0
    assert stored(main_store, result.id).name == task.module_path


def test_enqueue_logs(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger=TASKS_LOGGER):
        result = t.noop_task.enqueue()
    lines = [r.getMessage() for r in caplog.records if r.name == TASKS_LOGGER]
    assert len(lines) == 1 and "enqueued" in lines[0] and result.id in lines[0]


# ---------------------------------------------------------------------- get_result


def test_get_result(backend: Any) -> None:
    result = backend.enqueue(t.noop_task, [], {})
    fetched = backend.get_result(result.id)
    for field in ("id", "status", "args", "kwargs", "backend", "errors", "worker_ids", "task"):
        assert getattr(fetched, field) == getattr(result, field), field
    assert fetched.started_at is None and fetched.finished_at is None
    # enqueued_at: the store's insert time, the same instant as the producer's (ms resolution).
    assert abs((fetched.enqueued_at - result.enqueued_at).total_seconds()) < 1
    assert t.noop_task.get_result(result.id).id == result.id


def test_get_result_async(backend: Any) -> None:
    result = async_to_sync(backend.aenqueue)(t.noop_task, [], {})
    fetched = async_to_sync(backend.aget_result)(result.id)
    assert fetched.id == result.id and fetched.status == TaskResultStatus.READY
    assert async_to_sync(t.noop_task.aget_result)(result.id).id == result.id


# A fixed uuid: parallel workers (pytest-xdist) must collect the same test ids.
@pytest.mark.parametrize("result_id", ["5f0c6f9e-3b7e-4a0f-9d3c-2b8f0e6a1c4d", "123", ""])
def test_get_missing_result(backend: Any, result_id: str) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(result_id)
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(backend.aget_result)(result_id)


def test_a_store_job_that_is_no_task_has_no_result(backend: Any, main_store: Any) -> None:
    plain = main_store.enqueue(EnqueueRequest(name="SendInvite", payload={"to": "x"})).id
    with pytest.raises(TaskResultDoesNotExist, match="not a Django task"):
        backend.get_result(plain)
    odd = main_store.enqueue(
        EnqueueRequest(name="subprocess.check_output", payload={"args": [], "kwargs": {}})
    ).id
    with pytest.raises(TaskResultDoesNotExist, match="not a Django task"):
        backend.get_result(odd)


def test_get_result_of_another_task_is_a_mismatch(backend: Any) -> None:
    try:
        from django.tasks.exceptions import TaskResultMismatch
    except ImportError:
        from django_tasks.exceptions import TaskResultMismatch
    result = t.noop_task.enqueue()
    with pytest.raises(TaskResultMismatch):
        t.calculate_meaning_of_life.get_result(result.id)


# ---------------------------------------------------------------------- running


def test_refresh_result(backend: Any, run_worker: Any) -> None:
    result = backend.enqueue(t.calculate_meaning_of_life, (), {})
    output = run_worker()

    # The local copy does not change by itself.
    assert result.status == TaskResultStatus.READY
    assert result.started_at is None and result.attempts == 0

    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.is_finished
    assert result.return_value == 42
    assert result.attempts == 1
    assert result.started_at is not None and result.last_attempted_at is not None
    assert result.finished_at is not None
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.errors == []
    (worker_id,) = result.worker_ids
    assert f"worker {worker_id} " in output  # the id runworker printed


def test_refresh_result_async(backend: Any, run_worker: Any) -> None:
    result = async_to_sync(backend.aenqueue)(t.async_meaning_of_life, (), {})
    run_worker()
    async_to_sync(result.arefresh)()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 42 and result.attempts == 1


@pytest.mark.parametrize(
    ("task", "exception", "message"),
    [
        (t.failing_task_value_error, ValueError, "This task failed due to ValueError"),
        (t.failing_task_system_exit, SystemExit, "This task failed due to SystemExit"),
    ],
)
def test_catches_exception(
    task: Task, exception: type[BaseException], message: str, run_worker: Any
) -> None:
    result = task.enqueue()
    run_worker()
    result.refresh()

    assert result.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    assert result.is_finished
    assert result.started_at is not None and result.finished_at is not None
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.errors[0].exception_class is exception
    assert result.errors[0].traceback.endswith(f"{exception.__name__}: {message}\n")
    assert result.attempts == 1
    assert result.args == [] and result.kwargs == {}


def test_complex_exception(run_worker: Any) -> None:
    result = t.complex_exception.enqueue()
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result._return_value is None
    assert result.errors[0].exception_class is ValueError
    assert "ValueError: This task failed" in result.errors[0].traceback
    assert result.attempts == 1


def test_complex_return_value(run_worker: Any) -> None:
    result = t.complex_return_value.enqueue()
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result._return_value is None
    assert result.errors[0].exception_class is InvalidRequestError
    assert "not JSON-serialisable" in result.errors[0].traceback


def test_takes_context(run_worker: Any) -> None:
    result = t.get_task_id.enqueue()
    run_worker()
    result.refresh()
    assert result.return_value == result.id


def test_context(run_worker: Any) -> None:
    result = t.context_details.enqueue(7)
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    details = result.return_value
    assert details["id"] == result.id and details["value"] == 7
    assert details["attempt"] == 1 and details["status"] == "RUNNING"
    assert details["worker_ids"] == result.worker_ids


def test_progress_and_log_lines_of_a_context_task(run_worker: Any) -> None:
    from mqadmin.tasks import StoreBackend

    result = t.reports_progress.enqueue(4)
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    backend = task_backends[t.reports_progress.backend]
    assert isinstance(backend, StoreBackend)
    store = backend.store
    assert store.get_job(result.id).progress == 100
    assert [line.message for line in store.job_logs(result.id)] == [
        f"step {n} of 4" for n in range(1, 5)
    ]
    kinds = [e.type for e in store.events("0", count=1000) if e.job_id == result.id]
    assert kinds == ["enqueued", "active"] + ["progress", "log"] * 4 + ["completed"]


def test_task_progress_outside_the_worker_is_refused() -> None:
    from mqadmin.tasks import task_log, task_progress

    result = t.reports_progress.enqueue(1)
    context = type("Ctx", (), {"task_result": result})()
    with pytest.raises(LookupError, match="inside a task run by the mqadmin worker"):
        task_progress(context, 5)
    with pytest.raises(LookupError, match="inside a task run by the mqadmin worker"):
        task_log(context, "x")


def test_started_finished_logs(run_worker: Any, caplog: pytest.LogCaptureFixture) -> None:
    result = t.noop_task.enqueue()
    with caplog.at_level(logging.DEBUG, logger=TASKS_LOGGER):
        run_worker()
    lines = [r.getMessage() for r in caplog.records if r.name == TASKS_LOGGER]
    assert len(lines) == 2, lines
    assert "state=RUNNING" in lines[0] and result.id in lines[0]
    assert "state=SUCCESSFUL" in lines[1] and result.id in lines[1]


def test_failed_logs(run_worker: Any, caplog: pytest.LogCaptureFixture) -> None:
    result = t.failing_task_value_error.enqueue()
    with caplog.at_level(logging.DEBUG, logger=TASKS_LOGGER):
        run_worker()
    records = [r for r in caplog.records if r.name == TASKS_LOGGER]
    assert len(records) == 2
    assert "state=RUNNING" in records[0].getMessage()
    assert "state=FAILED" in records[1].getMessage() and result.id in records[1].getMessage()
    assert records[1].exc_info is not None  # logged with the exception, for error trackers


def test_retries_record_one_error_per_failed_attempt(tasks_settings: Any, run_worker: Any) -> None:
    tasks_settings.TASKS = tasks_setting(ATTEMPTS=2)
    result = t.flaky.enqueue()
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "second attempt worked"
    assert [e.exception_class for e in result.errors] == [RuntimeError]
    assert result.attempts == 2 and len(result.worker_ids) == 2


# ---------------------------------------------------------------------- deferral and priority


def test_run_after_defers_the_task(main_store: Any, run_worker: Any) -> None:
    run_after = datetime.now(tz=UTC) + timedelta(seconds=1.5)
    result = t.calculate_meaning_of_life.using(run_after=run_after).enqueue()
    assert result.task.run_after == run_after
    record = stored(main_store, result.id)
    assert record.state == "delayed"
    assert abs(record.run_at - run_after.timestamp() * 1000) < 50
    assert default_task_backend.get_result(result.id).status == TaskResultStatus.READY

    run_worker()  # nothing is due yet: the burst ends without running it
    assert default_task_backend.get_result(result.id).status == TaskResultStatus.READY

    time.sleep(max(0.0, run_after.timestamp() - time.time()) + 0.05)
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.started_at >= run_after - timedelta(milliseconds=5)


def test_run_after_in_the_past_runs_at_once(main_store: Any) -> None:
    past = datetime.now(tz=UTC) - timedelta(hours=1)
    result = t.noop_task.using(run_after=past).enqueue()
    assert stored(main_store, result.id).state == "waiting"


def test_naive_run_after_is_refused(main_store: Any) -> None:
    with pytest.raises(InvalidTaskError, match="aware"):
        t.noop_task.using(run_after=datetime.now()).enqueue()  # noqa: DTZ005
    assert main_store.counts() == {} or sum(main_store.counts().values()) == 0


def test_higher_priority_runs_first(main_store: Any, run_worker: Any) -> None:
    t.labelled.using(priority=-10).enqueue("low")
    t.labelled.enqueue("normal")
    t.labelled.using(priority=10).enqueue("high")
    t.labelled.using(priority=100).enqueue("highest")
    record = stored(main_store, t.labelled.using(priority=-100).enqueue("lowest").id)
    assert record.priority == -100
    run_worker("--concurrency", "1")
    assert t.ran == ["highest", "high", "normal", "low", "lowest"]


def test_priority_out_of_range_is_refused() -> None:
    with pytest.raises(InvalidTaskError, match="priority"):
        t.noop_task.using(priority=101).enqueue()


# ---------------------------------------------------------------------- queues


def test_queue_isolation(main_store: Any, run_worker: Any) -> None:
    default_task = t.labelled.enqueue("in default")
    other_task = t.labelled.using(queue_name="queue-1").enqueue("in queue-1")
    assert stored(main_store, default_task.id).queue == "default"
    assert stored(main_store, other_task.id).queue == "queue-1"
    assert default_task_backend.get_result(other_task.id).task.queue_name == "queue-1"

    run_worker("--queues", "default")
    assert t.ran == ["in default"]
    assert default_task_backend.get_result(other_task.id).status == TaskResultStatus.READY
    run_worker()
    assert t.ran == ["in default", "in queue-1"]


def test_validate_on_enqueue(tasks_settings: Any, main_store: Any) -> None:
    # Built while another configuration allows the queue; enqueued under this one.
    allowed = tasks_settings.TASKS
    tasks_settings.TASKS = tasks_setting(QUEUES=["unknown_queue"])
    bad = t.noop_task.using(queue_name="unknown_queue")
    tasks_settings.TASKS = allowed
    with pytest.raises(InvalidTaskError, match="Queue 'unknown_queue' is not valid for backend"):
        bad.enqueue()
    with pytest.raises(InvalidTaskError, match="Queue 'unknown_queue' is not valid for backend"):
        async_to_sync(bad.aenqueue)()
    assert sum(main_store.counts().values()) == 0
    assert not main_store.client.exists(main_store.keys.resolvable)


def test_empty_queues_allows_any_queue(
    tasks_settings: Any, main_store: Any, run_worker: Any
) -> None:
    tasks_settings.TASKS = tasks_setting(QUEUES=[])
    result = t.labelled.using(queue_name="anything").enqueue("any queue")
    assert stored(main_store, result.id).queue == "anything"
    run_worker()  # the worker finds the queue among the recorded task names
    assert t.ran == ["any queue"]


# ---------------------------------------------------------------------- bad input


def test_non_json_argument_is_refused_and_nothing_is_written(main_store: Any) -> None:
    for args, kwargs in (((object(),), {}), ((), {"when": datetime.now(tz=UTC)}), (({1, 2},), {})):
        with pytest.raises(InvalidTaskError) as caught:
            t.echo.enqueue(*args, **kwargs)
        assert isinstance(caught.value, TypeError)  # the backport's normalize_json type, too
        assert isinstance(caught.value, InvalidTaskArguments)
    with pytest.raises(InvalidTaskError, match="JSON"):
        t.echo.enqueue(float("nan"))
    assert sum(main_store.counts().values()) == 0
    assert not main_store.client.exists(main_store.keys.resolvable)


def _function_in(module: str) -> Any:
    def body() -> None:
        return None

    fn = types.FunctionType(body.__code__, {}, "orphan")
    fn.__module__ = module
    fn.__qualname__ = "orphan"
    return fn


@pytest.mark.parametrize(
    "module", ["no_such_module_anywhere", "__main__", "tests.tasks.sample_tasks"]
)
def test_task_from_a_module_the_worker_cannot_import_is_refused(
    module: str, backend: Any, main_store: Any
) -> None:
    task = backend.task_class(func=_function_in(module), backend="default", **TASK_DEFAULTS)
    with pytest.raises(InvalidTaskError, match="import"):
        task.enqueue()
    assert sum(main_store.counts().values()) == 0


def test_function_defined_in_a_function_is_refused(backend: Any) -> None:
    def local() -> None:
        return None

    with pytest.raises(InvalidTaskError, match="module level"):
        backend.task_class(func=local, backend="default", **TASK_DEFAULTS)


# ---------------------------------------------------------------------- the worker


def test_unknown_module_path_fails_the_job_not_the_worker(
    backend: Any, main_store: Any, run_worker: Any
) -> None:
    # A job of a path nobody can import (e.g. enqueued by code not deployed on this worker).
    ghost = main_store.enqueue(
        EnqueueRequest(name="gone.module.some_task", payload={"args": [], "kwargs": {}})
    ).id
    main_store.record_resolvable("default", "gone.module.some_task")
    good = t.labelled.enqueue("after the ghost")

    run_worker()
    record = stored(main_store, ghost)
    assert record.state == "failed"
    error = record.exit["error"]
    assert error["type"] == TaskNotImportable.__name__
    assert "gone.module.some_task" in error["message"] and "cannot be run here" in error["message"]
    assert record.attempts_made == 1  # failed at once, not retried
    assert t.ran == ["after the ghost"]
    assert backend.get_result(good.id).status == TaskResultStatus.SUCCESSFUL


def test_a_path_that_is_not_a_task_fails_clearly(main_store: Any, run_worker: Any) -> None:
    name = "tests.tasks.sample_tasks.record"  # a plain function, not a @task
    job_id = main_store.enqueue(EnqueueRequest(name=name, payload={"args": ["x"], "kwargs": {}})).id
    main_store.record_resolvable("default", name)
    run_worker()
    record = stored(main_store, job_id)
    assert record.state == "failed" and "not a Django task" in record.exit["error"]["message"]
    assert t.ran == []


def test_cancelled_task_is_failed_with_the_reason(backend: Any, main_store: Any) -> None:
    result = t.noop_task.enqueue()
    main_store.cancel(result.id)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.is_finished
    (error,) = result.errors
    assert error.exception_class is TaskCancelled
    assert f"job {result.id} was cancelled before it ran" in error.traceback


def test_running_task_reads_running(backend: Any, main_store: Any) -> None:
    from store import Claimed

    result = t.noop_task.enqueue()
    claimed = main_store.claim(
        queue="default", names=[t.noop_task.module_path], token="w-x:1", lock_duration_ms=30_000
    )
    assert isinstance(claimed, Claimed)
    result.refresh()
    assert result.status == TaskResultStatus.RUNNING
    assert result.started_at is not None and result.finished_at is None


def test_arguments_are_stored_as_the_framework_normalises_them(main_store: Any) -> None:
    result = t.echo.enqueue((1, (2, 3)), b"bytes", nested={"t": (4,), "l": [5]})
    expected_args = [[1, [2, 3]], "bytes"]
    expected_kwargs = {"nested": {"t": [4], "l": [5]}}
    assert result.args == expected_args and result.kwargs == expected_kwargs
    assert stored(main_store, result.id).payload == {
        "args": expected_args,
        "kwargs": expected_kwargs,
    }
    assert default_task_backend.get_result(result.id).args == expected_args


def test_a_stalled_attempt_is_reported_as_an_error(backend: Any, main_store: Any) -> None:
    from store import Claimed

    result = t.noop_task.enqueue()
    claimed = main_store.claim(
        queue="default", names=[t.noop_task.module_path], token="w-dead:1", lock_duration_ms=1
    )
    assert isinstance(claimed, Claimed)
    time.sleep(0.02)  # the lock expires: its worker is gone
    assert [r.id for r in main_store.recover_stalled(1)] == [result.id]
    result.refresh()
    assert result.status == TaskResultStatus.READY  # requeued for another attempt
    (error,) = result.errors
    assert error.exception_class.__name__ == "TaskStalled"
    assert "stopped heartbeating" in error.traceback


def test_check_names_a_store_that_is_not_configured(tasks_settings: Any) -> None:
    assert list(task_backends["default"].check()) == []
    tasks_settings.TASKS = tasks_setting(STORE="nowhere")
    (error,) = task_backends["default"].check()
    assert error.id == "mqadmin.E201" and "'nowhere'" in error.msg and "main" in error.msg


def test_worker_serves_only_the_backend_queues(main_store: Any, run_worker: Any) -> None:
    # A task recorded on a queue this backend does not allow (e.g. by another configuration).
    stray = main_store.enqueue(
        EnqueueRequest(
            name=t.noop_task.module_path, queue="elsewhere", payload={"args": [], "kwargs": {}}
        )
    ).id
    main_store.record_resolvable("elsewhere", t.noop_task.module_path)
    output = run_worker()
    assert "Django tasks: serving queues default, queue-1" in output
    assert stored(main_store, stray).state == "waiting"


def test_a_new_store_never_inherits_the_runnable_markers_of_a_dropped_one(
    tasks_settings: Any, prefix: str, redis_client: Any
) -> None:
    # services.reset() drops the cached store; the next one may reuse the old object's
    # address.  Each new store must still get its own record of the runnable names, or
    # an idle worker would not see the task's queue and name.
    url = tasks_settings.MQ_STORES["main"]["url"]
    prefixes = [f"{prefix}-r{n}" for n in range(12)]
    try:
        for n, round_prefix in enumerate(prefixes):
            services.reset()
            tasks_settings.MQ_STORES = {"main": {"prefix": round_prefix, "url": url}}
            t.noop_task.enqueue()
            got = services.get_named_store("main").resolvable_names()
            assert got == {"default": {t.noop_task.module_path}}, n
    finally:
        for round_prefix in prefixes:
            delete_prefix(redis_client, round_prefix)


def test_the_runnable_markers_go_with_their_store(tasks_settings: Any) -> None:
    # Keyed on the store object itself (weakly), never on id(): a collected store's id is
    # reused by the next object, which would then skip recording its names.
    import gc

    from mqadmin import tasks as backend_module

    t.noop_task.enqueue()
    store = services.get_named_store("main")
    assert backend_module._markers.get(store) == {
        ("default", t.noop_task.module_path): pytest.approx(time.monotonic(), abs=60)
    }
    ref = weakref.ref(store)
    gc.collect()  # stores earlier tests dropped: gone before counting
    marked = len(backend_module._markers)
    del store
    services.reset()
    gc.collect()
    assert ref() is None
    assert len(backend_module._markers) == marked - 1
