"""``manage.py redis_server start|stop|status``: the embedded Redis of this project."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = (
        "Start, stop or inspect the embedded Redis (used when MQ_REDIS_URL is unset). "
        "One server per data directory is shared by the dashboard, workers and commands."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        # The options every action takes (a CommandParser like the sub-parsers it is a parent of).
        common = CommandParser(add_help=False)
        common.add_argument(
            "--data-dir",
            type=Path,
            default=None,
            help=(
                "Data directory of the server (default: the MQ_DATA_DIR setting, "
                "$MQ_DATA_DIR, or <BASE_DIR>/var/redis)."
            ),
        )
        actions = parser.add_subparsers(dest="action", metavar="{start,stop,status}")
        actions.required = True
        actions.add_parser(
            "start", parents=[common], help="Start the server unless it already runs."
        )
        stop = actions.add_parser("stop", parents=[common], help="Shut the server down.")
        stop.add_argument(
            "--timeout",
            type=float,
            default=10.0,
            help="Seconds to wait for the server to exit (default 10).",
        )
        actions.add_parser("status", parents=[common], help="Show whether and how it runs.")

    def handle(self, *args: Any, **options: Any) -> None:
        from mqadmin.services import embedded_data_dir
        from store.embedded import EmbeddedRedis, EmbeddedRedisError

        server = EmbeddedRedis(options["data_dir"] or embedded_data_dir())
        action = options["action"]
        try:
            if action == "start":
                self._start(server)
            elif action == "stop":
                self._stop(server, options["timeout"])
            else:
                self._status(server)
        except EmbeddedRedisError as exc:
            raise CommandError(str(exc)) from exc

    def _start(self, server: Any) -> None:
        if getattr(settings, "MQ_REDIS_URL", None):
            # Not an error: starting it is harmless, but the user likely expects the
            # dashboard to use this server, and it will not.
            self.stderr.write(
                "Note: MQ_REDIS_URL is set; the dashboard and workers use that Redis, "
                "not this embedded one."
            )
        was_running = server.is_running()
        server.ensure_running()
        info = server.info()
        verb = "already running" if was_running else "started"
        self.stdout.write(
            self.style.SUCCESS(
                f"Embedded Redis {verb} (pid {info['pid']}, Redis {info['version']})."
            )
        )
        self._write_fields(
            [
                ("url", info["url"]),
                ("socket", info["socket"]),
                ("data dir", info["data_dir"]),
            ]
        )

    def _stop(self, server: Any, timeout: float) -> None:
        if server.stop(timeout=timeout):
            self.stdout.write(self.style.SUCCESS(f"Embedded Redis in {server.data_dir} stopped."))
        else:
            self.stdout.write(f"Embedded Redis in {server.data_dir} was not running.")

    def _status(self, server: Any) -> None:
        info = server.info()
        if not info["running"]:
            detail = f" (pid {info['pid']} exists but does not answer)" if info["pid"] else ""
            self.stdout.write(f"Embedded Redis is not running{detail}.")
            self._write_fields([("data dir", info["data_dir"]), ("socket", info["socket"])])
            return
        aof = "off"
        if info["aof"]:
            aof = f"on (appendfsync {info['appendfsync']})"
        self.stdout.write(self.style.SUCCESS("Embedded Redis is running."))
        self._write_fields(
            [
                ("pid", info["pid"]),
                ("version", info["version"]),
                ("url", info["url"]),
                ("socket", info["socket"]),
                ("data dir", info["data_dir"]),
                ("log", info["logfile"]),
                ("AOF", aof),
                ("memory", f"{info['used_memory_human']} ({info['used_memory']} bytes)"),
                ("uptime", f"{info['uptime_seconds']} s"),
            ]
        )

    def _write_fields(self, fields: list[tuple[str, Any]]) -> None:
        width = max(len(name) for name, _ in fields)
        for name, value in fields:
            self.stdout.write(f"  {name.ljust(width)}  {value}")
