"""The operations pages (``views/operations.py``): outbox, failures, workers, indexes, schedules.

Each page's template is named after it (``outbox.html``, ``failures.html``, ...); the
audit log, the remaining page of the family, reads the database only.  A page that
shows every store reads them through :func:`mqadmin.services.for_each_store`: a
store that cannot be reached gets its row with the reason, the others show.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any
from urllib.parse import urlencode

from mqadmin import actions, cadence, services
from mqadmin.queries.common import LIVE_WORKER_MS
from mqadmin.services import open_store, reaching
from store.consistency import KINDS, last_check
from store.flows import outbox_entry_time
from store.insights import ERROR_GROUPS_MAX_PAGE

# ---------------------------------------------------------------------- outbox


@dataclass
class OutboxStore:
    store: str
    depth: int = 0
    oldest_at: int | None = None
    workers: list[Any] = field(default_factory=list)
    routes: set[str] = field(default_factory=set)
    unroutable: dict[str, tuple[int, int]] = field(default_factory=dict)
    error: str | None = None

    def routable(self, store_key: str) -> bool:
        return store_key in self.routes

    @property
    def sorted_routes(self) -> list[str]:
        return sorted(self.routes)


@dataclass
class OutboxRow:
    entry: Any
    seq: int
    appended_at: int | None
    target_store: str
    target_configured: bool
    routable: bool


@dataclass
class OutboxPage:
    summary: OutboxStore
    rows: list[OutboxRow]
    next_after: int | None
    targets: list[tuple[str, int, bool, bool]]


OUTBOX_PAGE = 50


def outbox_overview() -> list[OutboxStore]:
    """Per store: outbox depth, age of the oldest entry, live workers and their routes."""

    def read(store: services.ConfiguredStore, job_store: Any) -> OutboxStore:
        summary = OutboxStore(store=store.name)
        summary.depth = job_store.outbox_depth()
        oldest = job_store.peek_outbox(limit=1)
        summary.oldest_at = outbox_entry_time(oldest[0]) if oldest else None
        summary.workers = job_store.live_workers(max_age_ms=LIVE_WORKER_MS)
        summary.unroutable = job_store.unroutable_outbox()
        for worker in summary.workers:
            summary.routes.update(worker.routes)
        return summary

    def failed(store: services.ConfiguredStore, error: str) -> OutboxStore:
        return OutboxStore(store=store.name, error=error)

    return services.for_each_store(read, failed)


def outbox_page(
    summary: OutboxStore, after_seq: int | None, limit: int | None = None
) -> OutboxPage:
    """One page of a store's outbox, oldest first, continuing after entry ``after_seq``."""

    limit = limit or OUTBOX_PAGE
    job_store = open_store(summary.store)
    configured = services.configured_stores()
    with reaching(summary.store):
        # peek_outbox continues after an issued entry id "<seq> NUL <document>";
        # only the sequence part is read, so the URL carries just the number.
        after = f"{after_seq}\0" if after_seq is not None else None
        entries = job_store.peek_outbox(limit=limit + 1, after=after)
    more = len(entries) > limit
    entries = entries[:limit]
    rows = [
        OutboxRow(
            entry=entry,
            seq=int(entry.id.partition("\0")[0]),
            appended_at=outbox_entry_time(entry),
            target_store=entry.parent_store_key,
            target_configured=entry.parent_store_key in configured,
            routable=summary.routable(entry.parent_store_key),
        )
        for entry in entries
    ]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.target_store] = counts.get(row.target_store, 0) + 1
    targets = [
        (key, n, key in configured, summary.routable(key)) for key, n in sorted(counts.items())
    ]
    return OutboxPage(
        summary=summary,
        rows=rows,
        next_after=rows[-1].seq if more and rows else None,
        targets=targets,
    )


# ---------------------------------------------------------------------- failures


#: Orders of the failures page: field of ErrorGroup -> its column's label.
FAILURE_SORTS = {"last_seen": "last seen", "count": "failures", "first_seen": "first seen"}
#: Time windows of the failures page (groups last seen within), in ms (None: all).
FAILURE_WINDOWS: dict[str, int | None] = {
    "all": None,
    "1h": 3_600_000,
    "24h": 24 * 3_600_000,
    "7d": 7 * 24 * 3_600_000,
}
FAILURE_WINDOW_LABELS = {
    "all": "any time",
    "1h": "last hour",
    "24h": "last 24 hours",
    "7d": "last 7 days",
}
#: Groups the page reads: as many as one store call returns, sorted and filtered here.
FAILURE_GROUPS = ERROR_GROUPS_MAX_PAGE


