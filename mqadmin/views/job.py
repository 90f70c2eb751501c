"""The job page and the lookup box that leads to it."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET

from mqadmin import forms, live, permissions
from mqadmin.queries import job as queries
from mqadmin.views.common import (
    HtmxHttpRequest,
    dashboard_view,
    denied,
    error_page,
    page,
    wants_partial,
)


@require_GET
@dashboard_view
def lookup(request: HtmxHttpRequest) -> HttpResponse:
    """The id box: straight to the job's page, or a 404 that says where it looked."""
    form = forms.JobLookupForm(request.GET)
    if not form.is_valid():
        return error_page(request, 400, "Cannot look that up", forms.form_errors(form))
    store_name = form.cleaned_data["store"]
    job_id = form.cleaned_data["id"]
    detail = queries.job_detail(store_name, job_id)
    if detail is None:
        return error_page(
            request,
            404,
            "No such job",
            [f"Store “{store_name}” has no job with id “{job_id}”."],
            lookup_store=store_name,
            lookup_id=job_id,
        )
    return redirect(reverse("mqadmin:job", args=[store_name, job_id]))


@require_GET
@dashboard_view
def job(request: HtmxHttpRequest, store: str, job_id: str) -> HttpResponse:
    """Every field of one job, its attempt ledger, lock and dedupe state, and its actions.

    While the job is not finished the summary refreshes itself (htmx partial
    ``summary``), so a retried job can be watched as it moves on.
    """
    detail = queries.job_detail(store, job_id)
    if detail is None:
        return error_page(
            request,
            404,
            "No such job",
            [
                f"Store “{store}” has no job with id “{job_id}”. It may have been removed, "
                "or pruned by its retention policy."
            ],
            lookup_store=store,
            lookup_id=job_id,
        )
    context = {
        "detail": detail,
        "job": detail.record,
        "store": store,
        "back": explorer_back(request),
        "retried_by": last_manual_retry(store, job_id),
        "progress": live.progress_view(detail.record.progress),
    }
    if not wants_partial(request):
        # The Logs section and the stream are outside the summary an htmx refresh swaps.
        context["events_url"] = live.events_url([store], job_id=job_id)
        if permissions.can_view_payload(request.user):
            context["log_tail"] = queries.log_tail(store, job_id)
    return page(request, "mqadmin/job_detail.html", context, partial="summary")


@require_GET
@dashboard_view
def job_logs(request: HtmxHttpRequest, store: str, job_id: str) -> HttpResponse:
    """A job's whole log, a page at a time, oldest first (the job page shows the newest)."""
    form = forms.LogPageForm(request.GET)
    if not form.is_valid():
        return error_page(request, 400, "Cannot show these log lines", forms.form_errors(form))
    if not permissions.can_view_payload(request.user):
        return denied(request, f"Log lines are {permissions.HIDDEN_VALUE}.")
    log_page = queries.log_page(store, job_id, start=form.cleaned_data["start"] or 0)
    if log_page is None:
        return error_page(
            request, 404, "No such job", [f"Store “{store}” has no job with id “{job_id}”."]
        )
    return page(
        request, "mqadmin/job_logs.html", {"store": store, "job_id": job_id, "log_page": log_page}
    )


def explorer_back(request: HtmxHttpRequest) -> str:
    """The explorer page (with its filter) the job page was opened from, if any.

    From ``?back=`` (carried by the page's own refreshes) or the Referer; only a local
    path of the explorer is kept, so actions can return to exactly that filter.
    """
    explorer_path = reverse("mqadmin:jobs")
    candidates = [request.GET.get("back", "")]
    referer = request.META.get("HTTP_REFERER", "")
    if referer:
        parts = urlsplit(referer)
        if parts.netloc in ("", request.get_host()):
            candidates.append(parts.path + (f"?{parts.query}" if parts.query else ""))
    for value in candidates:
        field = forms.NextField()
        try:
            path = field.clean(value)
        except ValidationError:
            continue
        if path and urlsplit(path).path == explorer_path:
            return path
    return ""


@dataclass(frozen=True)
class ManualRetry:
    username: str
    created_ms: int


def last_manual_retry(store: str, job_id: str) -> ManualRetry | None:
    """Who last retried this job from the dashboard (the audit log), and when."""
    from mqadmin.models import AuditEntry

    entry = (
        AuditEntry.objects.filter(action="retry", store=store, target=job_id, ok=True)
        .order_by("-id")
        .only("username", "created_at")
        .first()
    )
    if entry is None:
        return None
    return ManualRetry(entry.username, int(entry.created_at.timestamp() * 1000))
