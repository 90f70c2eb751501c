"""``ContentSecurityPolicyMiddleware``: the dashboard's CSP on every page of a site.

The app's own views set their policy themselves (``views.common.secure``); this
middleware gives every other response (the login page, Django's admin, anything
else the project serves) the same strict policy, unless the response already has
one.  Add it to ``MIDDLEWARE`` of a project that wants that (the development
project does); ``MQ_CONTENT_SECURITY_POLICY`` replaces the policy.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        from mqadmin.views.common import CONTENT_SECURITY_POLICY

        self.get_response = get_response
        self.policy = getattr(settings, "MQ_CONTENT_SECURITY_POLICY", None) or (
            CONTENT_SECURITY_POLICY
        )

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = self.policy
        return response
