"""The flows pages: the list of flow parents per store, and one flow (counters, its
ancestors, one page of children, nested flows on demand, why it waits)."""

from __future__ import annotations

import secrets

from django.http import HttpResponse
from django.views.decorators.http import require_GET

from mqadmin import forms, services
from mqadmin.queries import flows as queries
from mqadmin.queries.explorer import QueryRefused
from mqadmin.views.common import HtmxHttpRequest, dashboard_view, error_page, page

FLOWS = "mqadmin/flows.html"


@require_GET
@dashboard_view
def flows(request: HtmxHttpRequest) -> HttpResponse:
    """Flow parents of one store, newest first: parked in waiting-children, or settled lately.

    Paged forward by cursor (``cursor`` = the store's, for the chosen state); a
    malformed query string or a cursor of another list answers 400 with the reason.
    """
    form = forms.FlowListForm(request.GET)
    names = services.store_names()
    context: dict[str, object] = {"states": queries.FLOW_LIST_STATES}
    if not form.is_valid():
        context.update(
            store=form["store"].value() or (names[0] if names else "default"),
            state="waiting",
            errors=forms.form_errors(form),
        )
        return page(request, FLOWS, context, partial="parents", status=400)
    store_name = form.cleaned_data.get("store") or (names[0] if names else "default")
    state = form.cleaned_data["state"]
    cursor = form.cleaned_data["cursor"]
    context.update(store=store_name, state=state, cursor=cursor)
    try:
        context["flows"] = queries.flow_list(store_name, state, cursor, limit=queries.FLOWS_PAGE)
    except QueryRefused as exc:
        context["errors"] = [f"{exc.field}: {exc.message}" if exc.field else exc.message]
        return page(request, FLOWS, context, partial="parents", status=400)
    return page(request, FLOWS, context, partial="parents")


@require_GET
@dashboard_view
def flow(request: HtmxHttpRequest, store: str, flow_id: str) -> HttpResponse:
    """A flow parent and one page of its children (``cursor`` = the last child key seen).

    The store pages children forward only (by child key), so "previous" is a trail of
    the earlier pages' cursors in the query string (at most 20; deeper than that the
    trail restarts from the first page).  ``embed=1`` from htmx returns the nested
    block a parent page shows when a child flow is expanded: one level per click,
    never a tree walk.
    """
    form = forms.FlowPageForm(request.GET)
    if not form.is_valid():
        return error_page(request, 400, "Bad flow page request", forms.form_errors(form))
    cursor = form.cleaned_data["cursor"]
    trail = form.cleaned_data["trail"]
    embed = form.cleaned_data["embed"]
    view = queries.flow_view(store, flow_id, cursor, limit=queries.FLOW_PAGE)
    if view is None:
        return error_page(
            request, 404, "No such flow", [f"Store “{store}” has no job with id “{flow_id}”."]
        )
    # The trail of the page after this one: this page's cursor appended ("" = first page).
    next_trail = [*trail, cursor or ""][-forms.MAX_FLOW_TRAIL :]
    previous_cursor = trail[-1] if trail else None
    context = {
        "view": view,
        "job": view.record,
        "store": store,
        "cursor": cursor,
        "next_trail": next_trail,
        "previous_cursor": previous_cursor,
        "previous_trail": trail[:-1],
        "has_previous": cursor is not None,
        # Element ids of nested blocks must not collide with the page's or each other's.
        "uid": secrets.token_hex(4),
    }
    partial = "nested" if embed else "children"
    return page(request, "mqadmin/flow.html", context, partial=partial)
