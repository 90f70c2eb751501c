"""Login attempts are throttled (django-axes in the development project; issue 23).

After ``AXES_FAILURE_LIMIT`` wrong passwords for one username from one address the next
attempt is refused, even with the right password, until the cool-off passes.
"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "pw-for-tests-1"


def attempt(client: Client, password: str) -> int:
    response = client.post(
        "/accounts/login/", {"username": "ops", "password": password, "next": "/"}
    )
    return response.status_code


def test_the_attempt_after_the_limit_is_refused(django_user_model: type[User]) -> None:
    django_user_model.objects.create_user(username="ops", password=PASSWORD)
    client = Client()
    limit = settings.AXES_FAILURE_LIMIT
    assert 1 <= limit <= 10
    for _ in range(limit - 1):
        assert attempt(client, "wrong") == 200  # the form again, with its error
    assert attempt(client, "wrong") == 429  # the limit-th failure locks out
    # Locked out: even the right password is refused now.
    assert attempt(client, PASSWORD) == 429
    assert Client().get("/").status_code == 302


def test_a_success_resets_the_count(django_user_model: type[User]) -> None:
    django_user_model.objects.create_user(username="ops", password=PASSWORD)
    client = Client()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert attempt(client, "wrong") == 200
    assert attempt(client, PASSWORD) == 302
    client.logout()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert attempt(client, "wrong") == 200
    assert attempt(client, PASSWORD) == 302
