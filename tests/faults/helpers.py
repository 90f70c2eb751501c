"""Helpers of the fault tests: the keyspace of a store, the consistency check, big values."""

from __future__ import annotations

import re
from typing import Any

from store import RedisJobStore
from store.consistency import check_store

#: The sizes the issue names: over the old ~252 KB failure point, and a few MB.
SIZES = {"300KB": 300_000, "2MB": 2_000_000}


def keyspace(client: Any, prefix: str) -> dict[str, tuple[bytes, bool]]:
    """Every key of store ``prefix``: its serialized value (DUMP) and whether it has a TTL."""
    pattern = "{" + re.sub(r"([*?\[\]\\])", r"\\\1", prefix) + "}*"
    out: dict[str, tuple[bytes, bool]] = {}
    for key in client.scan_iter(match=pattern, count=500):
        out[key] = (client.dump(key), client.pttl(key) > 0)
    return out


def assert_consistent(store: RedisJobStore) -> None:
    """What ``mqcheck`` runs: no problem of any kind in the whole store."""
    report = check_store(store, save=False)
    assert report.consistent and report.problems == 0, report.to_json()


def error_exit(message_chars: int, traceback_chars: int = 0) -> dict[str, Any]:
    """A failure exit shaped like the worker's (store.jobs.encode_failure)."""
    error: dict[str, Any] = {
        "type": "BoomError",
        "module": "app.jobs",
        "message": "m" * message_chars,
        "kind": "error",
    }
    if traceback_chars:
        error["traceback"] = "t" * traceback_chars
    return {"error": error}
