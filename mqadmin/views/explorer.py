"""The job explorer: one store's jobs, filtered, ordered and cursor-paged."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET
from django_htmx.http import HttpResponseClientRedirect

from mqadmin import forms, live, permissions, services
from mqadmin.queries import explorer as queries
from mqadmin.search import Search
from mqadmin.views.common import HtmxHttpRequest, dashboard_view, page, wants_partial

EXPLORER = "mqadmin/jobs.html"


def _default_store() -> str:
    names = services.store_names()
    return names[0] if names else "default"


@require_GET
@dashboard_view
def explorer(request: HtmxHttpRequest) -> HttpResponse:
    """Filtered, ordered, cursor-paged jobs of one store; every page is a permalink.

    A malformed query string answers 400 with the form's messages; a combination
    the store cannot serve (ordering by run time without a queue, a disabled index)
    answers 400 with the reason next to the control that caused it.
    """
    form = forms.JobFilterForm(request.GET, user=request.user)
    store_name = _default_store()
    context = {"form": form, "states": queries.STATES, "order_labels": queries.ORDER_CHOICES}
    if not form.is_valid():
        return page(
            request,
            EXPLORER,
            {
                **context,
                "store": form["store"].value() or store_name,
                "errors": forms.form_errors(form),
            },
            partial="results",
            status=400,
        )
    query = form.to_query(store_name)
    context.update(query=query, store=query.store, meta_pairs=list(query.metadata.items()))
    search: Search = form.cleaned_data.get("q") or Search()
    opens_job = search.only_id and not (query.cursor or query.before)
    if opens_job and queries.exact_job(query.store, search.id_text):
        # An exact id opens the job (the search box doubles as the id box).
        url = reverse("mqadmin:job", args=[query.store, search.id_text])
        return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
    if query.error_text and not query.error:
        messages = permissions.can_view_payload(request.user)
        query, groups = queries.resolve_error_search(query, messages)
        context.update(query=query, error_search=query.error_text, error_messages_searched=messages)
        if not query.error:
            # None or several kinds of failure: list them (each links to its failed jobs).
            context.update(error_matches=groups, search_without_error=search.render(error=False))
            return _full_page(request, context, query)
    try:
        result = queries.explore(query)
    except queries.QueryRefused as exc:
        form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        return page(
            request,
            EXPLORER,
            {**context, "errors": forms.form_errors(form), "refused": exc.message},
            partial="results",
            status=400,
        )
    context["result"] = result
    if query.error:
        context["error_group"] = queries.error_group(query.store, query.error)
    return _full_page(request, context, query)


def _full_page(request: HtmxHttpRequest, context: dict[str, Any], query: Any) -> HttpResponse:
    if not wants_partial(request):
        # Suggestions for the name and queue boxes (full page only: a swap keeps the form).
        context["known_names"] = queries.job_names(query.store)
        context["known_queues"] = queries.queue_names(query.store)
        result = context.get("result")
        if result is not None and permissions.can_view_payload(request.user):
            # Payload paths for the search box, from the newest rows this page read (of the
            # name filtered on, if any): no further store call.
            context["search_paths"] = queries.search_suggestions(result.items)
        # The whole store: a filter changed in place (an htmx swap) keeps this stream.
        context["events_url"] = live.events_url([query.store])
    return page(request, EXPLORER, context, partial="results")
