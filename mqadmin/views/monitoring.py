"""What monitoring tools read: Prometheus metrics, health probes, per-job-name metrics.

* ``metrics/``: the Prometheus text format (:mod:`mqadmin.prometheus`).  Served to a
  logged-in dashboard user, or to a scraper sending ``Authorization: Bearer <token>``
  when ``settings.MQ_METRICS_TOKEN`` is set; anyone else gets 401.
* ``healthz/``: 200 "ok" for anyone (the process serves requests); no detail.
* ``readyz/``: 200 when every configured store's Redis answers PING and runs a cheap
  read-only script of the store (a Redis ACL may refuse scripts), else 503 saying
  how many did not (no store name, URL or error text: the probe is unauthenticated).
* ``metrics/jobs/``: the dashboard page of runs, failures and run times per job name.
"""

from __future__ import annotations

import hmac
import logging

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from mqadmin import forms, services
from mqadmin import job_metrics as name_metrics
from mqadmin.views.common import HtmxHttpRequest, dashboard_view, error_page, page, secure

logger = logging.getLogger(__name__)


def _bearer_ok(request: HttpRequest) -> bool:
    token = getattr(settings, "MQ_METRICS_TOKEN", None)
    if not token:
        return False
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given:
        return False
    return hmac.compare_digest(given.strip().encode(), str(token).encode())


def _plain(text: str, status: int = 200) -> HttpResponse:
    response = HttpResponse(text, status=status, content_type="text/plain; charset=utf-8")
    return secure(response)


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition of every configured store (dashboard users or the bearer token)."""
    if not (_bearer_ok(request) or request.user.is_authenticated):
        response = _plain(
            "authentication required: log in, or send the metrics bearer token\n", 401
        )
        response["WWW-Authenticate"] = 'Bearer realm="mqadmin metrics"'
        return response
    from prometheus_client import CONTENT_TYPE_LATEST

    from mqadmin.prometheus import exposition

    response = HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)
    return secure(response)


@never_cache
@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """Liveness: the web process answers."""
    return _plain("ok\n")


@never_cache
@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    """Readiness: every configured store's Redis answers PING and runs the store's scripts."""
    stores = services.configured_stores()
    down = 0
    for name, entry in stores.items():
        try:
            client, _ = services.get_client(services.store_url(entry))
            client.ping()
            services.check_store_scripts(name)  # a user the ACL keeps from EVALSHA is not ready
        except Exception as exc:  # any failure means "not ready"; the log says which store
            logger.warning("readyz: store %s unreachable (%s)", name, type(exc).__name__)
            down += 1
    if down:
        return _plain(f"not ready: {down} of {len(stores)} stores unreachable\n", 503)
    return _plain("ready\n")


@require_GET
@dashboard_view
def job_metrics(request: HtmxHttpRequest) -> HttpResponse:
    """Per job name over 1 h / 24 h / 72 h: runs, failures, failure rate, p50/p95/max, a chart."""
    form = name_metrics.JobMetricsForm(request.GET)
    if not form.is_valid():
        return error_page(request, 400, "Bad metrics request", forms.form_errors(form))
    period = form.cleaned_data.get("period") or "1h"
    selected = form.cleaned_data.get("store") or ""
    context = {
        "period": period,
        "period_words": name_metrics.PERIODS[period],
        "periods": list(name_metrics.PERIODS),
        "stores": name_metrics.overview(period, selected or None),
        "selected_store": selected,
    }
    return page(request, "mqadmin/job_metrics.html", context, partial="job-metrics")
