"""System checks: `manage.py check` names each piece a host project is missing.

Each test removes one piece from the development project's (complete) settings and
expects exactly that check id; the complete settings pass with no message at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import django
import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from mqadmin.checks import check_host_project, check_store_settings, required_apps
from mqadmin.services import configured_stores, embedded_data_dir


def ids(messages: list[Any]) -> list[str]:
    return [message.id for message in messages]


def test_the_complete_development_settings_pass() -> None:
    assert check_host_project() == []
    assert check_store_settings() == []


def test_no_mq_setting_at_all_is_fine_and_means_one_default_store(settings: Any) -> None:
    for name in ("MQ_STORES", "MQ_PREFIX", "MQ_REDIS_URL", "MQ_JOB_MODULES"):
        delattr(settings, name)

    assert check_store_settings() == []
    assert check_host_project() == []
    assert configured_stores() == {"default": {"prefix": "mq"}}


def test_mq_prefix_alone_names_the_default_store(settings: Any) -> None:
    del settings.MQ_STORES
    settings.MQ_PREFIX = "shop"

    assert configured_stores() == {"default": {"prefix": "shop"}}


@pytest.mark.parametrize(
    ("app", "check_id"),
    [
        ("django.contrib.auth", "mqadmin.E002"),
        ("django.contrib.contenttypes", "mqadmin.E003"),
        pytest.param(
            "template_partials",
            "mqadmin.E004",
            marks=pytest.mark.skipif(
                django.VERSION >= (6, 0), reason="Django 6 has template partials built in"
            ),
        ),
    ],
)
def test_a_missing_app_is_named(settings: Any, app: str, check_id: str) -> None:
    # Checked on the setting's value: the app registry itself is left alone.
    settings.INSTALLED_APPS = [name for name in settings.INSTALLED_APPS if name != app]

    messages = [m for m in check_host_project() if m.id.startswith("mqadmin.E")]

    assert ids(messages) == [check_id]
    assert app in messages[0].msg
    assert "INSTALLED_APPS" in messages[0].hint


@pytest.mark.parametrize(
    ("middleware", "check_id"),
    [
        ("django.contrib.sessions.middleware.SessionMiddleware", "mqadmin.E005"),
        ("django.contrib.auth.middleware.AuthenticationMiddleware", "mqadmin.E006"),
        ("django.contrib.messages.middleware.MessageMiddleware", "mqadmin.E007"),
        ("django.middleware.csrf.CsrfViewMiddleware", "mqadmin.E008"),
        ("django_htmx.middleware.HtmxMiddleware", "mqadmin.E009"),
    ],
)
def test_a_missing_middleware_is_named(settings: Any, middleware: str, check_id: str) -> None:
    settings.MIDDLEWARE = [name for name in settings.MIDDLEWARE if name != middleware]

    messages = check_host_project()

    assert ids(messages) == [check_id]
    assert middleware in messages[0].msg


def test_authentication_before_sessions_is_an_error(settings: Any) -> None:
    session = "django.contrib.sessions.middleware.SessionMiddleware"
    auth = "django.contrib.auth.middleware.AuthenticationMiddleware"
    rest = [name for name in settings.MIDDLEWARE if name not in (session, auth)]
    settings.MIDDLEWARE = [auth, session, *rest]

    assert ids(check_host_project()) == ["mqadmin.E010"]


@pytest.mark.skipif(django.VERSION < (6, 0), reason="Django 5.2 needs the package")
def test_django_6_does_not_ask_for_template_partials(settings: Any) -> None:
    settings.INSTALLED_APPS = [a for a in settings.INSTALLED_APPS if a != "template_partials"]

    assert check_host_project() == []


@pytest.mark.parametrize(
    ("version", "asked"), [((5, 2, 9, "final", 0), True), ((6, 0, 0, "final", 0), False)]
)
def test_template_partials_is_asked_for_only_before_django_6(
    version: tuple[Any, ...], asked: bool
) -> None:
    assert ("template_partials" in [app for app, _, _ in required_apps(version)]) is asked


def test_no_django_templates_engine(settings: Any) -> None:
    settings.TEMPLATES = [
        {"BACKEND": "django.template.backends.jinja2.Jinja2", "DIRS": [], "APP_DIRS": True}
    ]

    assert ids(check_host_project()) == ["mqadmin.E011"]


def test_an_engine_that_does_not_look_in_app_folders(settings: Any) -> None:
    # (template_partials has already rewritten APP_DIRS into an explicit loader list.)
    options = dict(settings.TEMPLATES[0]["OPTIONS"])
    options["loaders"] = [
        ("template_partials.loader.Loader", ["django.template.loaders.filesystem.Loader"])
    ]
    settings.TEMPLATES = [dict(settings.TEMPLATES[0], APP_DIRS=False, OPTIONS=options)]

    messages = check_host_project()

    assert ids(messages) == ["mqadmin.E012"]
    assert "APP_DIRS" in messages[0].hint


def test_explicit_loaders_with_the_app_directories_loader_pass(settings: Any) -> None:
    options = dict(settings.TEMPLATES[0]["OPTIONS"])
    options["loaders"] = [
        (
            "django.template.loaders.cached.Loader",
            [
                "django.template.loaders.filesystem.Loader",
                "django.template.loaders.app_directories.Loader",
            ],
        )
    ]
    settings.TEMPLATES = [dict(settings.TEMPLATES[0], APP_DIRS=False, OPTIONS=options)]

    assert check_host_project() == []


@pytest.mark.parametrize(
    "processor",
    [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ],
)
def test_a_missing_context_processor_is_named(settings: Any, processor: str) -> None:
    options = dict(settings.TEMPLATES[0]["OPTIONS"])
    options["context_processors"] = [p for p in options["context_processors"] if p != processor]
    settings.TEMPLATES = [dict(settings.TEMPLATES[0], OPTIONS=options)]

    messages = check_host_project()

    assert ids(messages) == ["mqadmin.E013"]
    assert processor in messages[0].msg


def test_a_user_model_without_has_perm(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    class NoPermissions:
        pass

    monkeypatch.setattr("django.contrib.auth.get_user_model", lambda: NoPermissions)

    messages = check_host_project()

    assert ids(messages) == ["mqadmin.E014"]
    assert "PermissionsMixin" in messages[0].hint


@pytest.mark.parametrize("url", ["http://redis:6379", 6379, "127.0.0.1:6379"])
def test_a_malformed_mq_redis_url(settings: Any, url: Any) -> None:
    settings.MQ_REDIS_URL = url

    assert ids(check_host_project()) == ["mqadmin.E015"]


@pytest.mark.parametrize(
    "url",
    [
        None,
        "redis://127.0.0.1:6379/0",
        "rediss://h:6380/0",
        "unix:///tmp/r.sock",
        "redis+cluster://h1:7000,h2:7001",
        "rediss+cluster://h1:7000",
    ],
)
def test_a_good_or_absent_mq_redis_url(settings: Any, url: Any) -> None:
    settings.MQ_REDIS_URL = url

    assert check_host_project() == []


def test_a_password_in_mq_redis_url_is_not_repeated(settings: Any) -> None:
    settings.MQ_REDIS_URL = "http://user:s3cret@redis:6379"

    (message,) = check_host_project()

    assert "s3cret" not in message.msg


@pytest.mark.parametrize("prefix", ["", "{mq}", 7])
def test_a_malformed_mq_prefix(settings: Any, prefix: Any) -> None:
    settings.MQ_PREFIX = prefix

    assert ids(check_host_project()) == ["mqadmin.E016"]


@pytest.mark.parametrize("value", [-1, "soon", True, float("nan"), float("inf")])
def test_a_malformed_mq_store_recheck_seconds(settings: Any, value: Any) -> None:
    settings.MQ_STORE_RECHECK_SECONDS = value

    assert ids(check_host_project()) == ["mqadmin.E020"]


@pytest.mark.parametrize("value", [0, 2.5, "2.5", None])
def test_a_well_formed_mq_store_recheck_seconds(settings: Any, value: Any) -> None:
    settings.MQ_STORE_RECHECK_SECONDS = value

    assert check_host_project() == []


def test_a_malformed_mq_data_dir(settings: Any) -> None:
    settings.MQ_DATA_DIR = 42

    assert ids(check_host_project()) == ["mqadmin.E017"]


def test_no_staticfiles_app_is_a_warning(settings: Any) -> None:
    settings.INSTALLED_APPS = [
        name for name in settings.INSTALLED_APPS if name != "django.contrib.staticfiles"
    ]

    assert ids(check_host_project()) == ["mqadmin.W001"]


# Django 6.1's `check` runs the database checks too (JSONField support on SQLite opens a
# cursor unless an earlier test of the process already asked), as `manage.py check` does.
@pytest.mark.django_db
def test_manage_py_check_fails_with_the_missing_piece(settings: Any) -> None:
    settings.MIDDLEWARE = [
        name for name in settings.MIDDLEWARE if name != "django_htmx.middleware.HtmxMiddleware"
    ]

    with pytest.raises(SystemCheckError, match=r"mqadmin\.E009.*HtmxMiddleware"):
        call_command("check")


# -- where the embedded Redis keeps its data ------------------------------------------


def test_data_dir_setting_wins(
    settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MQ_DATA_DIR", str(tmp_path / "from-env"))
    settings.MQ_DATA_DIR = tmp_path / "from-settings"

    assert embedded_data_dir() == tmp_path / "from-settings"


def test_data_dir_from_the_environment(
    settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MQ_DATA_DIR", str(tmp_path / "from-env"))

    assert embedded_data_dir() == tmp_path / "from-env"


def test_data_dir_defaults_to_var_redis_under_base_dir(
    settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MQ_DATA_DIR", raising=False)
    settings.BASE_DIR = tmp_path / "host"

    assert embedded_data_dir() == tmp_path / "host" / "var" / "redis"


def test_data_dir_without_base_dir_is_a_per_user_state_dir_outside_a_checkout(
    settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import store.embedded

    monkeypatch.delenv("MQ_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    del settings.BASE_DIR
    # As installed from the wheel: no pyproject.toml beside the store package.
    fake_package = tmp_path / "site-packages" / "store" / "embedded.py"
    monkeypatch.setattr(store.embedded, "__file__", str(fake_package))

    assert embedded_data_dir() == tmp_path / "state" / "mqadmin" / "redis"


@pytest.mark.parametrize(
    "login_url", ["login", "/accounts/login/", "admin:login", "https://sso.example.com/"]
)
def test_a_login_url_of_the_project_or_another_site_passes(settings: Any, login_url: str) -> None:
    settings.LOGIN_URL = login_url

    assert check_host_project() == []


@pytest.mark.parametrize("login_url", ["", "signin"])
def test_a_login_url_that_names_nothing_is_an_error(settings: Any, login_url: str) -> None:
    settings.LOGIN_URL = login_url

    messages = check_host_project()

    assert ids(messages) == ["mqadmin.E018"]


def test_a_login_path_no_pattern_serves_is_a_warning(settings: Any) -> None:
    settings.LOGIN_URL = "/sign-in/"

    messages = check_host_project()

    assert ids(messages) == ["mqadmin.W002"]
    assert "404" in messages[0].msg


def test_store_entries_take_log_caps_and_name_unknown_keys(settings: Any) -> None:
    settings.MQ_STORES = {"main": {"prefix": "m", "log_max_lines": 50, "log_max_bytes": 65536}}
    assert check_store_settings() == []
    settings.MQ_STORES = {"main": {"prefix": "m", "log_max_lines": "50", "logs": 1}}
    messages = [m.msg for m in check_store_settings()]
    assert any("unknown keys ['logs']" in m and "log_max_bytes" in m for m in messages)
    assert any("'log_max_lines' must be a whole number" in m for m in messages)


def test_a_stores_log_caps_come_from_its_entry(settings: Any, redis_url: str, prefix: str) -> None:
    from mqadmin import services

    services.reset()
    settings.MQ_STORES = {"main": {"prefix": prefix, "url": redis_url, "log_max_lines": 7}}
    try:
        job_store = services.get_named_store("main")
        assert (job_store.log_max_lines, job_store.log_max_bytes) == (7, 256 * 1024)
    finally:
        services.reset()
