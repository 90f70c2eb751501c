"""Settings from the environment: DATABASE_URL, MQ_STORES, booleans, the secret key."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import django
import pytest
from django.core.exceptions import ImproperlyConfigured

from mqadmin.checks import check_store_settings
from mqadmin.config import (
    database_config,
    env_bool,
    env_list,
    load_or_create_secret_key,
    parse_database_url,
    parse_stores,
    seconds_setting,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_postgres_url_with_every_part() -> None:
    config = parse_database_url("postgres://mq:s%40cret@db.example.com:5433/jobs?sslmode=require")

    assert config == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "jobs",
        "USER": "mq",
        "PASSWORD": "s@cret",
        "HOST": "db.example.com",
        "PORT": "5433",
        "OPTIONS": {"sslmode": "require"},
    }


def test_postgresql_scheme_and_missing_parts() -> None:
    config = parse_database_url("postgresql://localhost/mqadmin")

    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert config["NAME"] == "mqadmin"
    assert config["HOST"] == "localhost"
    assert (config["USER"], config["PASSWORD"], config["PORT"]) == ("", "", "")
    assert "OPTIONS" not in config


def test_postgres_url_with_a_unix_socket_directory_and_ipv6() -> None:
    socket_dir = parse_database_url("postgres://me@%2Fvar%2Frun%2FPostgreSQL/db")
    assert socket_dir["HOST"] == "/var/run/PostgreSQL"
    assert socket_dir["USER"] == "me"

    ipv6 = parse_database_url("postgres://u:p@[::1]:6543/db")
    assert (ipv6["HOST"], ipv6["PORT"]) == ("::1", "6543")


@pytest.mark.parametrize(
    "url",
    [
        "mysql://u:p@host/db",
        "sqlite:///tmp/db.sqlite3",
        "postgres://u:p@host:5432/",
        "postgres://u:p@host:port/db",
    ],
)
def test_bad_database_urls_are_refused(url: str) -> None:
    with pytest.raises(ImproperlyConfigured):
        parse_database_url(url)


def test_sqlite_is_the_default_database(tmp_path: Path) -> None:
    config = database_config(None, tmp_path / "var" / "db.sqlite3")

    assert config == {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": tmp_path / "var" / "db.sqlite3",
    }
    assert (tmp_path / "var").is_dir()
    assert database_config("postgres://h/db", tmp_path / "x")["NAME"] == "db"


def test_env_bool_and_env_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MQ_FLAG", raising=False)
    assert env_bool("MQ_FLAG", default=True) is True
    for word, expected in [("0", False), ("off", False), ("YES", True), ("true", True)]:
        monkeypatch.setenv("MQ_FLAG", word)
        assert env_bool("MQ_FLAG", default=not expected) is expected
    monkeypatch.setenv("MQ_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured):
        env_bool("MQ_FLAG", default=True)

    monkeypatch.setenv("MQ_HOSTS", " a.example , ,b.example")
    assert env_list("MQ_HOSTS", default=["x"]) == ["a.example", "b.example"]
    monkeypatch.delenv("MQ_HOSTS")
    assert env_list("MQ_HOSTS", default=["x"]) == ["x"]


def test_seconds_settings_name_the_setting_when_refused() -> None:
    assert seconds_setting("T", 3) == 3.0
    assert seconds_setting("T", "2.5") == 2.5
    assert seconds_setting("R", 0, zero_ok=True) == 0.0
    for bad in (0, -1, "soon", True, float("inf"), float("nan"), None):
        with pytest.raises(ImproperlyConfigured, match=r"^T=.* must be a positive number"):
            seconds_setting("T", bad)
    for bad in (-0.5, "", "later", False):
        with pytest.raises(ImproperlyConfigured, match=r"^R=.* must be a number of seconds, 0 or"):
            seconds_setting("R", bad, zero_ok=True)


def test_mq_stores_default_and_json() -> None:
    assert parse_stores(None, default_prefix="jobs") == {"default": {"prefix": "jobs"}}
    assert parse_stores("  ", default_prefix="mq") == {"default": {"prefix": "mq"}}

    raw = json.dumps({"main": {"prefix": "mq"}, "billing": {"prefix": "b", "url": "redis://h"}})
    assert parse_stores(raw, default_prefix="mq") == {
        "main": {"prefix": "mq"},
        "billing": {"prefix": "b", "url": "redis://h"},
    }


@pytest.mark.parametrize(
    "raw",
    [
        "{not json",
        "[]",
        "{}",
        '{"main": "mq"}',
        '{"main": {"url": "redis://h"}}',
        '{"main": {"prefix": "{mq}"}}',
        '{"main": {"prefix": "mq", "url": 5}}',
    ],
)
def test_bad_mq_stores_are_refused(raw: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="MQ_STORES"):
        parse_stores(raw, default_prefix="mq")


def test_system_check_reports_a_malformed_mq_stores(settings: Any) -> None:
    settings.MQ_STORES = {"main": {"prefix": ""}}

    errors = check_store_settings()

    assert [error.id for error in errors] == ["mqadmin.E001"]
    assert "prefix" in errors[0].msg


def test_secret_key_is_generated_once_and_kept_private(tmp_path: Path) -> None:
    path = tmp_path / "var" / "secret_key"

    first = load_or_create_secret_key(path)
    second = load_or_create_secret_key(path)

    assert first == second
    assert len(first) >= 50
    assert path.read_text().strip() == first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["secret_key"]


def _settings_in_subprocess(env: dict[str, str]) -> dict[str, object]:
    code = (
        "import json, django; django.setup(); from django.conf import settings as s; "
        "print(json.dumps({'db': s.DATABASES['default'], 'debug': s.DEBUG, "
        "'hosts': s.ALLOWED_HOSTS, 'stores': s.MQ_STORES, 'url': s.MQ_REDIS_URL, "
        "'key': s.SECRET_KEY, 'apps': s.INSTALLED_APPS, 'mw': s.MIDDLEWARE}, default=str))"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MQ_", "DJANGO_"))}
    clean.pop("DATABASE_URL", None)
    full_env = {
        **clean,
        "DJANGO_SETTINGS_MODULE": "mqadmin.settings",
        "PYTHONPATH": str(REPO_ROOT),
        **env,
    }
    output = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    result: dict[str, object] = json.loads(output)
    return result


def test_settings_read_the_environment() -> None:
    loaded = _settings_in_subprocess(
        {
            "DJANGO_SECRET_KEY": "k" * 50,
            "DJANGO_DEBUG": "0",
            "DJANGO_ALLOWED_HOSTS": "mq.example.com,localhost",
            "DATABASE_URL": "postgres://mq:pw@db.internal:5432/mqadmin",
            "MQ_REDIS_URL": "redis://cache.internal:6379/2",
            "MQ_PREFIX": "jobs",
        }
    )

    assert loaded["key"] == "k" * 50
    assert loaded["debug"] is False
    assert loaded["hosts"] == ["mq.example.com", "localhost"]
    db = loaded["db"]
    assert isinstance(db, dict)
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["NAME"], db["HOST"], db["USER"]) == ("mqadmin", "db.internal", "mq")
    assert loaded["url"] == "redis://cache.internal:6379/2"
    assert loaded["stores"] == {"default": {"prefix": "jobs"}}
    assert "django_htmx.middleware.HtmxMiddleware" in loaded["mw"]  # type: ignore[operator]
    for app in ("django_htmx", "mqadmin", "django.contrib.admin"):
        assert app in loaded["apps"]  # type: ignore[operator]
    # The template partials package only where Django has no partials of its own.
    assert ("template_partials" in loaded["apps"]) is (django.VERSION < (6, 0))  # type: ignore[operator]


def test_settings_defaults_for_development() -> None:
    loaded = _settings_in_subprocess(
        {"DJANGO_SECRET_KEY": "k" * 50, "MQ_STORES": '{"a": {"prefix": "pa"}}'}
    )

    assert loaded["debug"] is True
    db = loaded["db"]
    assert isinstance(db, dict)
    assert db["ENGINE"] == "django.db.backends.sqlite3"
    assert db["NAME"] == str(REPO_ROOT / "var" / "db.sqlite3")
    assert loaded["url"] is None
    assert loaded["stores"] == {"a": {"prefix": "pa"}}


@pytest.mark.parametrize(
    ("env", "installed"),
    [
        ({}, True),
        # Jobs of one's own: the demo's handlers would compete with them.
        ({"MQ_JOB_MODULES": "myproject.jobs"}, False),
        ({"MQ_JOB_MODULES": "myproject.jobs", "MQ_DEMO": "1"}, True),
        ({"MQ_DEMO": "0"}, False),
    ],
)
def test_the_demo_handlers_are_installed_unless_told_otherwise(
    env: dict[str, str], installed: bool
) -> None:
    apps = _settings_in_subprocess(env)["apps"]
    assert isinstance(apps, list)
    assert ("mqadmin.demo" in apps) is installed
