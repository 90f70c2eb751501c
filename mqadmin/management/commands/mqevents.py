"""``manage.py mqevents [--store NAME] [--job ID] [--queue Q] [--after ID] [--last N] [--follow]``.

Prints a store's event stream (docs/live.md), one line per event: the time, the event id, the
type, the job, its queue and name, the attempt and the event's data.  By default the newest
``--last`` events; ``--after`` starts after an event id (``0``: the oldest kept); ``--follow``
keeps printing new events as they come (Ctrl-C stops).  ``--max-len N`` sets how many events the
store keeps (0: none) and prints the setting.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from mqadmin import runtime
from mqadmin.management.options import one_store
from store.errors import InvalidRequestError, StoreFailure
from store.events import MAX_EVENTS_COUNT, newest_id
from store.records import JobEvent

#: How long one read of --follow blocks (ms) before it checks for Ctrl-C again.
FOLLOW_BLOCK_MS = 5_000


def event_line(event: JobEvent) -> str:
    stamp = datetime.fromtimestamp(event.at / 1000, tz=UTC).strftime("%H:%M:%S.%f")[:-3]
    data = "" if event.data is None else " " + json.dumps(event.data, ensure_ascii=False)
    return (
        f"{stamp} {event.id} {event.type:<16} {event.job_id} "
        f"{event.queue}/{event.name} #{event.attempt}{data}"
    )


class Command(BaseCommand):
    help = "Print (or follow) a store's event stream; set how many events it keeps."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--store", help="store name (default: the only configured store)")
        parser.add_argument("--job", help="only this job's events")
        parser.add_argument("--queue", help="only this queue's events")
        parser.add_argument("--after", help="start after this event id (0: the oldest kept)")
        parser.add_argument(
            "--last", type=int, default=20, help="without --after: the newest N (default 20)"
        )
        parser.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
        parser.add_argument(
            "--max-len", type=int, help="set how many events the store keeps (0: no events)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            job_store = runtime.build_store(one_store(options["store"]))
            if options["max_len"] is not None:
                job_store.set_events_max_len(options["max_len"])
                self.stdout.write(
                    f"the event stream keeps about {job_store.events_max_len()} events"
                )
                return
            self._print(job_store, options)
        except (InvalidRequestError, StoreFailure) as exc:
            raise CommandError(str(exc)) from exc
        except KeyboardInterrupt:
            return

    def _print(self, job_store: Any, options: dict[str, Any]) -> None:
        def wanted(event: JobEvent) -> bool:
            return (options["job"] is None or event.job_id == options["job"]) and (
                options["queue"] is None or event.queue == options["queue"]
            )

        after = options["after"]
        if after is None:
            last = options["last"]
            if not 0 <= last <= MAX_EVENTS_COUNT:
                raise CommandError(f"--last must be from 0 to {MAX_EVENTS_COUNT}")
            newest = job_store.newest_events(last) if last else []
            for event in newest:
                if wanted(event):
                    self.stdout.write(event_line(event))
            after = newest[-1].id if newest else job_store.last_event_id()
        while True:
            block = FOLLOW_BLOCK_MS if options["follow"] else None
            found = job_store.events(after, block_ms=block, count=MAX_EVENTS_COUNT)
            for event in found:
                if wanted(event):
                    self.stdout.write(event_line(event))
            after = newest_id(found, after)
            if not found and not options["follow"]:
                return
            self.stdout.flush()
