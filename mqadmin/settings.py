"""Django settings of the mqadmin dashboard.

Everything deployment-specific comes from the environment (see docs/configuration.md):
``DJANGO_SECRET_KEY``, ``DJANGO_DEBUG``, ``DJANGO_ALLOWED_HOSTS``,
``DJANGO_CSRF_TRUSTED_ORIGINS``, ``DATABASE_URL``, ``MQ_REDIS_URL``, ``MQ_PREFIX``,
``MQ_STORES``, ``MQ_DASHBOARD_READ_ONLY``, ``MQ_METRICS_TOKEN``, ``DJANGO_LOG_LEVEL``, and the
HTTPS switches ``DJANGO_SECURE_COOKIES``, ``DJANGO_SECURE_SSL_REDIRECT``,
``DJANGO_SECURE_HSTS_SECONDS``, ``DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS``,
``DJANGO_SECURE_HSTS_PRELOAD``, ``DJANGO_BEHIND_TLS_PROXY``.  The defaults give a
working development set-up with no configuration at all: SQLite and a generated secret
key under ``var/``, and the embedded Redis.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import django

from mqadmin.config import (
    database_config,
    env_bool,
    env_list,
    load_or_create_secret_key,
    parse_stores,
    seconds_setting,
)

BASE_DIR = Path(__file__).resolve().parent.parent
# Local state of a development checkout: SQLite database, secret key, embedded Redis.
VAR_DIR = BASE_DIR / "var"

# -- core ------------------------------------------------------------------------------

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or load_or_create_secret_key(
    VAR_DIR / "secret_key"
)
DEBUG = env_bool("DJANGO_DEBUG", default=True)
ALLOWED_HOSTS = env_list(
    "DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"] if DEBUG else []
)
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "mqadmin",
    # Django 5.2: the template partials package (built into Django 6).
    *(["template_partials"] if django.VERSION < (6, 0) else []),
    # Login throttling (django-axes, the "site" extra): see "-- auth" below.
    "axes",
]
# The demo's job handlers (mqadmin/demo/jobs.py, not in the wheel): `make run`'s worker
# runs what `manage.py seed_demo` enqueues.  On unless MQ_JOB_MODULES names jobs of your
# own (then the demo's handlers would compete with them); MQ_DEMO=1/0 decides explicitly.
MQ_DEMO = env_bool("MQ_DEMO", default=not os.environ.get("MQ_JOB_MODULES"))
if MQ_DEMO:
    INSTALLED_APPS.append("mqadmin.demo")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # The dashboard's Content-Security-Policy on every page (login, admin), not only the app's.
    "mqadmin.middleware.ContentSecurityPolicyMiddleware",
    # Last, as django-axes asks: answers a locked-out login attempt.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "mqadmin.site_urls"
WSGI_APPLICATION = "mqadmin.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # templates/registration/: this project's login page (the app's own templates
        # come through APP_DIRS, as in any project that installs the wheel).
        "DIRS": [BASE_DIR / "templates"],
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

# -- HTTPS (on by default when DJANGO_DEBUG=0; see docs/deployment.md) ---------

# Cookies only over HTTPS.
SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", default=not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
# Plain-HTTP requests are redirected to HTTPS, except the probes and the metrics scrape
# (a platform's health checks and Prometheus often talk plain HTTP to the pod).
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", default=not DEBUG)
SECURE_REDIRECT_EXEMPT = [r"^healthz/$", r"^readyz/$", r"^metrics/$"]
# HSTS: a year by default in production; 0 turns it off.
SECURE_HSTS_SECONDS = int(
    os.environ.get("DJANGO_SECURE_HSTS_SECONDS") or (0 if DEBUG else 31_536_000)
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool(
    "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=not DEBUG
)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", default=not DEBUG)
# Behind a proxy that terminates TLS and sets X-Forwarded-Proto (only set this there:
# a client could send the header itself).
if env_bool("DJANGO_BEHIND_TLS_PROXY", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# -- database --------------------------------------------------------------------------

DATABASES = {
    "default": database_config(os.environ.get("DATABASE_URL"), VAR_DIR / "db.sqlite3"),
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# -- auth ------------------------------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Login throttling with django-axes: after MQ_LOGIN_FAILURE_LIMIT wrong passwords for one
# username from one address, logins from there are refused (429) for
# MQ_LOGIN_COOLOFF_MINUTES; a successful login resets the count.  Attempts are kept in
# the database (``manage.py axes_reset`` lifts every lockout).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = int(os.environ.get("MQ_LOGIN_FAILURE_LIMIT") or 5)
AXES_COOLOFF_TIME = timedelta(minutes=int(os.environ.get("MQ_LOGIN_COOLOFF_MINUTES") or 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# Behind a TLS proxy the client address is the proxy's: count per forwarded address there.
if env_bool("DJANGO_BEHIND_TLS_PROXY", default=False):
    AXES_IPWARE_META_PRECEDENCE_ORDER = ["HTTP_X_FORWARDED_FOR", "REMOTE_ADDR"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "mqadmin:home"
LOGOUT_REDIRECT_URL = "login"

# -- i18n, static ----------------------------------------------------------------------

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# The app's own static folder (mqadmin/static/mqadmin, linked to static/mqadmin) is found
# by the app directories finder, as in any project that installs the wheel.
# Target of `manage.py collectstatic` for deployments behind a web server.
STATIC_ROOT = VAR_DIR / "static"

# -- job stores ------------------------------------------------------------------------

# Redis of every store without its own "url"; None means the embedded Redis.
MQ_REDIS_URL = os.environ.get("MQ_REDIS_URL") or None
# Key prefix of the default store: its keys live under "{<prefix>}:".
MQ_PREFIX = os.environ.get("MQ_PREFIX") or "mq"
# Store name -> {"prefix": ..., "url": ... (optional)}; JSON in the environment.
MQ_STORES = parse_stores(os.environ.get("MQ_STORES"), default_prefix=MQ_PREFIX)
# Dotted modules that define jobs, besides every installed app's ``jobs`` module.
MQ_JOB_MODULES = env_list("MQ_JOB_MODULES", [])

# -- dashboard -------------------------------------------------------------------------

# True: the dashboard shows no action buttons and refuses every action with 403,
# whatever the user's permissions.
MQ_DASHBOARD_READ_ONLY = env_bool("MQ_DASHBOARD_READ_ONLY", default=False)
# The live pages' event stream (mqadmin/live.py): off, pages poll as before; the streams
# one process serves at most (each holds a thread under WSGI: keep it below the server's
# threads per process); the other MQ_EVENTS_* settings keep their defaults (docs/dashboard.md).
MQ_EVENTS_ENABLED = env_bool("MQ_EVENTS_ENABLED", default=True)
MQ_EVENTS_MAX_CONNECTIONS = int(os.environ.get("MQ_EVENTS_MAX_CONNECTIONS") or 8)
# Seconds a store whose Redis was found unreachable is reported down at once before the
# dashboard tries it again (one connection without retries; docs/dashboard.md).
MQ_STORE_RECHECK_SECONDS = seconds_setting(
    "MQ_STORE_RECHECK_SECONDS", os.environ.get("MQ_STORE_RECHECK_SECONDS") or 5, zero_ok=True
)
# When set, /metrics/ also answers a scraper sending "Authorization: Bearer <token>"
# (dashboard users always may read it).
MQ_METRICS_TOKEN = os.environ.get("MQ_METRICS_TOKEN") or None

# -- logging ---------------------------------------------------------------------------

LOG_LEVEL = os.environ.get("DJANGO_LOG_LEVEL", "INFO").upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        # mq_job is "[<job id> <queue>#<attempt>] " for lines logged inside a running job.
        "line": {"format": "%(asctime)s %(levelname)s %(name)s %(mq_job)s%(message)s"},
    },
    "filters": {"job": {"()": "store.jobs.JobLogContext"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "line", "filters": ["job"]},
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Django's own request logging goes through the root handler, once.
        "django": {"level": LOG_LEVEL, "propagate": True},
    },
}
