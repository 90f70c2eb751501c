"""``manage.py mqcheck [--store NAME] [--repair]``: the store consistency checker.

The work is ``store.consistency.check_store`` (bounded pages, a Lua re-check
per page); this command adds the progress bar, the summary per kind and the
exit status: 0 consistent, 1 problems found (and not all repaired), 2 error.
"""

from __future__ import annotations

import contextlib
import signal
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

#: Width of the progress bar, in characters.
BAR = 30
#: Problems listed per kind under the summary line.
SHOWN = 5


def bar(done: int, total: int | None) -> str:
    if not total:
        return f"{done:,}"
    share = min(1.0, done / total)
    filled = int(share * BAR)
    return f"[{'#' * filled}{'.' * (BAR - filled)}] {done:,}/{total:,} ({share:.0%})"


class Command(BaseCommand):
    help = (
        "Check a store's Redis state for consistency (dangling set members, jobs in no or "
        "the wrong state set, counters, indexes, dedupe entries, locks, flow counters) in "
        "bounded pages; --repair fixes each problem atomically. Exit status: 0 consistent, "
        "1 problems found and not all repaired, 2 on error."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--store", default="default", help="Store name in MQ_STORES (default: default)."
        )
        parser.add_argument(
            "--repair", action="store_true", help="Fix every problem found (atomically per item)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Every error exits 2 with one line (a full Redis, a lost connection, a bug)."""
        try:
            self._check(options["store"], options["repair"])
        except CommandError:
            raise
        except Exception as exc:  # the contract: 2 and one line, never a traceback
            text = " ".join(str(exc).split()) or type(exc).__name__
            raise CommandError(
                f"mqcheck failed: {type(exc).__name__}: {text}", returncode=2
            ) from exc

    def _check(self, name: str, repair: bool) -> None:
        from store import StoreFailure
        from store.consistency import KINDS, REPAIRS, check_store

        try:
            prefix = str(store_entry(name)["prefix"])
            job_store = open_store(name)
        except CommandError as exc:
            raise CommandError(str(exc), returncode=2) from exc
        line = ProgressLine(self)

        def progress(phase: str, done: int, total: int | None) -> None:
            line.report(f"{phase:<8} {bar(done, total)}")

        stop = StopFlag(lambda text: self.stderr.write("\n" + text))
        try:
            with stop.installed():
                report = check_store(job_store, repair=repair, progress=progress, should_stop=stop)
        except StoreFailure as exc:
            text = " ".join(str(exc).split())
            raise CommandError(f"mqcheck failed: {text}", returncode=2) from exc
        finally:
            line.done()
            with contextlib.suppress(Exception):  # never hide the error above
                close_store(job_store)

        what = "checked and repaired" if repair else "checked"
        self.stdout.write(
            f"{what} store {name!r} (prefix {prefix!r}): {report.jobs:,} jobs, "
            f"{report.keys:,} keys, {report.calls:,} Redis calls"
        )
        for kind, found in sorted(report.found.items()):
            fixed = report.repaired.get(kind, 0)
            text = f"  {kind}: {found} found"
            if repair:
                text += f", {fixed} repaired ({REPAIRS[kind]})"
            self.stdout.write(f"{text} -- {KINDS[kind]}")
            for problem in [p for p in report.samples if p.kind == kind][:SHOWN]:
                mark = "repaired" if problem.repaired else "found"
                detail = f" ({problem.detail})" if problem.detail else ""
                self.stdout.write(f"    {mark}: {problem.subject!r}{detail}")
        if report.unsettled:
            self.stdout.write(
                f"  {report.unsettled} counters moved while the check ran and were not "
                "judged (the store is busy): run mqcheck again"
            )
        if report.interrupted:
            assert stop.signum is not None
            raise CommandError(
                "stopped by signal before the end: the check is incomplete",
                returncode=SIGNAL_EXIT.get(signal.Signals(stop.signum), 1),
            )
        if report.problems == 0:
            self.stdout.write(self.style.SUCCESS("consistent: no problems found"))
        elif report.consistent:
            self.stdout.write(
                self.style.SUCCESS(f"consistent: {report.problems} problems found and repaired")
            )
        else:
            hint = "" if repair else "; run with --repair to fix them"
            raise CommandError(
                f"{report.unrepaired} of {report.problems} problems not repaired{hint}",
                returncode=1,
            )
