"""Module-level tasks of tests/tasks/test_django_conformance.py (a worker imports them by path).

``@task`` builds the task with the task class of the backend configured when it runs, so
these functions are decorated by :func:`define` once a test's ``TASKS`` names
``StoreBackend`` (as a project's settings do before its task modules are imported); it
replaces each module attribute by its task.  The tasks with store options
(``@task(attempts=..., ...)``) exist only where ``@task`` passes extra keyword arguments
on to the backend's task class: Django 6.1 and the django-tasks backport, not Django 6.0
(``TASK_OPTIONS`` says which).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

try:
    from django.tasks import TaskContext, task
except ImportError:
    from django_tasks import TaskContext, task

#: True where ``@task(**kwargs)`` reaches the backend's task class.
TASK_OPTIONS = inspect.getfullargspec(task).varkw is not None

#: name -> (function, the @task arguments)
_DEFINITIONS: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {}


def _task(**arguments: Any) -> Callable[[Callable[..., Any]], Any]:
    def remember(function: Callable[..., Any]) -> Any:
        _DEFINITIONS[function.__name__] = (function, arguments)
        return function

    return remember


def define() -> None:
    """Decorate every function here with ``@task(...)`` on the current default backend."""
    for name, (function, arguments) in _DEFINITIONS.items():
        if arguments.get("store_options") and not TASK_OPTIONS:
            continue
        kwargs = {k: v for k, v in arguments.items() if k != "store_options"}
        globals()[name] = task(**kwargs)(function)


@_task()
def add(a: int, b: int) -> int:
    return a + b


@_task()
async def async_add(a: int, b: int) -> int:
    return a + b


@_task()
def raise_value_error() -> None:
    raise ValueError("conformance: this task failed")


@_task()
async def async_raise_value_error() -> None:
    raise ValueError("conformance: this async task failed")


@_task(takes_context=True)
def context_attempt(context: TaskContext) -> dict[str, Any]:
    return {"id": context.task_result.id, "attempt": context.attempt}


@_task(takes_context=True)
async def async_context_attempt(context: TaskContext) -> dict[str, Any]:
    return {"id": context.task_result.id, "attempt": context.attempt}


@_task(
    store_options=True,
    attempts=2,
    backoff={"kind": "fixed", "delay_ms": 0},
    timeout_ms=20_000,
    takes_context=True,
)
def fails_once(context: TaskContext) -> str:
    if context.attempt == 1:
        raise ConnectionError("first run fails")
    return f"attempt {context.attempt}"


def tenant_group(tenant: int, **_: Any) -> str:
    return f"tenant-{tenant}"


@_task(store_options=True, group=tenant_group)
def per_tenant(tenant: int, amount: int = 0) -> int:
    return amount


@_task(store_options=True, enqueue_on_commit=True)
def on_commit_task() -> str:
    return "committed"
