"""``manage.py mqhealth``: an exec probe for orchestrators (exit 0 healthy, 1 not).

* Without options: every configured store (or each ``--store``) answers PING.
* ``--worker``: a worker process of *this host* serving at least one queue has
  announced itself in the store within ``--max-age`` seconds (workers refresh their
  presence every 10 s; a clean stop removes it).  ``--queue`` narrows it to workers
  serving that queue.
* ``--sweepers``: the same for a maintenance-only process of this host
  (``runsweepers``), i.e. one that announces no queue.

One line of output says what was found; it never names a Redis URL or password.
"""

from __future__ import annotations

import socket
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from mqadmin import services


class Command(BaseCommand):
    help = "Exit 0 when the stores answer (with --worker: when a live worker of this host is seen)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--store", action="append", default=[], help="store name (repeatable; default: all)"
        )
        parser.add_argument(
            "--worker",
            action="store_true",
            help="require a fresh worker heartbeat from this host",
        )
        parser.add_argument(
            "--sweepers",
            action="store_true",
            help="require a fresh heartbeat of a maintenance-only process (runsweepers) of this host",
        )
        parser.add_argument(
            "--max-age",
            type=float,
            default=30.0,
            metavar="SECONDS",
            help="how fresh the heartbeat must be (default 30; workers beat every 10 s)",
        )
        parser.add_argument("--queue", default=None, help="only workers serving this queue count")
        parser.add_argument(
            "--host", default=None, help="the host to look for (default: this host's name)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        configured = services.configured_stores()
        names = options["store"] or list(configured)
        unknown = [n for n in names if n not in configured]
        if unknown:
            raise CommandError(f"no store named {', '.join(map(repr, unknown))} in MQ_STORES")
        if options["max_age"] <= 0:
            raise CommandError("--max-age must be positive")
        down = [name for name in names if not self._answers(name)]
        if down:
            raise CommandError(f"unhealthy: store(s) not answering: {', '.join(down)}")
        if options["worker"] and options["sweepers"]:
            raise CommandError("give --worker or --sweepers, not both")
        if options["sweepers"] and options["queue"]:
            raise CommandError("--queue goes with --worker (sweepers serve no queue)")
        if not options["worker"] and not options["sweepers"]:
            self.stdout.write(f"ok: {len(names)} store(s) answering")
            return
        kind = "worker" if options["worker"] else "sweeper"
        host = options["host"] or socket.gethostname()
        max_age_ms = int(options["max_age"] * 1000)
        found = 0
        for name in names:
            found += self._fresh(name, host, max_age_ms, kind, options["queue"])
        where = f" serving queue {options['queue']!r}" if options["queue"] else ""
        if not found:
            raise CommandError(
                f"unhealthy: no {kind} of host {host!r}{where} seen in the last "
                f"{options['max_age']:g} s"
            )
        self.stdout.write(f"ok: {found} live {kind}(s) of host {host!r}{where}")

    def _answers(self, name: str) -> bool:
        try:
            client, _ = services.get_client(services.store_url(services.configured_stores()[name]))
            client.ping()
        except Exception as exc:  # any failure means "not healthy"
            self.stderr.write(f"store {name}: {type(exc).__name__}")
            return False
        return True

    def _fresh(self, name: str, host: str, max_age_ms: int, kind: str, queue: str | None) -> int:
        from store.errors import StoreFailure

        try:
            job_store = services.get_named_store(name)
            # The store's own 60 s liveness window (it prunes only older entries).
            workers = job_store.live_workers()
            now = job_store.now()
        except (StoreFailure, OSError) as exc:
            raise CommandError(f"unhealthy: store {name}: {type(exc).__name__}") from exc
        return sum(
            1
            for w in workers
            if w.host == host
            and now - w.last_seen <= max_age_ms
            and (bool(w.queues) if kind == "worker" else not w.queues)
            and (queue is None or queue in w.queues)
        )
