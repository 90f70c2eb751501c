"""``manage.py ensure_admin``: make sure a superuser exists (used by ``make run``)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

# Environment variable with the password to give a newly created superuser.
PASSWORD_ENV = "MQ_ADMIN_PASSWORD"
# Bytes of randomness in a generated password (token_urlsafe: ~1.3 characters a byte).
GENERATED_PASSWORD_BYTES = 15


class Command(BaseCommand):
    help = (
        "Create the superuser 'admin' unless a superuser exists. Its password comes from "
        f"${PASSWORD_ENV}, else it is generated, stored in var/admin_password (mode 0600) "
        "and printed once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin", help="Username (default: admin).")

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        if user_model._default_manager.filter(is_superuser=True).exists():
            self.stdout.write("A superuser already exists.")
            return
        username = options["username"]
        if user_model._default_manager.filter(**{user_model.USERNAME_FIELD: username}).exists():
            raise CommandError(
                f"User {username!r} exists but is not a superuser; "
                f"run `manage.py createsuperuser` with another name."
            )
        # VAR_DIR is the development project's; a host project has at least BASE_DIR.
        var_dir = getattr(settings, "VAR_DIR", None) or (
            Path(getattr(settings, "BASE_DIR", None) or Path.cwd()) / "var"
        )
        password_file = Path(var_dir) / "admin_password"
        password = os.environ.get(PASSWORD_ENV)
        if password:
            origin = "env"
        elif _read(password_file):
            # A previous run generated it (the database was reset since): reuse it so
            # the password the user noted down keeps working.
            password, origin = _read(password_file), "file"
        else:
            password, origin = secrets.token_urlsafe(GENERATED_PASSWORD_BYTES), "generated"
            _write_private(password_file, password)
        fields = {user_model.USERNAME_FIELD: username, "password": password}
        email_field = user_model.get_email_field_name()
        if email_field != user_model.USERNAME_FIELD:
            # A user model that signs in by e-mail gets the name there, not an empty one.
            fields[email_field] = ""
        user_model._default_manager.db_manager().create_superuser(**fields)
        if origin == "env":
            self.stdout.write(
                self.style.SUCCESS(
                    f"Created superuser {username!r} with the password from ${PASSWORD_ENV}."
                )
            )
        elif origin == "file":
            self.stdout.write(
                self.style.SUCCESS(
                    f"Created superuser {username!r}; its password is in {password_file}."
                )
            )
        else:
            # Printed this once, to the terminal only (never logged).
            self.stdout.write(
                self.style.SUCCESS(f"Created superuser {username!r} with password: {password}")
            )
            self.stdout.write(
                f"The password is also stored in {password_file} (mode 0600); "
                "delete that file once you have changed the password."
            )


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")
