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

from django.core.management.base import BaseCommand, CommandError, CommandParser

from mqadmin.management.commands.reclaim_indexes import (
    SIGNAL_EXIT,
    ProgressLine,
    StopFlag,
    close_store,
    open_store,
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
        from store import InvalidRequestError, StoreFailure
        from store.layout import BATCH, LAYOUT, migrate

        name: str = options["store"]
        batch: int = options["batch"]
        if not 1 <= batch <= BATCH:
            raise CommandError(f"--batch must be between 1 and {BATCH}, got {batch}")
        prefix = str(store_entry(name)["prefix"])
        job_store = open_store(name)
        line = ProgressLine(self)
        started = time.monotonic()
        stop = StopFlag(lambda text: self.stderr.write("\n" + text))
        try:
            total = int(job_store.client.zcard(job_store.keys.all))

            def progress(so_far: Any, force: bool = False) -> None:
                elapsed = max(time.monotonic() - started, 1e-9)
                line.report(
                    f"{bar(so_far.scanned, total)} {so_far.scanned:,}/{total:,} jobs, "
                    f"{so_far.rewritten:,} rewritten ({so_far.scanned / elapsed:,.0f} jobs/s)",
                    force=force,
                )

            with stop.installed():
                result = migrate(job_store, progress=progress, should_stop=stop, batch=batch)
            # Jobs added while it ran may take the count past the first ZCARD.
            total = max(total, result.scanned)
            progress(result, force=True)
        except (StoreFailure, InvalidRequestError) as exc:
            raise CommandError(f"migrate_store failed: {exc}") from exc
        finally:
            line.done()
            close_store(job_store)
        elapsed = max(time.monotonic() - started, 1e-9)
        summary = (
            f"scanned {result.scanned:,} jobs, rewrote {result.rewritten:,} hashes of store "
            f"{name!r} (prefix {prefix!r}) in {elapsed:.2f} s"
        )
        if result.stopped:
            assert stop.signum is not None
            self.stdout.write(summary)
            raise CommandError(
                f"stopped by signal before the end: the layout marker is still "
                f"{result.layout_before}; run the command again to finish",
                returncode=SIGNAL_EXIT.get(signal.Signals(stop.signum), 1),
            )
        self.stdout.write(self.style.SUCCESS(summary))
        self.stdout.write(
            f"layout {result.layout_before} -> {result.layout_after} (current: {LAYOUT})"
        )
