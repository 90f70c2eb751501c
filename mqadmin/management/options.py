"""Command-line options shared by several management commands."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from mqadmin import services


def one_store(name: str | None) -> str:
    """The store a command changes: ``--store`` or the only configured one."""
    if name:
        return name
    names = list(services.configured_stores())
    if len(names) != 1:
        raise CommandError(f"several stores are configured ({', '.join(names)}): pass --store")
    return names[0]


def add_metrics_arguments(parser: Any) -> None:
    """``--metrics-port`` / ``--metrics-addr``: where a long-running command serves Prometheus."""
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics on this port (0: any free port; printed at start)",
    )
    parser.add_argument(
        "--metrics-addr",
        default="127.0.0.1",
        help="address the metrics server binds (default 127.0.0.1; 0.0.0.0 for all)",
    )
