"""System checks of the app's settings (run by `manage.py check` and on start-up).

Besides the store settings, :func:`check_host_project` names each piece a host
project must provide for the dashboard to work (ids ``mqadmin.E002`` on, listed in
docs/django.md, "Add mqadmin to an existing Django project"), so a missing middleware or app
is a clear message at start-up rather than a 500 on the first page.
"""

from __future__ import annotations

import os
from typing import Any

import django
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.core.exceptions import ImproperlyConfigured

from mqadmin.config import seconds_setting, validate_stores


def check_store_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """MQ_STORES, when the project sets it, must map store names to {"prefix": ..., "url": ...}."""
    if getattr(settings, "MQ_STORES", None) is None:
        # Not set (a host project may set no MQ_* setting): the single default store.
        return []
    problems = validate_stores(settings.MQ_STORES)
    return [
        Error(
            f"MQ_STORES: {problem}",
            hint='Example: {"default": {"prefix": "mq"}, "billing": {"prefix": "billing"}}',
            id="mqadmin.E001",
        )
        for problem in problems
    ]


# -- the pieces a host project provides --------------------------------------------------

#: (app, why the dashboard needs it, check id) — each must be in INSTALLED_APPS.
REQUIRED_APPS: tuple[tuple[str, str, str], ...] = (
    ("django.contrib.auth", "logins and the per-action permissions", "mqadmin.E002"),
    ("django.contrib.contenttypes", "the permissions' content type", "mqadmin.E003"),
)

#: Django 5.2 only: the template partials package (Django 6.0 has them built in).
PARTIALS_APP = (
    "template_partials",
    "the pages' {% partialdef %} fragments that htmx swaps in",
    "mqadmin.E004",
)


def required_apps(version: tuple[Any, ...] | None = None) -> tuple[tuple[str, str, str], ...]:
    """The apps the running Django (or ``version``) needs: template_partials only before 6.0."""
    if (version or django.VERSION) >= (6, 0):
        return REQUIRED_APPS
    return (*REQUIRED_APPS, PARTIALS_APP)


#: (middleware, why, check id) — each must be in MIDDLEWARE.
REQUIRED_MIDDLEWARE: tuple[tuple[str, str, str], ...] = (
    (
        "django.contrib.sessions.middleware.SessionMiddleware",
        "logins are kept in the session",
        "mqadmin.E005",
    ),
    (
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "every page needs request.user",
        "mqadmin.E006",
    ),
    (
        "django.contrib.messages.middleware.MessageMiddleware",
        "actions report their outcome as messages",
        "mqadmin.E007",
    ),
    (
        "django.middleware.csrf.CsrfViewMiddleware",
        "every action is a POST protected by a CSRF token",
        "mqadmin.E008",
    ),
    (
        "django_htmx.middleware.HtmxMiddleware",
        "the views read request.htmx to answer htmx swaps with fragments",
        "mqadmin.E009",
    ),
)

#: (context processor, why) — the DjangoTemplates engine that renders the app needs each.
REQUIRED_CONTEXT_PROCESSORS: tuple[tuple[str, str], ...] = (
    ("django.template.context_processors.request", "pages link back to request paths"),
    ("django.contrib.auth.context_processors.auth", "pages show the user"),
    ("django.contrib.messages.context_processors.messages", "pages show action messages"),
)

DJANGO_TEMPLATES = "django.template.backends.django.DjangoTemplates"
APP_DIRECTORIES_LOADER = "django.template.loaders.app_directories.Loader"
STATICFILES_APP = "django.contrib.staticfiles"


