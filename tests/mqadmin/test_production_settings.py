"""The development project in production mode, and headers on every page (issue 23, smaller items).

With the production environment docs/deployment.md documents (``DJANGO_DEBUG=0``, a secret key,
the allowed hosts), ``manage.py check --deploy`` is clean: secure cookies, HSTS and the
HTTPS redirect are on by default.  The Content-Security-Policy is on every page the
project serves, the login page and Django's admin included.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from mqadmin.views.common import CONTENT_SECURITY_POLICY

ROOT = Path(__file__).resolve().parents[2]


def deploy_check(**extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "DJANGO_SETTINGS_MODULE": "mqadmin.settings",
        # The documented production environment:
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_ALLOWED_HOSTS": "mq.example.com",
        **extra,
    }
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "check", "--deploy", "--fail-level", "WARNING"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


def test_check_deploy_is_clean_with_the_documented_production_env() -> None:
    done = deploy_check()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout + done.stderr


def test_the_switches_turn_each_protection_off() -> None:
    done = deploy_check(
        DJANGO_SECURE_COOKIES="0", DJANGO_SECURE_SSL_REDIRECT="0", DJANGO_SECURE_HSTS_SECONDS="0"
    )
    out = done.stdout + done.stderr
    assert done.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in out, out


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/", "/admin/"])
def test_every_page_of_the_project_has_the_csp(path: str) -> None:
    response = Client().get(path, follow=True)
    assert response.status_code == 200
    assert response["Content-Security-Policy"] == CONTENT_SECURITY_POLICY


@pytest.mark.django_db
def test_admin_pages_have_the_csp_when_logged_in(admin_client: Client) -> None:
    response = admin_client.get("/admin/auth/user/")
    assert response.status_code == 200
    assert response["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
