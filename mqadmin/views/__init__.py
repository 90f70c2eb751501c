"""Views of the mqadmin dashboard, one module per page family (see ``mqadmin/urls.py``).

Each module has a query module of the same name in :mod:`mqadmin.queries`.
"""

from __future__ import annotations

from mqadmin.views.actions import job_action, queue_action, schedule_action, worker_action
from mqadmin.views.bulk import bulk_preview, bulk_result, bulk_run, bulk_selected
from mqadmin.views.common import HtmxHttpRequest
from mqadmin.views.events import events
from mqadmin.views.explorer import explorer
from mqadmin.views.flows import flow, flows
from mqadmin.views.job import job, job_logs, lookup
from mqadmin.views.metrics import healthz, job_metrics, metrics, readyz
from mqadmin.views.operations import audit, failures, indexes, outbox, schedules, workers
from mqadmin.views.overview import home, throughput
from mqadmin.views.queue import queue, queue_sweep_preview, queue_sweep_result, queue_sweep_run

__all__ = [
    "HtmxHttpRequest",
    "audit",
    "bulk_preview",
    "bulk_result",
    "bulk_run",
    "bulk_selected",
    "events",
    "explorer",
    "failures",
    "flow",
    "flows",
    "healthz",
    "home",
    "indexes",
    "job",
    "job_action",
    "job_logs",
    "job_metrics",
    "lookup",
    "metrics",
    "outbox",
    "queue",
    "queue_action",
    "queue_sweep_preview",
    "queue_sweep_result",
    "queue_sweep_run",
    "readyz",
    "schedule_action",
    "schedules",
    "throughput",
    "worker_action",
    "workers",
]
