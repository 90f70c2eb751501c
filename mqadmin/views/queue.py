"""The queue page: one queue's counts, limits (and the form to change them) and job groups."""

from __future__ import annotations

from django.http import HttpResponse
from django.views.decorators.http import require_GET

from mqadmin import forms
from mqadmin.queries import queue as queries
from mqadmin.views.common import HtmxHttpRequest, dashboard_view, error_page, page


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
    return page(request, "mqadmin/queue.html", {"view": view, "store": store}, partial="groups")
