"""Fixtures of the Django Tasks backend tests: TASKS on a store of this test's prefix.

``settings.TASKS`` names ``mqadmin.tasks.StoreBackend`` on the MQ_STORES entry
"main" (this test's prefix on the test Redis), with the queues "default" and
"queue-1".  :func:`run_worker` runs ``manage.py runworker --burst`` in this
process, so the tasks of ``sample_tasks`` run for real and can record what they did.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.management import call_command

import mqadmin.tasks  # noqa: F401  (connects the framework's settings-changed handler)
from mqadmin import services
from tests.tasks import sample_tasks

try:
    from django.tasks import default_task_backend, task_backends
except ImportError:
    from django_tasks import default_task_backend, task_backends

BACKEND = "mqadmin.tasks.StoreBackend"
# Fields Django 6.0's Task requires (6.1 and the backport give them defaults).
TASK_DEFAULTS = {"priority": 0, "queue_name": "default", "run_after": None}


def tasks_setting(**extra: Any) -> dict[str, Any]:
    """A TASKS setting for the backend on store "main" (``OPTIONS`` entries as keywords)."""
    queues = extra.pop("QUEUES", ["default", "queue-1"])
    return {
        "default": {
            "BACKEND": BACKEND,
            "QUEUES": queues,
            "OPTIONS": {"STORE": "main", **extra},
        }
    }


@pytest.fixture(autouse=True)
def tasks_settings(settings: Any, redis_url: str, prefix: str) -> Iterator[Any]:
    services.reset()
    settings.MQ_STORES = {"main": {"prefix": prefix, "url": redis_url}}
    settings.TASKS = tasks_setting()
    with sample_tasks.ran_lock:
        sample_tasks.ran.clear()
    sample_tasks.flaky_state["fail"] = True
    yield settings
    services.reset()


@pytest.fixture
def backend(tasks_settings: Any) -> Any:
    return task_backends["default"]


@pytest.fixture
def main_store(tasks_settings: Any) -> Any:
    return services.get_named_store("main")


@pytest.fixture
def run_worker() -> Callable[..., str]:
    """``run_worker("--queues", "default")`` -> the command's output, after a burst run."""

    def run(*argv: str) -> str:
        out = io.StringIO()
        call_command(
            "runworker",
            "--store",
            "main",
            "--burst",
            "--poll-interval-ms",
            "200",
            *argv,
            stdout=out,
        )
        return out.getvalue()

    return run


__all__ = ["BACKEND", "TASK_DEFAULTS", "default_task_backend", "tasks_setting"]
