"""The host's sign-in page (its LOGIN_URL is the name ``members:sign-in``)."""

from __future__ import annotations

from django.contrib.auth.views import LoginView
from django.urls import path

app_name = "members"

urlpatterns = [
    path("sign-in/", LoginView.as_view(template_name="members/sign_in.html"), name="sign-in"),
]
