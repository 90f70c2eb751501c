"""Views of the mqadmin dashboard."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django_htmx.middleware import HtmxDetails

from mqadmin import services


class HtmxHttpRequest(HttpRequest):
    """An ``HttpRequest`` as ``HtmxMiddleware`` leaves it (for type checkers)."""

    htmx: HtmxDetails


@require_GET
@login_required
def home(request: HtmxHttpRequest) -> HttpResponse:
    """The configured stores, the Redis each uses, and their job counts per state.

    An htmx request (the page's periodic refresh) gets only the stores table.
    """
    template = "mqadmin/home.html"
    # Boosted requests want the whole page; only a plain htmx swap wants the partial.
    if request.htmx and not request.htmx.boosted:
        template += "#stores"
    context = {"stores": services.store_overviews(), "states": services.STATES}
    return render(request, template, context)
