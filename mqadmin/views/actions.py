"""Every change the dashboard can make: POST + CSRF, a permission per verb, an audit entry.

Every verb is declared once in :mod:`mqadmin.actions`; the three URL views share
one shape (:func:`act`).  Each action binds a form (which validates the store, the
target and the ``next`` path), checks the verb's permission and the read-only
switch, runs the verb's store call, records an :class:`~mqadmin.models.AuditEntry` (also for refusals),
reports through Django messages and redirects back (post/redirect/get).
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from mqadmin import actions, forms, permissions, services
from mqadmin.models import AuditEntry
from mqadmin.views.common import dashboard_view, denied, error_page


def act(request: HttpRequest, kind: str, name: str) -> HttpResponse:
    """Run the registry's verb ``name`` of target ``kind``: every action view is this one.

    Binds the kind's form (plus the verb's extra fields), refuses without the
    permission (audited), runs the verb's store call, audits the outcome, reports it
    and redirects: to ``next``, else the target's page, else, when the verb removed
    the target, to ``back`` or the list the target was in.
    """
    verb = actions.find(kind, name)
    if verb is None:
        raise Http404(f"unknown {kind} action {name!r}")
    form = forms.action_form_class(verb)(request.POST)
    if not form.is_valid():
        title = verb.target.invalid_title.format(verb=verb.name)
        return error_page(request, 400, title, forms.form_errors(form))
    store_name = form.cleaned_data["store"]
    target = form.cleaned_data[verb.target.field]
    values = {field: form.cleaned_data[field] for field in verb.fields}
    reason = permissions.verb_denial(request.user, verb)
    if reason:
        return _refuse(request, verb.permission_key, store_name, target, reason)
    job_store = services.open_store(store_name)
    with services.reaching(store_name):
        result = verb.perform(job_store, target, store_name=store_name, values=values)
    AuditEntry.record(
        request.user,
        verb.key,
        store=store_name,
        target=target,
        params={**values, **result.params},
        result=result.message,
        ok=result.ok,
    )
    own_page = verb.target.page(store_name, target)
    next_url = form.cleaned_data["next"]
    if verb.removes and result.ok:
        fallback = form.cleaned_data.get("back") or verb.target.gone_page(store_name)
        if next_url == own_page:
            next_url = ""  # the target's own page is gone
    else:
        fallback = own_page
    message: str = result.message
    job_id = result.params.get("job_id")
    if result.ok and isinstance(job_id, str):
        # The job a verb enqueued (a triggered schedule's run) is one click away.
        url = reverse("mqadmin:job", args=[store_name, job_id])
        message = format_html('{} <a href="{}">Open it</a>', result.message, url)
    return _done(request, result.ok, message, fallback, next_url)


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
    """A job verb of the registry (retry, cancel, promote, remove) on one job."""
    return act(request, actions.JOB.kind, verb)


@require_POST
@dashboard_view
def queue_action(request: HttpRequest, verb: str) -> HttpResponse:
    """A queue verb of the registry (pause, resume) on one queue of one store."""
    return act(request, actions.QUEUE.kind, verb)


@require_POST
@dashboard_view
def schedule_action(request: HttpRequest, verb: str) -> HttpResponse:
    """A schedule verb of the registry (trigger now, pause, resume, remove) on one schedule."""
    return act(request, actions.SCHEDULE.kind, verb)


@require_POST
@dashboard_view
def worker_action(request: HttpRequest, verb: str) -> HttpResponse:
    """A worker verb of the registry (quiet, resume, stop) on one live worker of one store."""
    return act(request, actions.WORKER.kind, verb)
