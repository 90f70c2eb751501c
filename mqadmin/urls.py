"""URL configuration of the mqadmin app (namespace ``mqadmin``).

A host project mounts it under any prefix: ``path("ops/mq/", include("mqadmin.urls"))``.

Job ids, flow ids, queue names and schedule keys may hold any character, "/"
included, so ids sit at the end of a path (``<path:...>``) and action targets
travel in the POST body, never in the path.
"""

from __future__ import annotations

from django.urls import path

from mqadmin import views

app_name = "mqadmin"

urlpatterns = [
    path("", views.home, name="home"),
    path("overview/throughput/", views.throughput, name="throughput"),
    path("jobs/", views.explorer, name="jobs"),
    path("jobs/lookup/", views.lookup, name="lookup"),
    path("stores/<str:store>/jobs/<path:job_id>", views.job, name="job"),
    path("stores/<str:store>/logs/<path:job_id>", views.job_logs, name="job_logs"),
    # The live pages' server-sent event stream (mqadmin/views/events.py, mqadmin/live.py).
    path("events/", views.events, name="events"),
    path("flows/", views.flows, name="flows"),
    path("stores/<str:store>/flows/<path:flow_id>", views.flow, name="flow"),
    path("stores/<str:store>/queues/<path:queue>", views.queue, name="queue"),
    path("failures/", views.failures, name="failures"),
    path("outbox/", views.outbox, name="outbox"),
    path("workers/", views.workers, name="workers"),
    path("indexes/", views.indexes, name="indexes"),
    path("schedules/", views.schedules, name="schedules"),
    path("audit/", views.audit, name="audit"),
    path("actions/job/<str:verb>/", views.job_action, name="job_action"),
    path("actions/queue/<str:verb>/", views.queue_action, name="queue_action"),
    path("actions/schedule/<str:verb>/", views.schedule_action, name="schedule_action"),
    path("actions/worker/<str:verb>/", views.worker_action, name="worker_action"),
    path("bulk/selected/", views.bulk_selected, name="bulk_selected"),
    path("bulk/preview/", views.bulk_preview, name="bulk_preview"),
    path("bulk/run/", views.bulk_run, name="bulk_run"),
    # Monitoring: Prometheus, probes, per-job-name metrics (mqadmin/views/metrics.py).
    path("metrics/", views.metrics, name="metrics"),
    path("metrics/jobs/", views.job_metrics, name="job_metrics"),
    path("healthz/", views.healthz, name="healthz"),
    path("readyz/", views.readyz, name="readyz"),
    path("bulk/runs/<int:entry_id>/", views.bulk_result, name="bulk_result"),
    # A queue's drain and clean: the queue travels in the query string or POST body.
    path("queues/sweep/preview/", views.queue_sweep_preview, name="queue_sweep_preview"),
    path("queues/sweep/run/", views.queue_sweep_run, name="queue_sweep_run"),
    path("queues/sweep/runs/<int:entry_id>/", views.queue_sweep_result, name="queue_sweep_result"),
]
