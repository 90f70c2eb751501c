"""The job explorer: one store's jobs, filtered, ordered and cursor-paged."""

from __future__ import annotations

from django.http import HttpResponse
from django.views.decorators.http import require_GET

from mqadmin import forms, live, services
from mqadmin.queries import explorer as queries
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
    if not wants_partial(request):
        # Suggestions for the name and queue boxes (full page only: a swap keeps the form).
        context["known_names"] = queries.job_names(query.store)
        context["known_queues"] = queries.queue_names(query.store)
        # The whole store: a filter changed in place (an htmx swap) keeps this stream.
        context["events_url"] = live.events_url([query.store])
    return page(request, EXPLORER, context, partial="results")
