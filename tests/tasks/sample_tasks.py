"""Module-level Django tasks the backend tests enqueue (a worker imports them by module path)."""

from __future__ import annotations

import threading
from typing import Any

try:
    from django.tasks import TaskContext, task
except ImportError:
    from django_tasks import TaskContext, task

# What the tasks ran, in order (the tests' worker runs in this process).
ran: list[str] = []
ran_lock = threading.Lock()
# A flag a task fails on until a test clears it (retries).
flaky_state = {"fail": True}


def record(label: str) -> None:
    with ran_lock:
        ran.append(label)


@task()
def noop_task(*args: Any, **kwargs: Any) -> None:
    return None


@task()
async def noop_task_async(*args: Any, **kwargs: Any) -> None:
    return None


@task()
def calculate_meaning_of_life() -> int:
    return 42


@task()
async def async_meaning_of_life() -> int:
    return 42


@task()
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@task()
def labelled(label: str) -> str:
    record(label)
    return label


@task()
def failing_task_value_error() -> None:
    raise ValueError("This task failed due to ValueError")


@task()
def failing_task_system_exit() -> None:
    raise SystemExit("This task failed due to SystemExit")


@task()
def complex_exception() -> None:
    raise ValueError(ValueError("This task failed"))


@task()
def complex_return_value() -> Any:
    return {"not": {"json"}}  # a set: cannot be stored


@task(takes_context=True)
def get_task_id(context: TaskContext) -> str:
    return str(context.task_result.id)


@task(takes_context=True)
def context_details(context: TaskContext, value: int) -> dict[str, Any]:
    result = context.task_result
    return {
        "id": result.id,
        "attempt": context.attempt,
        "status": str(result.status),
        "value": value,
        "worker_ids": list(result.worker_ids),
    }


@task(takes_context=True)
def reports_progress(context: TaskContext, steps: int) -> int:
    from mqadmin.tasks import task_log, task_progress

    for step in range(1, steps + 1):
        assert task_progress(context, 100 * step // steps)
        assert task_log(context, f"step {step} of {steps}")
    return steps


@task()
def flaky() -> str:
    if flaky_state["fail"]:
        flaky_state["fail"] = False
        raise RuntimeError("first attempt fails")
    return "second attempt worked"


@task()
def slow_task(seconds: float) -> str:
    from store.jobs import current_job

    current_job().sleep(seconds * 1000)
    return "done"
