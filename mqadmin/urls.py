"""URL configuration of the mqadmin project."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from mqadmin import views

urlpatterns = [
    path("", views.home, name="home"),
    # login/, logout/, password_change/ ... with templates under templates/registration/.
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
]
