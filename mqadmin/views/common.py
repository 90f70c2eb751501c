"""What every dashboard view shares: login, error pages, htmx partials, the CSP header.

* :func:`dashboard_view` wraps a view: anonymous users go to the login page (htmx
  requests get an ``HX-Redirect`` instead of a login form swapped into a table), a
  store that cannot be reached becomes a 503 page naming it, and an unknown store
  name in a URL a 404.
* :func:`page` renders a page, or only its named partial when htmx asks for a swap.
* Every response of the dashboard carries a strict Content-Security-Policy: no
  inline scripts or styles anywhere, so an escaping slip cannot run code.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, QueryDict
from django.http.response import HttpResponseBase
from django.shortcuts import render, resolve_url
from django_htmx.middleware import HtmxDetails

from mqadmin import permissions, services

logger = logging.getLogger(__name__)

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)

View = Callable[..., HttpResponse]


class HtmxHttpRequest(HttpRequest):
    """An ``HttpRequest`` as ``HtmxMiddleware`` leaves it (for type checkers)."""

    htmx: HtmxDetails


def wants_partial(request: HttpRequest) -> bool:
    """An htmx swap (not a boosted navigation, not a history restore) wants only a fragment."""
    htmx = getattr(request, "htmx", None)
    if not htmx:
        return False
    return not htmx.boosted and not htmx.history_restore_request


def base_context(request: HttpRequest) -> dict[str, Any]:
    user = request.user
    return {
        "can": permissions.allowed_actions(user),
        "read_only": permissions.read_only(),
        "can_view_payload": permissions.can_view_payload(user),
        "can_view_audit": permissions.can_view_audit(user),
        "hidden_value": permissions.HIDDEN_VALUE,
        "store_names": services.store_names(),
    }


R = TypeVar("R", bound=HttpResponseBase)


def secure(response: R) -> R:
    response["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    return response


def page(
    request: HttpRequest,
    template: str,
    context: dict[str, Any],
    *,
    partial: str | None = None,
    status: int = 200,
) -> HttpResponse:
    """Render ``template`` (or its ``partial`` for an htmx swap) with the shared context."""
    name = f"{template}#{partial}" if partial and wants_partial(request) else template
    response = render(request, name, {**base_context(request), **context}, status=status)
    return secure(response)


def error_page(
    request: HttpRequest,
    status: int,
    title: str,
    problems: list[str],
    **extra: Any,
) -> HttpResponse:
    """A small page (or, for htmx, the message block alone) explaining what went wrong."""
    return page(
        request,
        "mqadmin/error.html",
        {"status": status, "title": title, "problems": problems, **extra},
        partial="error",
        status=status,
    )


def denied(request: HttpRequest, message: str) -> HttpResponse:
    return error_page(request, 403, "Not allowed", [message])


def dashboard_view(view: View) -> View:
    """Login required; store trouble and unknown stores become friendly pages."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return login_redirect(request)
        try:
            return view(request, *args, **kwargs)
        except services.StoreUnavailable as exc:
            return error_page(
                request,
                503,
                f"Store “{exc.store}” is unavailable",
                [
                    exc.message,
                    "Check that its Redis is running and reachable (MQ_STORES / MQ_REDIS_URL), "
                    "then reload this page.",
                ],
                store=exc.store,
            )
        except services.UnknownStore as exc:
            return error_page(
                request,
                404,
                "No such store",
                [
                    f"There is no store named “{exc.args[0]}” in MQ_STORES "
                    f"(configured: {', '.join(services.store_names())})."
                ],
            )

    return wrapper


def login_redirect(request: HttpRequest) -> HttpResponse:
    """Send an anonymous visitor to the login page, coming back here afterwards."""
    # Set by django-htmx's middleware (absent where a host project leaves it out).
    htmx: HtmxDetails | None = getattr(request, "htmx", None)
    if htmx:
        # A polling fragment must not swap the login form into the page: send the
        # whole tab to the login page, returning to the page it was showing.
        current = htmx.current_url_abs_path or request.get_full_path()
        # LOGIN_URL may be a URL name, a path or another site's URL, with a query
        # string of its own (kept): "next" is added to it.
        parts = urlsplit(resolve_url(settings.LOGIN_URL))
        query = QueryDict(parts.query, mutable=True)
        query["next"] = current
        response = HttpResponse(status=401)
        response["HX-Redirect"] = urlunsplit(parts._replace(query=query.urlencode()))
        return response
    return redirect_to_login(request.get_full_path())