@dataclass(frozen=True)
class FailureFilters:
    """The failures page's query: store, order and filters (validated by FailuresForm)."""

    store: str
    sort: str = "last_seen"
    order: str = "desc"
    queue: str = ""
    name: str = ""
    window: str = "all"

    @property
    def filtered(self) -> bool:
        return bool(self.queue or self.name or self.window != "all")

    def query(self, **overrides: str) -> str:
        """This query string (defaults left out), with ``overrides`` applied."""
        values = {**asdict(self), **overrides}
        defaults = {"sort": "last_seen", "order": "desc", "queue": "", "name": "", "window": "all"}
        return urlencode({k: v for k, v in values.items() if k == "store" or v != defaults.get(k)})

    def sort_query(self, field: str) -> str:
        """The query a column header links to: that column, descending first, then toggled."""
        if field == self.sort:
            return self.query(sort=field, order="asc" if self.order == "desc" else "desc")
        return self.query(sort=field, order="desc")

    @property
    def sort_links(self) -> dict[str, str]:
        return {field: self.sort_query(field) for field in FAILURE_SORTS}


@dataclass
class FailuresView:
    store: str
    groups: list[Any]
    failed_total: int
    now: int
    filters: FailureFilters = field(default_factory=lambda: FailureFilters(""))
    #: Groups read from the store (the most recently seen, at most FAILURE_GROUPS).
    read: int = 0

    @property
    def capped(self) -> bool:
        """Whether older groups exist beyond what was read (the store keeps up to 1,000)."""
        return self.read >= FAILURE_GROUPS


def select_groups(groups: list[Any], filters: FailureFilters, now: int) -> list[Any]:
    """The groups matching the filters, in the requested order (ties by id: a stable page)."""
    window = FAILURE_WINDOWS[filters.window]
    since = None if window is None else now - window
    kept = [
        g
        for g in groups
        if (since is None or g.last_seen >= since)
        and g.may_have_failed_in(queue=filters.queue or None, name=filters.name or None)
    ]
    kept.sort(key=lambda g: g.id)
    kept.sort(key=lambda g: getattr(g, filters.sort), reverse=filters.order == "desc")
    return kept


def failures_view(store_name: str, filters: FailureFilters | None = None) -> FailuresView:
    """A store's failures grouped by error type and normalised message (fail-time aggregates),
    sorted and filtered over the FAILURE_GROUPS groups seen most recently."""
    filters = filters or FailureFilters(store_name)
    job_store = open_store(store_name)
    with reaching(store_name):
        groups = job_store.error_groups(limit=FAILURE_GROUPS)
        failed = job_store.counts().get("failed", 0)
    now = job_store.now()
    return FailuresView(
        store_name,
        select_groups(groups, filters, now),
        int(failed),
        now,
        filters=filters,
        read=len(groups),
    )


# ---------------------------------------------------------------------- workers


@dataclass
class WorkerStore:
    store: str
    workers: list[Any] = field(default_factory=list)
    #: Queues that hold jobs but that no live worker consumes.
    unserved: list[str] = field(default_factory=list)
    now: int = 0
    error: str | None = None


def workers_overview() -> list[WorkerStore]:
    """Per store: the live worker processes (bounded presence records) and unserved queues."""

    def read(store: services.ConfiguredStore, job_store: Any) -> WorkerStore:
        item = WorkerStore(store=store.name)
        controls = job_store.worker_controls()
        # The state shown is the command given when the worker has not answered it yet.
        item.workers = [
            replace(worker, state=actions.worker_state(worker, controls.get(worker.worker_id)))
            for worker in job_store.live_workers(max_age_ms=LIVE_WORKER_MS)
        ]
        queues = job_store.queue_names()
        item.now = job_store.now()
        consumed = {queue for worker in item.workers for queue in worker.queues}
        item.unserved = [queue for queue in queues if queue not in consumed]
        return item

    def failed(store: services.ConfiguredStore, error: str) -> WorkerStore:
        return WorkerStore(store=store.name, error=error)

    return services.for_each_store(read, failed)


