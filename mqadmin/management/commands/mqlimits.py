"""``manage.py mqlimits [QUEUE] [--store NAME] [--concurrency N] [--rate N/PERIOD] [--clear]``.

Shows or changes queue limits (docs/flow-control.md).  Without QUEUE: every
limited queue of the store(s) with its settings and live usage; with QUEUE
alone: that queue.  ``--concurrency`` / ``--rate`` change those kinds of limit and
keep the others as they are (``none`` removes that kind); ``--clear`` removes them
all.  Input is checked before
anything is written.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from mqadmin import runtime, services
from mqadmin.management.options import one_store
from store.errors import InvalidRequestError, StoreFailure
from store.flow_control import format_rate, parse_rate

NONE = "none"


def rate_option(text: str) -> Any:
    """``N/PERIOD`` -> store.Rate (None for "none"); CommandError when malformed."""
    if text.strip().lower() == NONE:
        return None
    try:
        return parse_rate(text)
    except InvalidRequestError as exc:
        raise CommandError(f"--rate {text!r}: {exc} (or 'none')") from exc


def parse_count(text: str, option: str) -> int | None:
    """A positive whole number (None for "none"); CommandError otherwise."""
    if text.strip().lower() == NONE:
        return None
    if not re.fullmatch(r"\s*\d+\s*", text) or int(text) < 1:
        raise CommandError(f"{option} {text!r}: expected a whole number of at least 1 (or 'none')")
    return int(text)


def rate_text(rate: Any) -> str:
    return "-" if rate is None else format_rate(rate)


def format_until(until: int | None, now: int) -> str:
    if until is None or until <= now:
        return "-"
    stamp = datetime.fromtimestamp(until / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return f"{stamp}Z"


class Command(BaseCommand):
    help = "Show, set or clear queue limits (concurrency, rate) and their live usage."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queue", nargs="?", help="queue name (default: every limited queue)")
        parser.add_argument(
            "--store",
            help="store name (default: every store to show; the only configured store to change)",
        )
        parser.add_argument("--concurrency", metavar="N", help="claimed jobs at once, or 'none'")
        parser.add_argument(
            "--rate",
            metavar="N/PERIOD",
            help="claims per period: 100/s, 10/min, 5/h, 20/250ms, or 'none'",
        )
        parser.add_argument(
            "--group-concurrency",
            metavar="N",
            help="claimed jobs at once per job group (EnqueueRequest.group), or 'none'",
        )
        parser.add_argument(
            "--group-rate", metavar="N/PERIOD", help="claims per period per job group, or 'none'"
        )
        parser.add_argument("--clear", action="store_true", help="remove every limit of QUEUE")

    def handle(self, *args: Any, **options: Any) -> None:
        queue = options["queue"]
        settings_given = any(
            options[key] is not None
            for key in ("concurrency", "rate", "group_concurrency", "group_rate")
        )
        if settings_given and options["clear"]:
            raise CommandError("--clear cannot be combined with limit settings")
        if (settings_given or options["clear"]) and not queue:
            raise CommandError("name the QUEUE whose limits to change")
        if queue is not None and not queue:
            raise CommandError("the queue name must not be empty")
        try:
            if settings_given or options["clear"]:
                limits: dict[str, Any] = {}
                if settings_given:
                    limits = self._parse(options)
                job_store = runtime.build_store(one_store(options["store"]))
                if options["clear"]:
                    job_store.clear_queue_limits(queue)
                else:
                    # An operator edits one kind at a time: the kinds not given stay.
                    current = job_store.queue_limits(queue)
                    kept = {
                        "concurrency": current.concurrency,
                        "rate": current.rate,
                        "group_concurrency": current.group_concurrency,
                        "group_rate": current.group_rate,
                    }
                    job_store.set_queue_limits(queue, **{**kept, **limits})
            names = [options["store"]] if options["store"] else list(services.configured_stores())
            rows = []
            for name in names:
                job_store = runtime.build_store(name)
                queues = [queue] if queue else job_store.limited_queues()
                now = job_store.now()
                for each in queues:
                    rows.append((name, job_store.queue_limits(each), now))
        except (InvalidRequestError, StoreFailure) as exc:
            raise CommandError(str(exc)) from exc
        self._print(rows)

    def _parse(self, options: dict[str, Any]) -> dict[str, Any]:
        parsed: dict[str, Any] = {}
        for key, option, parse in (
            ("concurrency", "--concurrency", parse_count),
            ("group_concurrency", "--group-concurrency", parse_count),
        ):
            if options[key] is not None:
                parsed[key] = parse(options[key], option)
        for key in ("rate", "group_rate"):
            if options[key] is not None:
                parsed[key] = rate_option(options[key])
        return parsed

    def _print(self, rows: list[tuple[str, Any, int]]) -> None:
        if not rows:
            self.stdout.write("no limited queues")
            return
        header = (
            "store",
            "queue",
            "active/concurrency",
            "rate",
            "group concurrency",
            "group rate",
            "waiting",
            "throttled until",
        )
        lines = [header]
        for name, limits, now in rows:
            concurrency = "-" if limits.concurrency is None else str(limits.concurrency)
            lines.append(
                (
                    name,
                    limits.queue,
                    f"{limits.active}/{concurrency}" if limits.limited else "not limited",
                    rate_text(limits.rate),
                    "-" if limits.group_concurrency is None else str(limits.group_concurrency),
                    rate_text(limits.group_rate),
                    str(limits.waiting),
                    format_until(limits.throttled_until, now),
                )
            )
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        for line in lines:
            self.stdout.write(
                "  ".join(
                    cell.ljust(width) for cell, width in zip(line, widths, strict=True)
                ).rstrip()
            )
