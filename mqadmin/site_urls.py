"""Root URLconf of this repository's development project: the app at the site root,
plus Django's admin and the login pages the app sends anonymous visitors to."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("", include("mqadmin.urls")),
    # login/, logout/, password_change/ ... with templates under templates/registration/.
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
]
