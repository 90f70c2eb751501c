"""``manage.py reclaim_indexes --kind name|queue``: free the zsets of a disabled list index.

A store never deletes index zsets at boot (a sibling with the index still on may
read them), so once every store of a prefix has ``indexes.<kind>`` off, this
command frees the memory: SCAN + UNLINK in batches of 500, with a dry run.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from store import InvalidRequestError, RedisJobStore, StoreFailure
from store.indexes import ReclaimResult, normalize_indexes, ready_marker_key, reclaim_index

if TYPE_CHECKING:
    from store import RedisJobStore

# Seconds between two progress reports.
PROGRESS_INTERVAL_S = 1.0
# Exit status after a stop by signal (128 + signal number, as shells report it).
SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}


def store_entry(name: str) -> dict[str, Any]:
    """``settings.MQ_STORES[name]`` (the single ``MQ_PREFIX`` store when unset)."""
    stores: dict[str, dict[str, Any]] = getattr(settings, "MQ_STORES", None) or {
        "default": {"prefix": getattr(settings, "MQ_PREFIX", None) or "mq"}
    }
    if name not in stores:
        raise CommandError(
            f"no store named {name!r} in MQ_STORES (configured: {', '.join(sorted(stores))})"
        )
    entry = dict(stores[name])
    entry.setdefault("prefix", getattr(settings, "MQ_PREFIX", None) or "mq")
    return entry


def configured_indexes(name: str) -> dict[str, bool]:
    """The ``indexes`` setting of one store, normalised (per prefix: every process must agree)."""

    try:
        return normalize_indexes(store_entry(name).get("indexes", True))
    except InvalidRequestError as exc:
        raise CommandError(f"MQ_STORES[{name!r}]['indexes']: {exc}") from exc


def open_store(name: str) -> RedisJobStore:
    """A ``RedisJobStore`` for a configured store, with that store's ``indexes`` setting.

    Building it runs the store's boot reconcile, exactly as any other process of
    the prefix would (so a command never disagrees with the per-prefix setting).
    """
    from mqadmin.services import new_client

    entry = store_entry(name)
    url = entry.get("url") or getattr(settings, "MQ_REDIS_URL", None)
    try:
        client = new_client(url)
        return RedisJobStore(client, prefix=str(entry["prefix"]), indexes=configured_indexes(name))
    except StoreFailure as exc:
        raise CommandError(f"store {name!r}: {exc}") from exc
    except ValueError as exc:  # InvalidRequestError: a bad prefix or setting
        raise CommandError(f"store {name!r}: {exc}") from exc


def close_store(job_store: RedisJobStore) -> None:
    """Close a store of :func:`open_store` and the Redis client it opened for it."""
    job_store.close(close_client=True)


class StopFlag:
    """Set by SIGINT/SIGTERM while installed; a second signal interrupts at once."""

    def __init__(self, notify: Callable[[str], None]) -> None:
        self.signum: int | None = None
        self._notify = notify

    def __call__(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum
        self._notify(
            f"{signal.Signals(signum).name}: stopping after the current batch "
            "(send it again to abort at once)"
        )

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopFlag]:
        previous: dict[signal.Signals, Any] = {}
        try:
            for signum in SIGNAL_EXIT:
                previous[signum] = signal.signal(signum, self._handle)
        except ValueError:
            # Not the main thread (e.g. called from a worker thread): no signal handling.
            pass
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


class ProgressLine:
    """Periodic progress: one line rewritten in place on a terminal, else a line per report."""

    def __init__(self, command: BaseCommand) -> None:
        self._out = command.stdout
        self._tty = bool(getattr(command.stdout, "isatty", lambda: False)())
        self._last = 0.0
        self._open = False

    def report(self, text: str, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < PROGRESS_INTERVAL_S:
            return
        self._last = now
        if self._tty:
            self._out.write("\r\x1b[2K" + text, ending="")
            self._out.flush()
            self._open = True
        else:
            self._out.write(text)

    def done(self) -> None:
        if self._open:
            self._out.write("")
            self._open = False


def megabytes(size: int) -> str:
    return f"~{size / 1_000_000:.2f} MB"


class Command(BaseCommand):
    help = (
        "Delete the zsets of a list index (--kind name|queue) that every store of the "
        "prefix has disabled, in batches of 500 (SCAN + UNLINK), and its ready marker. "
        "Refuses while the index is enabled in this process's settings unless --force."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--kind", required=True, choices=("name", "queue"))
        parser.add_argument(
            "--store", default="default", help="Store name in MQ_STORES (default: default)."
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would go; delete nothing."
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="Reclaim even though this store has the index enabled (the next boot "
            "of an enabled store rebuilds it from scratch).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        kind: str = options["kind"]
        name: str = options["store"]
        dry_run: bool = options["dry_run"]
        prefix = str(store_entry(name)["prefix"])
        if configured_indexes(name)[kind] and not options["force"]:
            raise CommandError(
                f"refusing: the {kind} index is enabled for store {name!r} (prefix {prefix!r}) "
                f"in this process's settings. Stores with it enabled keep writing to it and "
                f"serve list(..., {kind}=...) from it, so deleting it would hide rows until "
                f"their next boot rebuilds it. Set MQ_STORES[{name!r}]['indexes'] to "
                f"{{{kind!r}: False}} in every process that uses prefix {prefix!r} (dashboard, "
                "workers, producers), restart them, then run this again; or pass --force."
            )
        job_store = open_store(name)
        verb = "would delete" if dry_run else "deleted"
        line = ProgressLine(self)

        def progress(so_far: ReclaimResult) -> None:
            line.report(
                f"{verb} {so_far.keys} keys ({so_far.sets} index sets), {so_far.members} members, "
                f"{megabytes(so_far.bytes_freed)} so far"
            )

        stop = StopFlag(lambda text: self.stderr.write("\n" + text))
        try:
            with stop.installed():
                result = reclaim_index(
                    job_store,
                    kind,
                    dry_run=dry_run,
                    force=options["force"],
                    progress=progress,
                    stop=stop,
                )
        except (StoreFailure, InvalidRequestError) as exc:
            raise CommandError(f"reclaim failed: {exc}") from exc
        finally:
            line.done()
            close_store(job_store)
        freed = "" if dry_run else " freed"
        summary = (
            f"{verb} {result.keys} keys ({result.sets} index sets), {result.members} members, "
            f"{megabytes(result.bytes_freed)}{freed} ({kind} index, store {name!r}, "
            f"prefix {prefix!r})"
        )
        if not result.complete:
            assert stop.signum is not None
            self.stdout.write(summary)
            raise CommandError(
                "stopped by signal before the end: the remaining zsets and the ready marker "
                "are still there; run the command again to finish",
                returncode=SIGNAL_EXIT.get(signal.Signals(stop.signum), 1),
            )
        self.stdout.write(self.style.SUCCESS(summary))
        if not dry_run:
            self.stdout.write(f"ready marker {ready_marker_key(job_store, kind)} deleted")
