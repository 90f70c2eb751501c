"""``manage.py mqstats``: job counts per store, queue and state (O(1) counters)."""

from __future__ import annotations

import json
import signal
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from mqadmin import runtime, services

STATES = ("waiting", "delayed", "active", "waiting-children", "completed", "failed", "cancelled")


class Command(BaseCommand):
    help = "Print job counts per store, queue and state."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--store", action="append", default=[], help="store name (repeatable; default: all)"
        )
        parser.add_argument("--json", action="store_true", help="print JSON")
        parser.add_argument(
            "--watch", type=float, default=0, metavar="SECONDS", help="refresh every N seconds"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from store.errors import StoreFailure

        names = options["store"] or list(services.configured_stores())
        stopping = False

        def stop(_signum: int, _frame: Any) -> None:
            nonlocal stopping
            stopping = True

        if options["watch"]:
            signal.signal(signal.SIGTERM, stop)
            signal.signal(signal.SIGINT, stop)
        while True:
            try:
                snapshot = {name: self._store_stats(name) for name in names}
            except StoreFailure as exc:
                raise CommandError(str(exc)) from exc
            self._print(snapshot, as_json=options["json"], watch=bool(options["watch"]))
            if not options["watch"] or stopping:
                return
            deadline = time.monotonic() + options["watch"]
            while time.monotonic() < deadline and not stopping:
                time.sleep(0.1)
            if stopping:
                return

    def _store_stats(self, name: str) -> dict[str, Any]:
        job_store = runtime.build_store(name)
        by_queue = job_store.counts_by_queue()
        return {
            "prefix": job_store.prefix,
            "paused": job_store.paused_queues(),
            "totals": job_store.counts(),
            "queues": {q: by_queue[q] for q in sorted(by_queue)},
        }

    def _print(self, snapshot: dict[str, Any], *, as_json: bool, watch: bool) -> None:
        if as_json:
            self.stdout.write(json.dumps(snapshot, sort_keys=True))
            return
        if watch and self.stdout.isatty():
            self.stdout.write("\x1b[2J\x1b[H", ending="")
        header = f"{'store/queue':<32}" + "".join(f"{s:>18}" for s in STATES)
        self.stdout.write(header)
        for name, stats in snapshot.items():
            self.stdout.write(
                f"{name + ' (' + stats['prefix'] + ')':<32}"
                + "".join(f"{stats['totals'][s]:>18}" for s in STATES)
            )
            for queue, counts in stats["queues"].items():
                mark = " [paused]" if queue in stats["paused"] else ""
                self.stdout.write(
                    f"{'  ' + queue + mark:<32}" + "".join(f"{counts[s]:>18}" for s in STATES)
                )
