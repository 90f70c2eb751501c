"""Reading the environment into settings values.

Kept apart from ``settings.py`` (and free of ``django.conf``) so each rule can be
tested on its own: booleans and lists from environment variables, ``DATABASE_URL``,
the ``MQ_STORES`` JSON, and the development secret key kept in ``var/secret_key``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

# Spellings accepted as "on" / "off" in boolean environment variables.
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off", ""})
# DATABASE_URL schemes that mean PostgreSQL.
POSTGRES_SCHEMES = frozenset({"postgres", "postgresql"})
# Length of a generated development secret key (characters of token_urlsafe output).
SECRET_KEY_BYTES = 50


def env_bool(name: str, default: bool) -> bool:
    """``$name`` read as a boolean (1/0, true/false, yes/no, on/off); ``default`` if unset."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no)")


def env_list(name: str, default: list[str]) -> list[str]:
    """``$name`` split on commas (blanks dropped); ``default`` if unset."""
    raw = os.environ.get(name)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def seconds_setting(name: str, value: Any, *, zero_ok: bool = False) -> float:
    """A number-of-seconds setting (``int``, ``float`` or numeric text) as seconds.

    Raises:
        ImproperlyConfigured: not a finite number above 0 (0 or more with ``zero_ok``).
    """
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = float("nan")
    low_ok = seconds >= 0 if zero_ok else seconds > 0
    if isinstance(value, bool) or not (low_ok and seconds < float("inf")):
        wanted = "a number of seconds, 0 or more" if zero_ok else "a positive number of seconds"
        raise ImproperlyConfigured(f"{name}={value!r} must be {wanted}")
    return seconds


def parse_database_url(url: str) -> dict[str, Any]:
    """A Django ``DATABASES`` entry for a PostgreSQL URL.

    ``postgres://user:pass@host:port/dbname?sslmode=require`` (or ``postgresql://``):
    user and password are percent-decoded, a percent-encoded host starting with ``/``
    names a unix-socket directory, and query parameters become libpq ``OPTIONS``.

    Raises:
        ImproperlyConfigured: not a PostgreSQL URL, or no database name.
    """
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ImproperlyConfigured(f"DATABASE_URL is not a valid URL: {exc}") from None
    if parts.scheme.lower() not in POSTGRES_SCHEMES:
        raise ImproperlyConfigured(
            f"DATABASE_URL must start with postgres:// or postgresql://, got {parts.scheme!r}://"
        )
    # The netloc is split by hand: urlsplit().hostname lowercases, which would corrupt
    # a percent-encoded socket directory such as %2Fvar%2Frun%2FPostgres.
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    if hostport.startswith("["):
        host, _, rest = hostport[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = hostport.partition(":")
    if port and not port.isdigit():
        raise ImproperlyConfigured(f"DATABASE_URL has a bad port {port!r}")
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise ImproperlyConfigured("DATABASE_URL has no database name (…/dbname)")
    config: dict[str, Any] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(user),
        "PASSWORD": unquote(password),
        "HOST": unquote(host),
        "PORT": port,
    }
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    if options:
        config["OPTIONS"] = options
    return config


def sqlite_database(path: Path) -> dict[str, Any]:
    """The default database: SQLite in ``path`` (its directory is created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return {"ENGINE": "django.db.backends.sqlite3", "NAME": path}


def database_config(url: str | None, sqlite_path: Path) -> dict[str, Any]:
    """PostgreSQL from ``url`` when given, else SQLite at ``sqlite_path``."""
    if url:
        return parse_database_url(url)
    return sqlite_database(sqlite_path)


def load_or_create_secret_key(path: Path) -> str:
    """The development secret key stored in ``path``, generated on first use.

    The file is created with mode 0600 and never overwritten, so every process (and
    every restart) signs sessions with the same key.  The key is never logged.
    """
    try:
        existing = path.read_text().strip()
    except FileNotFoundError:
        existing = ""
    if existing:
        return existing
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written to a private temporary file, then hard-linked into place: the key file
    # appears complete or not at all, and when several processes start at once
    # (`make run` starts the worker and the web server together) exactly one key wins.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(SECRET_KEY_BYTES) + "\n")
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    finally:
        temporary.unlink()
    key = path.read_text().strip()
    if not key:
        raise ImproperlyConfigured(f"{path} is empty; delete it or set DJANGO_SECRET_KEY")
    return key


def parse_stores(raw: str | None, default_prefix: str) -> dict[str, dict[str, Any]]:
    """``MQ_STORES`` from its JSON text, or the single default store.

    The JSON is an object mapping store names to ``{"prefix": ..., "url": ...}``
    (``url`` optional: it defaults to ``MQ_REDIS_URL``, then the embedded Redis).

    Raises:
        ImproperlyConfigured: invalid JSON or shape (see :func:`validate_stores`).
    """
    if not raw or not raw.strip():
        return {"default": {"prefix": default_prefix}}
    try:
        stores = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ImproperlyConfigured(f"MQ_STORES is not valid JSON: {exc}") from None
    problems = validate_stores(stores)
    if problems:
        raise ImproperlyConfigured("MQ_STORES: " + "; ".join(problems))
    return {name: dict(entry) for name, entry in stores.items()}


#: The keys of one MQ_STORES entry.
STORE_KEYS = ("prefix", "url", "indexes", "history_ttl", "log_max_lines", "log_max_bytes")


def validate_stores(stores: Any) -> list[str]:
    """Problems with an ``MQ_STORES`` value (an empty list when it is well formed)."""
    if not isinstance(stores, dict) or not stores:
        return ["must be a non-empty mapping of store name to {'prefix': ..., 'url': ...}"]
    problems: list[str] = []
    for name, entry in stores.items():
        if not isinstance(name, str) or not name:
            problems.append(f"store name {name!r} must be a non-empty string")
            continue
        if not isinstance(entry, dict):
            problems.append(f"store {name!r} must be a mapping")
            continue
        prefix = entry.get("prefix")
        if not isinstance(prefix, str) or not prefix:
            problems.append(f"store {name!r} needs a non-empty string 'prefix'")
        elif any(char in prefix for char in "{}"):
            problems.append(f"store {name!r}: prefix {prefix!r} must not contain braces")
        url = entry.get("url")
        if url is not None and not isinstance(url, str):
            problems.append(f"store {name!r}: 'url' must be a string or absent")
        unknown = set(entry) - set(STORE_KEYS)
        if unknown:
            problems.append(
                f"store {name!r}: unknown keys {sorted(unknown)} (known: {', '.join(STORE_KEYS)})"
            )
        for cap in ("log_max_lines", "log_max_bytes"):
            value = entry.get(cap)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                problems.append(f"store {name!r}: {cap!r} must be a whole number or absent")
    return problems
