"""The overview: every store × queue × state, paused queues, oldest waiting, throughput."""

from __future__ import annotations

from django.http import HttpResponse
from django.views.decorators.http import require_GET

from mqadmin import live
from mqadmin.queries import overview as queries
from mqadmin.views.common import HtmxHttpRequest, dashboard_view, page, wants_partial


@require_GET
@dashboard_view
def home(request: HtmxHttpRequest) -> HttpResponse:
    """Counts per store, queue and state from the O(1) counters, plus the throughput chart.

    The page polls ``#stores`` every 5 s (paused while the tab is hidden, see app.js);
    that swap does not redraw the chart, which has its own slower refresh.
    """
    partial = wants_partial(request)
    boards = queries.overview(with_chart=not partial)
    context = {
        "boards": boards,
        "stores": [board.overview for board in boards],
        "states": queries.STATES,
    }
    if not partial:
        # One stream for every store the page shows (a browser holds few connections).
        context["events_url"] = live.events_url(
            [board.name for board in boards if not board.overview.error]
        )
    return page(request, "mqadmin/home.html", context, partial="stores")


@require_GET
@dashboard_view
def throughput(request: HtmxHttpRequest) -> HttpResponse:
    """The throughput charts alone (htmx refresh); the whole overview otherwise."""
    partial = wants_partial(request)
    boards = queries.throughput_boards() if partial else queries.overview(with_chart=True)
    return page(
        request,
        "mqadmin/home.html",
        {
            "boards": boards,
            "stores": [board.overview for board in boards],
            "states": queries.STATES,
        },
        partial="throughput",
    )
