"""The Django task every Django Tasks backend of bench/django_tasks_bench.py runs.

Imported only after the driver configured Django (``@task`` validates against the backend).
"""

from __future__ import annotations

from typing import Any

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task


@task()
def noop(payload: dict[str, Any]) -> None:
    """Ignore the payload: the benchmark measures the backend, not the task."""
    return None
