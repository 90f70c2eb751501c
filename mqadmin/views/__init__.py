"""Views of the mqadmin dashboard, one module per area (see ``mqadmin/urls.py``)."""

from __future__ import annotations

from mqadmin.views.actions import job_action, queue_action, schedule_action
from mqadmin.views.bulk import bulk_preview, bulk_result, bulk_run, bulk_selected
from mqadmin.views.common import HtmxHttpRequest
from mqadmin.views.flows import flow
from mqadmin.views.jobs import explorer, job, lookup
from mqadmin.views.monitoring import healthz, job_metrics, metrics, readyz
from mqadmin.views.operations import audit, failures, indexes, outbox, schedules, workers
from mqadmin.views.overview import home, throughput

__all__ = [
    "HtmxHttpRequest",
    "audit",
    "bulk_preview",
    "bulk_result",
    "bulk_run",
    "bulk_selected",
    "explorer",
    "failures",
    "flow",
    "healthz",
    "home",
    "indexes",
    "job",
    "job_action",
    "job_metrics",
    "lookup",
    "metrics",
    "outbox",
    "queue_action",
    "readyz",
    "schedule_action",
    "schedules",
    "throughput",
    "workers",
]