# ---------------------------------------------------------------------- indexes


@dataclass
class LastCheck:
    """The last ``mqcheck`` report of a store, as the index status page shows it."""

    finished_at: int
    repair: bool
    consistent: bool
    interrupted: bool
    jobs: int
    unsettled: int
    #: (kind, found, repaired, what the kind means), by kind.
    kinds: list[tuple[str, int, int, str]] = field(default_factory=list)


def last_check_summary(data: Mapping[str, Any] | None) -> LastCheck | None:
    """A saved report made presentable; None when there is none (or it is unreadable)."""

    if not data:
        return None
    try:
        found = {str(k): int(v) for k, v in dict(data.get("found") or {}).items()}
        repaired = {str(k): int(v) for k, v in dict(data.get("repaired") or {}).items()}
        return LastCheck(
            finished_at=int(data.get("finished_at") or 0),
            repair=bool(data.get("repair")),
            consistent=bool(data.get("consistent")),
            interrupted=bool(data.get("interrupted")),
            jobs=int(data.get("jobs") or 0),
            unsettled=int(data.get("unsettled") or 0),
            kinds=[
                (kind, n, repaired.get(kind, 0), KINDS.get(kind, kind))
                for kind, n in sorted(found.items())
            ],
        )
    except (TypeError, ValueError):
        return None


@dataclass
class IndexStore:
    store: str
    prefix: str
    kinds: list[services.IndexSummary] = field(default_factory=list)
    error: str | None = None
    check: LastCheck | None = None


def index_overview() -> list[IndexStore]:
    """Per store and index kind: enabled, ready marker, zsets and members, the last check."""

    def read(store: services.ConfiguredStore, job_store: Any) -> IndexStore:
        return IndexStore(
            store=store.name,
            prefix=store.prefix,
            kinds=services.bounded_index_status(job_store),
            check=last_check_summary(last_check(job_store)),
        )

    def failed(store: services.ConfiguredStore, error: str) -> IndexStore:
        return IndexStore(store=store.name, prefix=store.prefix, error=error)

    return services.for_each_store(read, failed)


# ---------------------------------------------------------------------- schedules


#: A schedule is overdue when its next run is this far in the past: twice the
#: default schedule sweep interval of workers and runsweepers (15 s).
OVERDUE_AFTER_MS = 30_000

#: Schedules the schedules page shows per store (each reads its last runs).
MAX_SCHEDULE_ROWS = 200


@dataclass
class ScheduleRow:
    record: Any
    cadence: str
    tz: str
    next_runs: list[int]
    overdue_by: int
    paused: bool = False
    #: The latest jobs it fired (newest first), with their states.
    last_runs: list[Any] = field(default_factory=list)


@dataclass
class ScheduleStore:
    store: str
    rows: list[ScheduleRow] = field(default_factory=list)
    error: str | None = None
    now: int = 0


def schedules_overview() -> list[ScheduleStore]:
    """Per store: its schedules (at most MAX_SCHEDULE_ROWS), next runs, overdue flags, last runs."""

    def read(store: services.ConfiguredStore, job_store: Any) -> ScheduleStore:
        records = job_store.list_schedules()[:MAX_SCHEDULE_ROWS]
        paused = job_store.paused_schedules()
        last_runs = {r.key: job_store.schedule_last_runs(r) for r in records}
        now = job_store.now()
        item = ScheduleStore(store=store.name, now=now)
        for record in records:
            overdue_by = now - int(record.next_run_at)
            item.rows.append(
                ScheduleRow(
                    record=record,
                    cadence=cadence.describe_schedule(record),
                    tz=record.tz or "UTC",
                    next_runs=cadence.next_run_times(record, now),
                    overdue_by=overdue_by
                    if overdue_by > OVERDUE_AFTER_MS and record.key not in paused
                    else 0,
                    paused=record.key in paused,
                    last_runs=last_runs.get(record.key, []),
                )
            )
        return item

    def failed(store: services.ConfiguredStore, error: str) -> ScheduleStore:
        return ScheduleStore(store=store.name, error=error)

    return services.for_each_store(read, failed)
