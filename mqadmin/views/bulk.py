"""Bulk actions: on ticked rows, or on everything matching a filter (preview first).

"All matching this filter" never runs blind: the preview shows how many jobs match
(exact from counters when the filter allows, else counted up to a cap), per state what
the verb will do to them, and a sample; the run then works through the matches in
chunks of single store operations, at most ``mqadmin.queries.bulk.BULK_MAX_ITEMS`` per
request, with a per-item result and a "continue" button carrying the cursor where it
stopped.  A verb that applies to none of the listed states is refused (400).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from mqadmin import actions, forms, permissions, services
from mqadmin.models import AuditEntry
from mqadmin.queries import bulk as queries
from mqadmin.queries import explorer as explorer_queries
from mqadmin.queries.explorer import QueryRefused
from mqadmin.views.common import dashboard_view, denied, error_page, page

RESULT = "mqadmin/bulk.html"
#: Ids written into one audit entry's params (the rest are counted).
AUDIT_IDS = 100
#: Failed items (id and reason) kept per bulk request for its result page.
AUDIT_FAILED = 500


def _refuse(request: HttpRequest, verb: str, store: str, target: str, reason: str) -> HttpResponse:
    AuditEntry.record(
        request.user,
        f"bulk_{verb}",
        store=store,
        target=target,
        result=f"refused: {reason}",
        ok=False,
    )
    return denied(request, reason)


def _removes(verb: str) -> bool:
    """The verb leaves no job to link to (a past run's verb may have left the registry)."""
    spec = actions.find(actions.JOB.kind, verb)
    return spec is not None and spec.removes


def _summary(verb: str, succeeded: int, failed: int) -> str:
    return f"{verb}: {succeeded:,} succeeded, {failed:,} failed"


@require_POST
@dashboard_view
def bulk_selected(request: HttpRequest) -> HttpResponse:
    """Apply a verb to the rows ticked on an explorer page."""
    form = forms.BulkSelectedForm(request.POST)
    if not form.is_valid():
        return error_page(request, 400, "Cannot run that bulk action", forms.form_errors(form))
    store_name = form.cleaned_data["store"]
    verb = form.cleaned_data["verb"]
    ids: list[str] = form.cleaned_data["ids"]
    target = f"{len(ids)} selected jobs"
    reason = permissions.bulk_denial(request.user, verb)
    if reason:
        return _refuse(request, verb, store_name, target, reason)
    spec = _verb(verb)
    refusal = queries.verb_refusal(spec, queries.selected_states(store_name, ids) or None)
    if refusal:
        return error_page(request, 400, "Cannot run that bulk action", [refusal])
    items = queries.bulk_ids(store_name, verb, ids)
    succeeded = sum(1 for item in items if item.ok)
    AuditEntry.record(
        request.user,
        f"bulk_{verb}",
        store=store_name,
        target=target,
        params={"ids": ids[:AUDIT_IDS], "count": len(ids)},
        result=_summary(verb, succeeded, len(items) - succeeded),
        ok=succeeded == len(items),
    )
    run = queries.BulkRun(items, None, 0)
    context: dict[str, Any] = {
        "mode": "selected",
        "verb": verb,
        "removes": _removes(verb),
        "store": store_name,
        "run": run,
        "back": form.cleaned_data["next"],
    }
    return page(request, RESULT, context)


def _verb(name: str) -> actions.Verb:
    spec = actions.find(actions.JOB.kind, name)
    assert spec is not None, name  # the form's choices are the registry's bulk verbs
    return spec


def _filter_form(data: Any, user: Any = None) -> forms.BulkFilterForm:
    return forms.BulkFilterForm(data, user=user)


@require_GET
@dashboard_view
def bulk_preview(request: HttpRequest) -> HttpResponse:
    """How many jobs the filter matches, what the verb does to them per state, and ten of
    them, before anything runs.  Without a verb it says what each offered verb would do."""
    form = _filter_form(request.GET, request.user)
    if not form.is_valid():
        return error_page(request, 400, "Cannot preview that bulk action", forms.form_errors(form))
    query = form.to_query(services.store_names()[0])
    verb = form.cleaned_data["verb"]
    reason = (
        permissions.bulk_denial(request.user, verb)
        if verb
        else permissions.action_denial(request.user, actions.BULK)
    )
    if reason:
        return denied(request, reason)
    can_view_payload = permissions.can_view_payload(request.user)
    # An error: search acts on its one kind of failure (refused when it names several).
    query, _ = explorer_queries.resolve_error_search(query, can_view_payload)
    states = queries.query_states(query)
    refusal = queries.verb_refusal(_verb(verb), states) if verb else None
    if refusal:
        return error_page(request, 400, "Cannot preview that bulk action", [refusal])
    try:
        preview = queries.bulk_preview(query)
    except QueryRefused as exc:
        return error_page(request, 400, "The store cannot serve that filter", [exc.message])
    can = permissions.allowed_actions(request.user)
    offered = queries.offered_verbs(states, can)
    chosen = queries.outcomes(_verb(verb), preview.by_state) if verb else None
    context = {
        "mode": "preview",
        "verb": verb,
        "chosen": chosen,
        # What the other verbs offered would do (links to their previews): those that
        # would change at least one of the jobs counted.
        "others": [
            outcome
            for spec in offered
            if spec.name != verb and (outcome := queries.outcomes(spec, preview.by_state)).acted
        ],
        "store": query.store,
        "query": query,
        "preview": preview,
        "error_group": (
            explorer_queries.error_group(query.store, query.error) if query.error else None
        ),
        "max_items": queries.BULK_MAX_ITEMS,
        "chunk": queries.BULK_CHUNK,
    }
    return page(request, RESULT, context)


@require_POST
@dashboard_view
def bulk_run(request: HttpRequest) -> HttpResponse:
    """Run the verb over the filter's matches (from ``resume`` on), one bounded request at a time."""
    form = _filter_form(request.POST, request.user)
    if not form.is_valid():
        return error_page(request, 400, "Cannot run that bulk action", forms.form_errors(form))
    query = form.to_query(services.store_names()[0])
    verb = form.cleaned_data["verb"]
    if not verb:
        return error_page(
            request, 400, "Cannot run that bulk action", ["Choose the action to run (verb)."]
        )
    resume = form.cleaned_data.get("resume")
    target = query.describe()
    reason = permissions.bulk_denial(request.user, verb)
    if reason:
        return _refuse(request, verb, query.store, target, reason)
    # An error: search acts on its one kind of failure (refused when it names several).
    query, _ = explorer_queries.resolve_error_search(
        query, permissions.can_view_payload(request.user)
    )
    refusal = queries.verb_refusal(_verb(verb), queries.query_states(query))
    if refusal:
        return error_page(request, 400, "Cannot run that bulk action", [refusal])
    try:
        run = queries.bulk_filter(query, verb, resume)
    except QueryRefused as exc:
        return error_page(request, 400, "The store cannot serve that filter", [exc.message])
    chain = form.cleaned_data.get("run")
    previous = AuditEntry.objects.filter(id=chain, action=f"bulk_{verb}").first() if chain else None
    done_before = 0
    if previous is not None:
        done_before = int(previous.params.get("done_before", 0)) + int(
            previous.params.get("count", 0)
        )
    entry = AuditEntry.record(
        request.user,
        f"bulk_{verb}",
        store=query.store,
        target=target,
        params={
            "filter": target,
            "query": forms.query_string(query),
            "verb": verb,
            "resumed_from": resume,
            "stopped_at": run.resume,
            "count": len(run.items),
            "succeeded": run.succeeded,
            "scanned": run.scanned,
            "ids": [item.job_id for item in run.items[:AUDIT_IDS]],
            "failed": [[item.job_id, item.message] for item in run.failed[:AUDIT_FAILED]],
            "failed_count": len(run.failed),
            "done_before": done_before,
            "expected": form.cleaned_data.get("expected"),
        },
        result=_summary(verb, run.succeeded, len(run.failed)),
        ok=not run.failed,
    )
    # Post/redirect/get: the results are a page of their own (reload-safe, linkable).
    return redirect(reverse("mqadmin:bulk_result", args=[entry.id]))


@require_GET
@dashboard_view
def bulk_result(request: HttpRequest, entry_id: int) -> HttpResponse:
    """The outcome of one bulk request: counts, progress over the whole run, what failed."""
    entry = AuditEntry.objects.filter(id=entry_id, action__startswith="bulk_").first()
    if entry is None or "query" not in entry.params:
        return error_page(request, 404, "No such bulk run", [f"No bulk run #{entry_id}."])
    verb = str(entry.params.get("verb", entry.action.removeprefix("bulk_")))
    reason = permissions.bulk_denial(request.user, verb)
    if reason:
        return denied(request, reason)
    form = _filter_form(QueryDict(str(entry.params["query"])))
    query = form.to_query(entry.store) if form.is_valid() else None
    params = entry.params
    handled = int(params.get("done_before", 0)) + int(params.get("count", 0))
    expected = params.get("expected")
    items = [queries.BulkItem(job_id, False, message) for job_id, message in params["failed"]]
    context = {
        "mode": "result",
        "verb": verb,
        "removes": _removes(verb),
        "store": entry.store,
        "query": query,
        "entry": entry,
        "succeeded": int(params.get("succeeded", 0)),
        "failed_items": items,
        "failed_count": int(params.get("failed_count", len(items))),
        "count": int(params.get("count", 0)),
        "scanned": int(params.get("scanned", 0)),
        "resume": params.get("stopped_at"),
        "handled": handled,
        "expected": int(expected) if expected else None,
        "percent": min(100, round(handled * 100 / int(expected))) if expected else None,
        "max_items": queries.BULK_MAX_ITEMS,
        "ok_ids": [i for i in params.get("ids", []) if i not in {f[0] for f in params["failed"]}],
    }
    return page(request, RESULT, context)
