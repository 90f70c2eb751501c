"""Every change the dashboard can make: POST + CSRF, a permission per verb, an audit entry.

Each action binds a form (which validates the store, the target and the ``next``
path), checks the verb's permission and the read-only switch, runs one store
operation, records an :class:`~mqadmin.models.AuditEntry` (also for refusals),
reports through Django messages and redirects back (post/redirect/get).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from mqadmin import dashboard, forms, permissions
from mqadmin.models import AuditEntry
from mqadmin.views.common import dashboard_view, denied, error_page

JOB_VERBS = ("retry", "cancel", "promote", "remove")
QUEUE_VERBS = ("pause", "resume")
#: Pausing and resuming need the permission to remove a schedule (no separate grant).
SCHEDULE_VERBS = {
    "trigger": "trigger_schedule",
    "remove": "remove_schedule",
    "pause": "remove_schedule",
    "resume": "remove_schedule",
}


def _refuse(
    request: HttpRequest, action: str, store: str, target: str, reason: str
) -> HttpResponse:
    AuditEntry.record(
        request.user, action, store=store, target=target, result=f"refused: {reason}", ok=False
    )
    return denied(request, reason)


def _done(
    request: HttpRequest, ok: bool, message: str, fallback: str, next_url: str
) -> HttpResponse:
    (messages.success if ok else messages.error)(request, message)
    return redirect(next_url or fallback)


@require_POST
@dashboard_view
def job_action(request: HttpRequest, verb: str) -> HttpResponse:
    """Retry, cancel, promote or remove one job."""
    if verb not in JOB_VERBS:
        raise Http404(f"unknown job action {verb!r}")
    form = forms.JobActionForm(request.POST)
    if not form.is_valid():
        return error_page(request, 400, f"Cannot {verb} that job", forms.form_errors(form))
    store_name = form.cleaned_data["store"]
    job_id = form.cleaned_data["job_id"]
    reason = permissions.action_denial(request.user, verb)
    if reason:
        return _refuse(request, verb, store_name, job_id, reason)
    job_store = dashboard.open_store(store_name)
    with dashboard.reaching(store_name):
        result = dashboard.run_job_action(job_store, verb, job_id)
    AuditEntry.record(
        request.user, verb, store=store_name, target=job_id, result=result.message, ok=result.ok
    )
    fallback = (
        form.cleaned_data["back"] or reverse("mqadmin:jobs") + f"?store={store_name}"
        if verb == "remove" and result.ok
        else reverse("mqadmin:job", args=[store_name, job_id])
    )
    next_url = form.cleaned_data["next"]
    if (
        verb == "remove"
        and result.ok
        and next_url == reverse("mqadmin:job", args=[store_name, job_id])
    ):
        next_url = ""  # the job's own page is gone
    return _done(request, result.ok, result.message, fallback, next_url)


@require_POST
@dashboard_view
def queue_action(request: HttpRequest, verb: str) -> HttpResponse:
    """Pause or resume one queue of one store."""
    if verb not in QUEUE_VERBS:
        raise Http404(f"unknown queue action {verb!r}")
    form = forms.QueueActionForm(request.POST)
    if not form.is_valid():
        return error_page(request, 400, f"Cannot {verb} that queue", forms.form_errors(form))
    store_name = form.cleaned_data["store"]
    queue = form.cleaned_data["queue"]
    reason = permissions.action_denial(request.user, verb)
    if reason:
        return _refuse(request, verb, store_name, queue, reason)
    job_store = dashboard.open_store(store_name)
    with dashboard.reaching(store_name):
        if verb == "pause":
            job_store.pause(queue)
            message = f"Paused queue “{queue}” of {store_name}: workers stop claiming from it."
        else:
            job_store.resume(queue)
            message = f"Resumed queue “{queue}” of {store_name}."
    AuditEntry.record(request.user, verb, store=store_name, target=queue, result=message)
    return _done(request, True, message, reverse("mqadmin:home"), form.cleaned_data["next"])


@require_POST
@dashboard_view
def schedule_action(request: HttpRequest, verb: str) -> HttpResponse:
    """Trigger a schedule now (one extra occurrence), pause, resume or remove it."""
    if verb not in SCHEDULE_VERBS:
        raise Http404(f"unknown schedule action {verb!r}")
    action = SCHEDULE_VERBS[verb]
    form = forms.ScheduleActionForm(request.POST)
    if not form.is_valid():
        return error_page(request, 400, "Cannot do that to the schedule", forms.form_errors(form))
    store_name = form.cleaned_data["store"]
    key = form.cleaned_data["key"]
    reason = permissions.action_denial(request.user, action)
    if reason:
        return _refuse(request, action, store_name, key, reason)
    from store.errors import JobNotFoundError

    job_store = dashboard.open_store(store_name)
    params: dict[str, Any] = {}
    with dashboard.reaching(store_name):
        if verb == "trigger":
            try:
                job_id = job_store.trigger_schedule(key)
            except JobNotFoundError:
                ok, message = False, f"Cannot trigger “{key}”: no such schedule."
            else:
                ok, message = True, f"Triggered “{key}”: enqueued job {job_id}."
                params["job_id"] = job_id
        elif verb == "pause":
            ok = job_store.pause_schedule(key)
            message = (
                f"Paused schedule “{key}”: it fires again once resumed."
                if ok
                else f"Cannot pause “{key}”: no such schedule."
            )
        elif verb == "resume":
            ok = job_store.resume_schedule(key)
            message = (
                f"Resumed schedule “{key}” from its next occurrence."
                if ok
                else f"Cannot resume “{key}”: it is not paused."
            )
        else:
            ok = bool(job_store.remove_schedule(key))
            message = (
                f"Removed schedule “{key}”."
                if ok
                else f"Cannot remove “{key}”: no such schedule (already removed?)."
            )
    audit_action = f"{verb}_schedule" if verb in ("pause", "resume") else action
    AuditEntry.record(
        request.user,
        audit_action,
        store=store_name,
        target=key,
        params=params,
        result=message,
        ok=ok,
    )
    return _done(request, ok, message, reverse("mqadmin:schedules"), form.cleaned_data["next"])
