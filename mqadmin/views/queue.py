"""The queue page: one queue's counts, limits (and the form to change them) and job groups,
and its drain and clean (previewed, then run in bounded requests with "continue")."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from mqadmin import forms, permissions
from mqadmin.models import AuditEntry
from mqadmin.queries import bulk as bulk_queries
from mqadmin.queries import queue as queries
from mqadmin.queries.explorer import QueryRefused
from mqadmin.views.common import HtmxHttpRequest, dashboard_view, denied, error_page, page

SWEEP = "mqadmin/queue_sweep.html"
#: Removed ids written into one audit entry's params (the rest are counted).
AUDIT_IDS = 100
#: Skipped jobs (id and reason) kept per request for its result page.
AUDIT_SKIPPED = 500


@require_GET
@dashboard_view
def queue(request: HtmxHttpRequest, store: str, queue: str) -> HttpResponse:
    """Counts per state, pause state, limits and the busiest job groups of one queue.

    The groups section refreshes itself every 5 s (htmx partial ``groups``); the limits
    form stays outside it, so a refresh never undoes what is being typed.
    """
    problems = forms.queue_name_problems(queue)
    if problems:
        return error_page(request, 400, "Bad queue name", problems)
    view = queries.queue_view(store, queue)
    context = {
        "view": view,
        "store": store,
        "sweep_states": queries.SWEEP_STATES,
    }
    return page(request, "mqadmin/queue.html", context, partial="groups")


def _sweep(form: forms.QueueSweepForm, finished_before: int | None) -> queries.Sweep:
    data = form.cleaned_data
    return queries.Sweep(
        store=data["store"],
        queue=data["queue"],
        kind=data["sweep"],
        states=queries.sweep_states(data["sweep"], data["state"]),
        finished_before=finished_before,
    )


def _title(form: forms.QueueSweepForm) -> str:
    return f"Cannot {form.data.get('sweep') or 'sweep'} that queue"


@require_GET
@dashboard_view
def queue_sweep_preview(request: HttpRequest) -> HttpResponse:
    """How many jobs a drain or clean removes, per state, and a sample, before it runs."""
    form = forms.QueueSweepForm(request.GET)
    if not form.is_valid():
        return error_page(request, 400, _title(form), forms.form_errors(form))
    kind = form.cleaned_data["sweep"]
    reason = permissions.action_denial(request.user, queries.SWEEP_PERMISSIONS[kind])
    if reason:
        return denied(request, reason)
    older_than = form.cleaned_data.get("older_than")
    cutoff = form.cleaned_data.get("finished_before")
    if cutoff is None and older_than is not None:
        # Fixed here, so the run and its "continue" requests remove the same jobs.
        cutoff = queries.store_now(form.cleaned_data["store"]) - older_than
    sweep = _sweep(form, cutoff)
    try:
        result = queries.sweep_preview(sweep)
    except QueryRefused as exc:
        return error_page(request, 400, _title(form), [exc.message])
    context = {
        "mode": "preview",
        "sweep": sweep,
        "store": sweep.store,
        "result": result,
        "preview": result.preview,
        "max_items": bulk_queries.BULK_MAX_ITEMS,
        "chunk": bulk_queries.BULK_CHUNK,
    }
    return page(request, SWEEP, context)


@require_POST
@dashboard_view
def queue_sweep_run(request: HttpRequest) -> HttpResponse:
    """Remove the sweep's jobs (from ``resume`` on), one bounded request at a time; audited."""
    form = forms.QueueSweepForm(request.POST)
    if not form.is_valid():
        return error_page(request, 400, _title(form), forms.form_errors(form))
    data = form.cleaned_data
    kind = data["sweep"]
    action = queries.SWEEP_PERMISSIONS[kind]
    sweep = _sweep(form, data.get("finished_before"))
    reason = permissions.action_denial(request.user, action)
    if reason:
        AuditEntry.record(
            request.user,
            action,
            store=sweep.store,
            target=sweep.queue,
            params={"states": list(sweep.states)},
            result=f"refused: {reason}",
            ok=False,
        )
        return denied(request, reason)
    resume = data.get("resume")
    try:
        run = queries.sweep_run(sweep, resume)
    except QueryRefused as exc:
        return error_page(request, 400, _title(form), [exc.message])
    chain = data.get("run")
    previous = AuditEntry.objects.filter(id=chain, action=action).first() if chain else None
    done_before = 0
    if previous is not None:
        done_before = int(previous.params.get("done_before", 0)) + int(
            previous.params.get("count", 0)
        )
    skipped = run.failed
    entry = AuditEntry.record(
        request.user,
        action,
        store=sweep.store,
        target=sweep.queue,
        params={
            "sweep": kind,
            "queue": sweep.queue,
            "states": list(sweep.states),
            "finished_before": sweep.finished_before,
            "resumed_from": resume,
            "stopped_at": run.resume,
            "count": len(run.items),
            "removed": run.succeeded,
            "scanned": run.scanned,
            "ids": [item.job_id for item in run.items if item.ok][:AUDIT_IDS],
            "skipped": [[item.job_id, item.message] for item in skipped[:AUDIT_SKIPPED]],
            "skipped_count": len(skipped),
            "done_before": done_before,
            "expected": data.get("expected"),
        },
        result=f"{kind}: {run.succeeded:,} removed, {len(skipped):,} skipped",
        ok=True,
    )
    # Post/redirect/get: the results are a page of their own (reload-safe, linkable).
    return redirect(reverse("mqadmin:queue_sweep_result", args=[entry.id]))


@require_GET
@dashboard_view
def queue_sweep_result(request: HttpRequest, entry_id: int) -> HttpResponse:
    """The outcome of one request of a drain or clean: counts, progress, what was skipped."""
    entry = AuditEntry.objects.filter(
        id=entry_id, action__in=queries.SWEEP_PERMISSIONS.values()
    ).first()
    if entry is None or "sweep" not in entry.params:
        return error_page(request, 404, "No such drain or clean", [f"No run #{entry_id}."])
    params: dict[str, Any] = entry.params
    kind = str(params["sweep"])
    reason = permissions.action_denial(request.user, queries.SWEEP_PERMISSIONS[kind])
    if reason:
        return denied(request, reason)
    sweep = queries.Sweep(
        store=entry.store,
        queue=str(params["queue"]),
        kind=kind,
        states=tuple(params["states"]),
        finished_before=params.get("finished_before"),
    )
    handled = int(params.get("done_before", 0)) + int(params.get("count", 0))
    expected = params.get("expected")
    context = {
        "mode": "result",
        "sweep": sweep,
        "store": entry.store,
        "entry": entry,
        "removed": int(params.get("removed", 0)),
        "skipped": [bulk_queries.BulkItem(i, False, m) for i, m in params["skipped"]],
        "skipped_count": int(params.get("skipped_count", 0)),
        "count": int(params.get("count", 0)),
        "scanned": int(params.get("scanned", 0)),
        "resume": params.get("stopped_at"),
        "handled": handled,
        "expected": int(expected) if expected else None,
        "percent": min(100, round(handled * 100 / int(expected))) if expected else None,
        "removed_ids": params.get("ids", []),
        "max_items": bulk_queries.BULK_MAX_ITEMS,
    }
    return page(request, SWEEP, context)