def check_host_project(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Everything the dashboard needs from the project that installs it."""
    messages: list[CheckMessage] = []
    messages += check_required_apps()
    messages += check_required_middleware()
    messages += check_templates()
    messages += check_user_model()
    messages += check_connection_settings()
    messages += check_static_files()
    messages += check_login_url()
    return messages


def check_required_apps() -> list[CheckMessage]:
    installed = set(settings.INSTALLED_APPS)
    return [
        Error(
            f"mqadmin needs {app!r} in INSTALLED_APPS ({why}).",
            hint=f"Add {app!r} to INSTALLED_APPS."
            + (
                ' On Django 5.2 it comes with pip install "mqadmin[django52]" '
                "(Django 6.0 and later have template partials built in)."
                if app == PARTIALS_APP[0]
                else ""
            ),
            id=check_id,
        )
        for app, why, check_id in required_apps()
        if app not in installed
    ]


def check_required_middleware() -> list[CheckMessage]:
    middleware = list(getattr(settings, "MIDDLEWARE", None) or [])
    messages: list[CheckMessage] = [
        Error(
            f"mqadmin needs {path!r} in MIDDLEWARE ({why}).",
            hint=f"Add {path!r} to MIDDLEWARE.",
            id=check_id,
        )
        for path, why, check_id in REQUIRED_MIDDLEWARE
        if path not in middleware
    ]
    session = "django.contrib.sessions.middleware.SessionMiddleware"
    auth = "django.contrib.auth.middleware.AuthenticationMiddleware"
    if (
        session in middleware
        and auth in middleware
        and middleware.index(auth) < middleware.index(session)
    ):
        messages.append(
            Error(
                "AuthenticationMiddleware must come after SessionMiddleware in MIDDLEWARE.",
                hint="Move SessionMiddleware above AuthenticationMiddleware.",
                id="mqadmin.E010",
            )
        )
    return messages


def check_templates() -> list[CheckMessage]:
    """A DjangoTemplates engine that finds the app's templates, with the context processors."""
    engines = [
        engine
        for engine in getattr(settings, "TEMPLATES", None) or []
        if engine.get("BACKEND") == DJANGO_TEMPLATES
    ]
    if not engines:
        return [
            Error(
                "mqadmin's pages are Django templates, but TEMPLATES has no "
                f"{DJANGO_TEMPLATES!r} engine.",
                hint=f"Add a TEMPLATES entry with 'BACKEND': {DJANGO_TEMPLATES!r} and 'APP_DIRS': True.",
                id="mqadmin.E011",
            )
        ]
    finding = [engine for engine in engines if _finds_app_templates(engine)]
    if not finding:
        return [
            Error(
                "No DjangoTemplates engine in TEMPLATES looks in the apps' template folders, "
                "so mqadmin's templates (mqadmin/templates/mqadmin/) are not found.",
                hint="Set 'APP_DIRS': True on the DjangoTemplates engine (or list "
                f"{APP_DIRECTORIES_LOADER!r} in its loaders).",
                id="mqadmin.E012",
            )
        ]
    # Django renders the app with the first engine that finds its templates.
    processors = set((finding[0].get("OPTIONS") or {}).get("context_processors") or [])
    return [
        Error(
            f"mqadmin needs the context processor {path!r} ({why}).",
            hint=f"Add {path!r} to OPTIONS['context_processors'] of the DjangoTemplates engine.",
            id="mqadmin.E013",
        )
        for path, why in REQUIRED_CONTEXT_PROCESSORS
        if path not in processors
    ]


def _finds_app_templates(engine: dict[str, Any]) -> bool:
    if engine.get("APP_DIRS"):
        return True
    loaders = (engine.get("OPTIONS") or {}).get("loaders") or []
    return APP_DIRECTORIES_LOADER in _loader_names(loaders)


def _loader_names(loaders: Any) -> list[str]:
    """Every loader path in a ``loaders`` option, wrapped ones (cached, partials) included."""
    names: list[str] = []
    for loader in loaders:
        if isinstance(loader, str):
            names.append(loader)
        elif isinstance(loader, (list, tuple)) and loader:
            names.append(str(loader[0]))
            for argument in loader[1:]:
                if isinstance(argument, (list, tuple)):
                    names += _loader_names(argument)
    return names


def check_user_model() -> list[CheckMessage]:
    """The user model answers ``has_perm`` (the dashboard's permissions are Permission objects)."""
    from django.contrib.auth import get_user_model

    if "django.contrib.auth" not in settings.INSTALLED_APPS:
        return []  # mqadmin.E002 already says it
    try:
        user_model = get_user_model()
    except Exception:  # Django's own auth checks report a bad AUTH_USER_MODEL
        return []
    if not callable(getattr(user_model, "has_perm", None)):
        return [
            Error(
                f"The user model {settings.AUTH_USER_MODEL} has no has_perm(): mqadmin grants "
                "each action through a Django permission.",
                hint="Derive the user model from django.contrib.auth.models.PermissionsMixin.",
                id="mqadmin.E014",
            )
        ]
    return []


def check_connection_settings() -> list[CheckMessage]:
    """MQ_REDIS_URL, MQ_PREFIX, MQ_STORE_RECHECK_SECONDS and MQ_DATA_DIR, when set, have the right shape."""
    messages: list[CheckMessage] = []
    url = getattr(settings, "MQ_REDIS_URL", None)
    if url is not None and (
        not isinstance(url, str) or (url and _url_scheme(url) not in URL_SCHEMES)
    ):
        # Only the scheme is quoted: the rest of a URL may hold a password.
        got = repr(_url_scheme(url) + "://") if isinstance(url, str) else type(url).__name__
        messages.append(
            Error(
                "MQ_REDIS_URL must be a redis://, rediss://, unix://, redis+cluster:// or "
                f"rediss+cluster:// URL, got {got}.",
                hint="Example: MQ_REDIS_URL = 'redis://127.0.0.1:6379/0'; leave it unset "
                "(or None) for the embedded Redis.",
                id="mqadmin.E015",
            )
        )
    prefix = getattr(settings, "MQ_PREFIX", None)
    if prefix is not None and (
        not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix
    ):
        messages.append(
            Error(
                f"MQ_PREFIX must be a non-empty string without braces, got {prefix!r}.",
                hint="Example: MQ_PREFIX = 'mq' (the keys then live under '{mq}:').",
                id="mqadmin.E016",
            )
        )
    recheck = getattr(settings, "MQ_STORE_RECHECK_SECONDS", None)
    if recheck is not None:
        try:
            seconds_setting("MQ_STORE_RECHECK_SECONDS", recheck, zero_ok=True)
        except ImproperlyConfigured as exc:
            messages.append(
                Error(
                    f"{exc}.",
                    hint="Example: MQ_STORE_RECHECK_SECONDS = 5 (0: look at a down store's "
                    "Redis on every page).",
                    id="mqadmin.E020",
                )
            )
    data_dir = getattr(settings, "MQ_DATA_DIR", None)
    if data_dir is not None and not isinstance(data_dir, (str, os.PathLike)):
        messages.append(
            Error(
                f"MQ_DATA_DIR must be a path, got {type(data_dir).__name__}.",
                hint="Example: MQ_DATA_DIR = BASE_DIR / 'var' / 'redis'.",
                id="mqadmin.E017",
            )
        )
    return messages


#: The URL schemes ``store.connect`` accepts.
URL_SCHEMES = frozenset({"redis", "rediss", "unix", "redis+cluster", "rediss+cluster"})


def _url_scheme(url: str) -> str:
    scheme, sep, _ = url.partition("://")
    return scheme.lower() if sep else ""


def check_static_files() -> list[CheckMessage]:
    """Without django.contrib.staticfiles, nothing finds or serves the app's CSS and scripts."""
    if STATICFILES_APP in settings.INSTALLED_APPS:
        return []
    return [
        Warning(
            "django.contrib.staticfiles is not in INSTALLED_APPS: the dashboard's CSS and "
            "scripts (mqadmin/static/mqadmin/) are not collected or served by Django.",
            hint="Add 'django.contrib.staticfiles' to INSTALLED_APPS, or serve the app's "
            "static folder under STATIC_URL yourself.",
            id="mqadmin.W001",
        )
    ]


def check_login_url() -> list[CheckMessage]:
    """Anonymous visitors are sent to LOGIN_URL: it must name a page of the project.

    A URL name that does not reverse would answer every anonymous visit with a 500
    (an error); a local path that no URL pattern serves, with a 404 (a warning: a
    proxy in front of Django may serve it).  Another site's URL is not checked.
    """
    from urllib.parse import urlsplit

    from django.shortcuts import resolve_url
    from django.urls import NoReverseMatch, Resolver404, get_script_prefix, resolve

    login_url = getattr(settings, "LOGIN_URL", None)
    if not login_url:
        return [
            Error(
                "LOGIN_URL is empty: the dashboard sends anonymous visitors to it.",
                hint="Set LOGIN_URL to the project's login page (a URL name or a path).",
                id="mqadmin.E018",
            )
        ]
    try:
        target = str(resolve_url(login_url))
    except NoReverseMatch:
        return [
            Error(
                f"LOGIN_URL {login_url!r} is not a URL name of this project (nor a path): "
                "every anonymous visit of the dashboard would fail.",
                hint="Name an existing login view, e.g. LOGIN_URL = 'admin:login', or "
                "include django.contrib.auth.urls under accounts/.",
                id="mqadmin.E018",
            )
        ]
    except Exception:  # a broken URLconf: Django's own checks report it
        return []
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith("/"):
        return []
    prefix = get_script_prefix()
    path = "/" + parts.path[len(prefix) :] if parts.path.startswith(prefix) else parts.path
    try:
        resolve(path)
    except Resolver404:
        return [
            Warning(
                f"LOGIN_URL {login_url!r} ({target}) matches no URL pattern of this project: "
                "anonymous visitors of the dashboard would get a 404.",
                hint="Add a login page there (e.g. path('accounts/', "
                "include('django.contrib.auth.urls'))), or set LOGIN_URL = 'admin:login'.",
                id="mqadmin.W002",
            )
        ]
    except Exception:
        return []
    return []


# -- the Redis the stores run on ------------------------------------------------------------

#: Seconds a system check waits for a Redis (a check must not hang a command).
CHECK_TIMEOUT_S = 1.0


def check_eviction_policy(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn when a configured store's Redis may evict keys (a queue then loses jobs silently).

    Each distinct Redis URL of MQ_STORES is asked once (CONFIG GET, with a short
    timeout).  The embedded Redis (no URL) is started by this project with the
    server default ``noeviction`` and is not asked; an unreachable Redis is the
    dashboard's to report, not a check's.  Where CONFIG GET is refused (managed
    Redis), the warning says the policy could not be read.
    """
    from store import UNAVAILABLE_ERRORS, StoreFailure, connect
    from store.connection import mask_url
    from store.eviction import eviction_status

    if validate_stores(getattr(settings, "MQ_STORES", None)):
        return []  # E001 reports the settings first
    stores: dict[str, dict[str, Any]] = getattr(settings, "MQ_STORES", None) or {}
    urls: dict[str, list[str]] = {}
    for name, entry in stores.items():
        url = (entry or {}).get("url") or getattr(settings, "MQ_REDIS_URL", None)
        if url:
            urls.setdefault(str(url), []).append(name)
    if not stores and getattr(settings, "MQ_REDIS_URL", None):
        urls[str(settings.MQ_REDIS_URL)] = ["default"]
    out: list[CheckMessage] = []
    for url, names in urls.items():
        try:
            client = connect(
                url, socket_timeout=CHECK_TIMEOUT_S, socket_connect_timeout=CHECK_TIMEOUT_S
            )
        except (StoreFailure, OSError, ValueError) + UNAVAILABLE_ERRORS:
            continue
        try:
            status = eviction_status(client)
        finally:
            client.close()
        if not status.message:
            continue
        out.append(
            Warning(
                f"stores {', '.join(sorted(names))} on {mask_url(url)}: {status.message}",
                hint="CONFIG SET maxmemory-policy noeviction (and persist it in redis.conf), "
                "or choose noeviction in your Redis provider's settings.",
                id="mqadmin.W004" if status.policy is None else "mqadmin.W003",
            )
        )
    return out


def check_store_scripts(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Error when a configured store's Redis user may not run the store's scripts (ACL).

    Each store with a Redis URL runs one cheap read-only script of its own, as the
    store would (EVALSHA, or a Redis Function on Redis 7 when the user may load one),
    with a short timeout.  An unreachable Redis is the dashboard's to report, and the
    embedded Redis (no URL) has no ACL users: neither is asked.
    """
    from mqadmin.services import configured_stores, store_url
    from store import UNAVAILABLE_ERRORS, StoreFailure, connect
    from store.connection import mask_url
    from store.scripts import probe_scripts

    if validate_stores(getattr(settings, "MQ_STORES", None)):
        return []  # E001 reports the settings first
    out: list[CheckMessage] = []
    for name, entry in sorted(configured_stores().items()):
        url = store_url(entry)
        if not url:
            continue
        try:
            client = connect(
                str(url), socket_timeout=CHECK_TIMEOUT_S, socket_connect_timeout=CHECK_TIMEOUT_S
            )
        except (StoreFailure, OSError, ValueError) + UNAVAILABLE_ERRORS:
            continue
        try:
            found = probe_scripts(client, str(entry["prefix"]))
        finally:
            client.close()
        if found.refusal is None:
            continue  # it ran, or not an ACL matter (unreachable, busy): the dashboard says it
        out.append(
            Error(
                f"store {name!r} on {mask_url(str(url))} cannot run its scripts: {found.refusal}",
                hint="Grant the store's Redis user the ACL in docs/guarantees.md "
                "'Restricted Redis users' (at least +evalsha +script|load +@read "
                f"+@write +publish on ~{found.tag}*).",
                id="mqadmin.E019",
            )
        )
    return out
