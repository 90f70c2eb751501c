"""What monitoring tools read: Prometheus metrics, health probes, per-job-name metrics.

* ``metrics/``: the Prometheus text format (:mod:`mqadmin.prometheus`).  Served to a
  logged-in dashboard user, or to a scraper sending ``Authorization: Bearer <token>``
  when ``settings.MQ_METRICS_TOKEN`` is set; anyone else gets 401.
* ``healthz/``: 200 "ok" for anyone (the process serves requests); no detail.
* ``readyz/``: 200 when every configured store passes every check of
  :data:`READINESS_CHECKS` (its Redis answers PING, and the store runs one cheap read-only script: a Redis ACL may refuse scripts), else 503 saying how many did
  not (no store name, URL or error text: the probe is unauthenticated; the log names
  them).  Stores are checked concurrently over short-timeout probe clients that never
  retry, so the answer comes within :data:`READYZ_DEADLINE_S` whatever Redis does (down,
  frozen, unreachable): a check still running then counts as failed.
* ``metrics/jobs/``: the dashboard page of runs, failures and run times per job name.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any

from django import forms as django_forms
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from mqadmin import forms, services
from mqadmin.queries import metrics as name_metrics
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


#: /readyz/ answers within this many seconds, whatever the stores' Redis servers do.
READYZ_DEADLINE_S = 1.5

#: A readiness check: given the store's name and a probe client of its Redis (short
#: timeouts, no retries: :func:`mqadmin.services.probe_client`), return when the store
#: is ready, raise anything when it is not.
ReadinessCheck = Callable[[str, Any], None]


def ping_check(name: str, client: Any) -> None:
    """The store's Redis answers PING."""
    client.ping()


#: What /readyz/ asks of every store, in this order (all stores at once, each store's
#: checks one after another, all within :data:`READYZ_DEADLINE_S`).
def scripts_check(name: str, client: Any) -> None:
    """The store runs a cheap read-only script (a user the ACL keeps from EVALSHA is not ready)."""
    services.check_store_scripts(name)


READINESS_CHECKS: list[ReadinessCheck] = [ping_check, scripts_check]


def _store_ready(name: str, entry: dict[str, Any]) -> None:
    client = services.probe_client(entry)
    for check in READINESS_CHECKS:
        check(name, client)


@never_cache
@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    """Readiness: every configured store passes :data:`READINESS_CHECKS`, checked concurrently."""
    stores = services.configured_stores()
    started = time.monotonic()
    pool = ThreadPoolExecutor(max_workers=len(stores), thread_name_prefix="mq-readyz")
    try:
        futures: dict[str, Future[None]] = {
            name: pool.submit(_store_ready, name, entry) for name, entry in stores.items()
        }
        wait_futures(futures.values(), timeout=READYZ_DEADLINE_S)
    finally:
        # Never wait for a check still blocked on Redis: it ends by its own timeouts.
        pool.shutdown(wait=False, cancel_futures=True)
    down = 0
    for name, future in futures.items():
        exc = future.exception() if future.done() else None
        if not future.done():
            reason = f"no answer within {READYZ_DEADLINE_S} s"
        elif exc is not None:
            url = services.store_url(stores[name])
            reason = f"{type(exc).__name__}: {services.public_error(exc, url)}"
        else:
            continue
        # Any failure means "not ready"; only the log says which store and why.
        logger.warning("readyz: store %s not ready (%s)", name, reason)
        down += 1
    logger.debug("readyz: %d store(s) checked in %.3f s", len(stores), time.monotonic() - started)
    if down:
        return _plain(f"not ready: {down} of {len(stores)} stores unreachable\n", 503)
    return _plain("ready\n")


class JobMetricsForm(django_forms.Form):
    store = forms.StoreField(required=False)
    period = django_forms.ChoiceField(
        required=False,
        choices=list(name_metrics.PERIODS.items()),
        error_messages={"invalid_choice": "“%(value)s” is not a period (use 1h, 24h or 72h)."},
    )


@require_GET
@dashboard_view
def job_metrics(request: HtmxHttpRequest) -> HttpResponse:
    """Per job name over 1 h / 24 h / 72 h: runs, failures, failure rate, p50/p95/max, a chart."""
    form = JobMetricsForm(request.GET)
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
