"""``manage.py reindex --kind name|queue``: a full rebuild of one list index, on demand.

Boot only heals the last minute before the ready marker; holes older than that
(a misconfigured index-less writer, a manual edit) need a full rebuild: the
marker is dropped, every row of ``all`` is re-indexed in calls of at most 500
ids, and the marker is stamped with the time the rebuild started.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from mqadmin.management.commands.reclaim_indexes import (
    ProgressLine,
    close_store,
    configured_indexes,
    open_store,
    store_entry,
)


class Command(BaseCommand):
    help = (
        "Rebuild a list index (--kind name|queue) of a store from scratch (paged: at most "
        "500 rows per Redis call), then stamp its ready marker."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--kind", required=True, choices=("name", "queue"))
        parser.add_argument(
            "--store", default="default", help="Store name in MQ_STORES (default: default)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from store import InvalidRequestError, StoreFailure
        from store.indexes import ready_marker, reindex

        kind: str = options["kind"]
        name: str = options["store"]
        prefix = str(store_entry(name)["prefix"])
        if not configured_indexes(name)[kind]:
            raise CommandError(
                f"refusing: the {kind} index is disabled for store {name!r} (prefix {prefix!r}) "
                f"in this process's settings (MQ_STORES[{name!r}]['indexes']), so no store "
                "would keep it up to date; enable it in every process of the prefix first."
            )
        job_store = open_store(name)
        line = ProgressLine(self)
        started = time.monotonic()

        def progress(rows: int) -> None:
            elapsed = max(time.monotonic() - started, 1e-9)
            line.report(f"indexed {rows} rows ({rows / elapsed:,.0f} rows/s)")

        try:
            rows = reindex(job_store, kind, progress=progress)
            marker = ready_marker(job_store, kind)
        except (StoreFailure, InvalidRequestError) as exc:
            raise CommandError(f"reindex failed: {exc}") from exc
        finally:
            line.done()
            close_store(job_store)
        elapsed = max(time.monotonic() - started, 1e-9)
        self.stdout.write(
            self.style.SUCCESS(
                f"reindexed {rows} rows of the {kind} index of store {name!r} "
                f"(prefix {prefix!r}) in {elapsed:.2f} s ({rows / elapsed:,.0f} rows/s); "
                f"ready marker {marker}"
            )
        )
