"""The Django task every Django Tasks backend of bench/django_tasks_bench.py runs.

Imported only after the driver configured Django (``@task`` validates against the backend).
Django's own ``django.tasks`` where the running Django has it, else the django-tasks backport;
``BENCH_DTASKS_API=backport`` asks for the backport on Django 6 (django-tasks-rq knows only it).
"""

from __future__ import annotations

import os
from typing import Any

if os.environ.get("BENCH_DTASKS_API") == "backport":
    from django_tasks import task
else:
    try:
        from django.tasks import task
    except ImportError:
        from django_tasks import task


@task()
def noop(payload: dict[str, Any]) -> None:
    """Ignore the payload: the benchmark measures the backend, not the task."""
    return None
