"""``manage.py migrate_store``: convert a store to the current data layout.

Layout 1: walks every job (ZSCAN pages of ``all``) and rewrites, in atomic calls of at most
500 ids, the hashes written by that layout.  Layout 2: turns the all-jobs set and each list
index into a chunked set, at most 500 members per atomic call (store/layout.py).  Then it
stamps the layout marker.  A progress bar shows how far each pass got; SIGINT/SIGTERM stop
it after the current batch (run it again to finish: what was converted is skipped).
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
        "Convert a store to the current data layout (its job hashes, then the sets that list "
        "every job; atomic calls of at most --batch ids, default and maximum 500), then "
        "stamp the store's layout marker."
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
        from store import InvalidRequestError, StoreDefect, StoreFailure, check_prefix
        from store.layout import BATCH, LAYOUT, migrate, plain_job_count

        name: str = options["store"]
        batch: int = options["batch"]
        if not 1 <= batch <= BATCH:
            raise CommandError(f"--batch must be between 1 and {BATCH}, got {batch}")
        entry = store_entry(name)
        prefix = str(entry["prefix"])
        # Not a RedisJobStore: a store of an older layout refuses to start until converted.
        try:
            check_prefix(prefix)
            client = new_client(entry.get("url") or getattr(settings, "MQ_REDIS_URL", None))
        except (StoreFailure, ValueError) as exc:
            raise CommandError(f"store {name!r}: {exc}") from exc
        line = ProgressLine(self)
        started = time.monotonic()
        stop = StopFlag(lambda text: self.stderr.write("\n" + text))
        try:
            total = plain_job_count(client, prefix)

            phases = {"last": "rows"}

            def progress(so_far: Any, force: bool = False) -> None:
                elapsed = max(time.monotonic() - started, 1e-9)
                if so_far.phase == "sets" and phases["last"] == "rows" and so_far.scanned:
                    # The rows pass is over: its final figures on a line of their own.
                    phases["last"] = "sets"
                    text = (
                        f"jobs {bar(so_far.scanned, so_far.scanned)} {so_far.scanned:,}/"
                        f"{so_far.scanned:,} jobs, {so_far.rewritten:,} rewritten"
                    )
                    line.report(text, force=True)
                    line.done()
                phases["last"] = so_far.phase
                if so_far.phase == "sets":
                    text = (
                        f"sets {bar(so_far.moved, so_far.to_move)} {so_far.moved:,}/"
                        f"{so_far.to_move:,} members into chunks "
                        f"({so_far.moved / elapsed:,.0f}/s)"
                    )
                else:
                    text = (
                        f"jobs {bar(so_far.scanned, total)} {so_far.scanned:,}/{total:,} jobs, "
                        f"{so_far.rewritten:,} rewritten ({so_far.scanned / elapsed:,.0f} jobs/s)"
                    )
                line.report(text, force=force)

            with stop.installed():
                result = migrate(client, prefix, progress=progress, should_stop=stop, batch=batch)
            if result.scanned or result.moved:
                # Jobs added while it ran may take the count past the first ZCARD.
                total = max(total, result.scanned)
                result.to_move = max(result.to_move, result.moved)
                progress(result, force=True)
        except (StoreFailure, StoreDefect, InvalidRequestError) as exc:
            raise CommandError(f"migrate_store: store {name!r}: {exc}") from exc
        finally:
            line.done()
            client.close()
        elapsed = max(time.monotonic() - started, 1e-9)
        summary = (
            f"scanned {result.scanned:,} jobs, rewrote {result.rewritten:,} hashes, moved "
            f"{result.moved:,} members of {result.sets:,} sets into chunks in store {name!r} "
            f"(prefix {prefix!r}) in {elapsed:.2f} s"
        )
        if result.stopped:
            assert stop.signum is not None
            self.stdout.write(summary)
            raise CommandError(
                f"stopped by signal before the end: the store is still of layout "
                f"{result.layout_after}; run the command again to finish",
                returncode=SIGNAL_EXIT.get(signal.Signals(stop.signum), 1),
            )
        self.stdout.write(self.style.SUCCESS(summary))
        self.stdout.write(
            f"layout {result.layout_before or 'none'} -> {result.layout_after} (current: {LAYOUT})"
        )
