"""Management commands: redis_server start|stop|status and ensure_admin."""

from __future__ import annotations

import io
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import authenticate
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import RequestFactory

from store.embedded import EmbeddedRedis


def _login_request():
    """A login request: django-axes (the development project's throttle) needs one."""
    return RequestFactory().post("/accounts/login/")


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "redis"
    try:
        yield path
    finally:
        EmbeddedRedis(path).stop()


def test_redis_server_start_status_stop(data_dir: Path) -> None:
    server = EmbeddedRedis(data_dir)

    assert "not running" in run("redis_server", "status", "--data-dir", str(data_dir))

    started = run("redis_server", "start", "--data-dir", str(data_dir))
    assert "started" in started
    assert server.url in started
    assert server.is_running()
    pid = server.info()["pid"]

    again = run("redis_server", "start", "--data-dir", str(data_dir))
    assert "already running" in again
    assert server.info()["pid"] == pid

    status = run("redis_server", "status", "--data-dir", str(data_dir))
    assert "is running" in status
    assert str(pid) in status
    assert str(data_dir) in status
    assert "AOF" in status and "on (appendfsync everysec)" in status
    assert "memory" in status

    assert "stopped" in run("redis_server", "stop", "--data-dir", str(data_dir))
    assert not server.is_running()
    assert "was not running" in run("redis_server", "stop", "--data-dir", str(data_dir))


def test_redis_server_errors_become_command_errors(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MQ_REDIS_SERVER", str(tmp_path / "no-such-binary"))

    with pytest.raises(CommandError, match="MQ_REDIS_SERVER"):
        run("redis_server", "start", "--data-dir", str(data_dir))


def test_redis_server_needs_an_action() -> None:
    with pytest.raises(CommandError):
        run("redis_server")


@pytest.mark.django_db
def test_ensure_admin_generates_a_password_once(
    settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MQ_ADMIN_PASSWORD", raising=False)
    settings.VAR_DIR = tmp_path
    password_file = tmp_path / "admin_password"

    first = run("ensure_admin")

    password = password_file.read_text().strip()
    assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
    assert password in first
    assert str(password_file) in first
    user = authenticate(_login_request(), username="admin", password=password)
    assert user is not None and user.is_superuser

    second = run("ensure_admin")
    assert "already exists" in second
    assert password not in second


@pytest.mark.django_db
def test_ensure_admin_uses_mq_admin_password(
    settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MQ_ADMIN_PASSWORD", "chosen-by-the-operator")
    settings.VAR_DIR = tmp_path

    output = run("ensure_admin")

    assert "chosen-by-the-operator" not in output
    assert not (tmp_path / "admin_password").exists()
    assert (
        authenticate(_login_request(), username="admin", password="chosen-by-the-operator")
        is not None
    )


@pytest.mark.django_db
def test_ensure_admin_reuses_a_stored_password_after_a_database_reset(
    settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MQ_ADMIN_PASSWORD", raising=False)
    settings.VAR_DIR = tmp_path
    (tmp_path / "admin_password").write_text("noted-down-earlier\n")

    output = run("ensure_admin")

    assert "noted-down-earlier" not in output
    assert (
        authenticate(_login_request(), username="admin", password="noted-down-earlier") is not None
    )


@pytest.mark.django_db
def test_ensure_admin_refuses_a_plain_user_named_admin(
    django_user_model: type[User], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MQ_ADMIN_PASSWORD", "x-long-enough-password")
    django_user_model.objects.create_user(username="admin", password="pw")

    with pytest.raises(CommandError, match="not a superuser"):
        run("ensure_admin")
