"""``manage.py migrate_store``: convert a store's job hashes to the current data layout.

Walks every job (ZSCAN pages of ``all``) and rewrites, in atomic calls of at most 500 ids,
the hashes written by an older layout (store/layout.py); then stamps the layout marker.
A progress bar shows how far it got; SIGINT/SIGTERM stop it after the current batch (run it
again to finish: hashes already converted are skipped).
"""

from __future__ import annotations

import signal
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from mqadmin.management.commands.reclaim_indexes import (
    SIGNAL_EXIT,
    ProgressLine,
    StopFlag,
    store_entry,
)

BAR_WIDTH = 30


def bar(done: int, total: int) -> str:
    share = 1.0 if total <= 0 else min(done / total, 1.0)
    filled = int(round(share * BAR_WIDTH))
    return f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {share * 100:3.0f}%"


class Command(BaseCommand):
    help = (
        "Convert the job hashes of a store to the current data layout (atomic calls of at "
        "most --batch ids, default and maximum 500), then stamp the store's layout marker."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--store", default="default", help="Store name in MQ_STORES (default: default)."
        )
        parser.add_argument(
            "--batch", type=int, default=500, help="Ids per Redis call (1..500, default 500)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from mqadmin.services import new_client
        from store import InvalidRequestError, StoreDefect, StoreFailure
        from store.keys import StoreKeys
        from store.layout import BATCH, LAYOUT, migrate
        from store.redis_store import redis_errors

        name: str = options["store"]
        batch: int = options["batch"]
        if not 1 <= batch <= BATCH:
            raise CommandError(f"--batch must be between 1 and {BATCH}, got {batch}")
        entry = store_entry(name)
        prefix = str(entry["prefix"])
        # Not a RedisJobStore: a store of an older layout refuses to start until converted.
        try:
            keys = StoreKeys(prefix)
            client = new_client(entry.get("url") or getattr(settings, "MQ_REDIS_URL", None))
        except (StoreFailure, ValueError) as exc:
            raise CommandError(f"store {name!r}: {exc}") from exc
        line = ProgressLine(self)
        started = time.monotonic()
        stop = StopFlag(lambda text: self.stderr.write("\n" + text))
        try:
            with redis_errors("migrate_store"):
                total = int(client.zcard(keys.all))

            def progress(so_far: Any, force: bool = False) -> None:
                elapsed = max(time.monotonic() - started, 1e-9)
                line.report(
                    f"{bar(so_far.scanned, total)} {so_far.scanned:,}/{total:,} jobs, "
                    f"{so_far.rewritten:,} rewritten ({so_far.scanned / elapsed:,.0f} jobs/s)",
                    force=force,
                )

            with stop.installed():
                result = migrate(client, prefix, progress=progress, should_stop=stop, batch=batch)
            if result.scanned:
                # Jobs added while it ran may take the count past the first ZCARD.
                total = max(total, result.scanned)
                progress(result, force=True)
        except (StoreFailure, StoreDefect, InvalidRequestError) as exc:
            raise CommandError(f"migrate_store: store {name!r}: {exc}") from exc
        finally:
            line.done()
            client.close()
        elapsed = max(time.monotonic() - started, 1e-9)
        summary = (
            f"scanned {result.scanned:,} jobs, rewrote {result.rewritten:,} hashes of store "
            f"{name!r} (prefix {prefix!r}) in {elapsed:.2f} s"
        )
        if result.stopped:
            assert stop.signum is not None
            self.stdout.write(summary)
            raise CommandError(
                f"stopped by signal before the end: the store is still of layout "
                f"{result.layout_before}; run the command again to finish",
                returncode=SIGNAL_EXIT.get(signal.Signals(stop.signum), 1),
            )
        self.stdout.write(self.style.SUCCESS(summary))
        self.stdout.write(
            f"layout {result.layout_before or 'none'} -> {result.layout_after} (current: {LAYOUT})"
        )
