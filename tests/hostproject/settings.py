"""Settings of a minimal host project that installs mqadmin as a third-party app.

It is what docs/django.md ("Add mqadmin to an existing Django project") asks of a project and
nothing more: the app and its two helpers in INSTALLED_APPS, HtmxMiddleware, the app's
URLconf mounted under ``ops/mq/``.  Everything else is the host's own and deliberately
unlike this repository's development project: a custom user model (e-mail login, no
username), its own login URL, its admin under ``backoffice/``, static files under
``/assets/``, and no MQ_* setting at all except where a test sets one.  The tests in
``tests/host/`` run with it (``pytest tests/host --ds=tests.hostproject.settings``).
"""

from __future__ import annotations

import os
from pathlib import Path

import django

from mqadmin.config import parse_database_url

BASE_DIR = Path(__file__).resolve().parent

SECRET_KEY = "host-project-tests-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "tests.hostproject.members",
    "mqadmin",
    # Django 5.2: the template partials package (built into Django 6).
    *(["template_partials"] if django.VERSION < (6, 0) else []),
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "tests.hostproject.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# SQLite in memory, or the PostgreSQL of DATABASE_URL (.ci/test-all.sh's pass 3), where
# column lengths are enforced (the audit log's username of a long e-mail login).
DATABASES = {
    "default": parse_database_url(os.environ["DATABASE_URL"])
    if os.environ.get("DATABASE_URL")
    else {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_USER_MODEL = "members.Member"
LOGIN_URL = "members:sign-in"
LOGIN_REDIRECT_URL = "/"
# Tests log in with force_login; a fast hasher keeps the few real logins cheap.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

USE_TZ = True
TIME_ZONE = "UTC"

STATIC_URL = "/assets/"
