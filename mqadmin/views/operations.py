"""Operations pages: the outbox backlog, workers, index status, schedules and the audit log."""

from __future__ import annotations

from django.db.models import Q
from django.http import HttpResponse
from django.views.decorators.http import require_GET

from mqadmin import forms, permissions, services
from mqadmin.models import AuditEntry
from mqadmin.queries import operations as queries
from mqadmin.views.common import HtmxHttpRequest, dashboard_view, denied, error_page, page

AUDIT_PAGE = 50


@require_GET
@dashboard_view
def outbox(request: HtmxHttpRequest) -> HttpResponse:
    """Per store: outbox depth, oldest entry, routes of live workers; one store's entries paged."""
    form = forms.OutboxPageForm(request.GET)
    if not form.is_valid():
        return error_page(request, 400, "Bad outbox request", forms.form_errors(form))
    summaries = queries.outbox_overview()
    selected_name = form.cleaned_data.get("store") or next(
        (s.store for s in summaries if s.depth and not s.error), None
    )
    selected = next((s for s in summaries if s.store == selected_name), None)
    entries = None
    if selected is not None and selected.error is None:
        entries = queries.outbox_page(selected, form.cleaned_data.get("after"))
    context = {
        "summaries": summaries,
        "selected": selected,
        "entries": entries,
        "after": form.cleaned_data.get("after"),
    }
    return page(request, "mqadmin/outbox.html", context, partial="entries")


@require_GET
@dashboard_view
def failures(request: HtmxHttpRequest) -> HttpResponse:
    """Failed jobs of one store grouped by error type and normalised message.

    Read from the aggregates the fail path keeps (one hash per error group), never by
    scanning jobs; the groups seen most recently are sorted (last seen, count, first
    seen) and filtered (queue, job name, last seen within a window) here.  Each group
    links to its failed jobs and to a bulk-retry preview.
    """
    form = forms.FailuresForm(request.GET)
    if not form.is_valid():
        return error_page(request, 400, "Bad failures request", forms.form_errors(form))
    names = services.store_names()
    store_name = form.cleaned_data.get("store") or (names[0] if names else "default")
    view = queries.failures_view(store_name, form.to_filters(store_name))
    context = {
        "view": view,
        "store": store_name,
        "sort_labels": {"last_seen": "last seen", "count": "failures", "first_seen": "first seen"},
        "sort_columns": [
            ("count", "Failures"),
            ("last_seen", "Last seen"),
            ("first_seen", "First seen"),
        ],
        "window_labels": queries.FAILURE_WINDOW_LABELS,
    }
    return page(request, "mqadmin/failures.html", context, partial="groups")


@require_GET
@dashboard_view
def workers(request: HtmxHttpRequest) -> HttpResponse:
    """Live worker processes per store: host, pid, queues, concurrency, jobs in flight, totals.

    Refreshes itself every 10 s (htmx partial ``workers``).
    """
    return page(
        request,
        "mqadmin/workers.html",
        {"stores": queries.workers_overview(), "live_ms": queries.LIVE_WORKER_MS},
        partial="workers",
    )


@require_GET
@dashboard_view
def indexes(request: HtmxHttpRequest) -> HttpResponse:
    """Per store and index kind: enabled, ready marker, zsets and members, warnings, commands."""
    return page(
        request, "mqadmin/indexes.html", {"stores": queries.index_overview()}, partial="indexes"
    )


@require_GET
@dashboard_view
def schedules(request: HtmxHttpRequest) -> HttpResponse:
    """Every schedule: cadence in words, time zone, next five runs, overdue flag, actions."""
    return page(
        request,
        "mqadmin/schedules.html",
        {"stores": queries.schedules_overview()},
        partial="schedules",
    )


@require_GET
@dashboard_view
def audit(request: HtmxHttpRequest) -> HttpResponse:
    """The audit log, newest first, paged by entry number (needs the audit view permission)."""
    if not permissions.can_view_audit(request.user):
        return denied(
            request,
            "You need the “view_auditentry” permission to see the audit log.",
        )
    form = forms.AuditFilterForm(request.GET)
    if not form.is_valid():
        return error_page(request, 400, "Bad audit log request", forms.form_errors(form))
    data = form.cleaned_data
    entries = AuditEntry.objects.select_related("user").order_by("-id")
    if data.get("before"):
        entries = entries.filter(id__lt=data["before"])
    if data.get("action"):
        entries = entries.filter(action=data["action"])
    if data.get("user"):
        entries = entries.filter(Q(username=data["user"]))
    if data.get("store"):
        entries = entries.filter(store=data["store"])
    if data.get("outcome"):
        entries = entries.filter(ok=data["outcome"] == "ok")
    rows = list(entries[: AUDIT_PAGE + 1])
    more = len(rows) > AUDIT_PAGE
    rows = rows[:AUDIT_PAGE]
    filters = {k: v for k, v in data.items() if k != "before" and v}
    context = {
        "form": form,
        "entries": rows,
        "next_before": rows[-1].id if more and rows else None,
        "filters": filters,
        "actions": list(
            AuditEntry.objects.order_by().values_list("action", flat=True).distinct()[:100]
        ),
    }
    return page(request, "mqadmin/audit.html", context, partial="entries")
