"""The host's URLconf: its own pages, its admin, and mqadmin mounted under ops/mq/."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path


def landing(request: HttpRequest) -> HttpResponse:
    return HttpResponse("host landing page")


urlpatterns = [
    path("", landing, name="home"),
    path("members/", include("tests.hostproject.members.urls")),
    path("backoffice/", admin.site.urls),
    path("ops/mq/", include("mqadmin.urls")),
]
