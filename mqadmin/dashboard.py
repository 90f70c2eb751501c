"""The dashboard's query layer: what each page shows, computed from store calls.

Views turn a validated form into calls of this module and hand the results to a
template; this module turns them into store operations through
:mod:`mqadmin.services`.  Every function makes a bounded number of Redis calls
whatever the number of jobs: one page of a list (limit + one look-ahead, within
the scan budget), O(1) counters, one page of flow rows or outbox entries, sets
whose size is the number of queues, names, schedules or workers.

Store failures (Redis unreachable) surface as :class:`StoreUnavailable`, naming
the store; a query the store cannot serve surfaces as :class:`QueryRefused`
with a message an operator can act on.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from mqadmin import cadence, services
from mqadmin.actions import actions_for_state, run_job_action
from mqadmin.charts import ThroughputChart, throughput_chart

logger = logging.getLogger(__name__)

STATES = services.STATES
TERMINAL = ("completed", "failed", "cancelled")
ORDER_FIELDS = ("enqueued_at", "run_at", "finished_at", "position")
ORDER_LABELS = {
    "enqueued_at": "enqueued time",
    "run_at": "run time",
    "finished_at": "finished time",
    "position": "queue position",
}
#: The explorer's order choices: "auto" picks the order the ticked states are kept in.
ORDER_CHOICES = {"auto": "automatic (the states' own order)", **ORDER_LABELS}
#: Which states each order other than enqueued time can list (the store keeps them so).
ORDER_STATES = {
    "finished_at": ("completed", "failed", "cancelled"),
    "run_at": ("delayed",),
    "position": ("waiting", "active", "waiting-children"),
}


def auto_order(states: tuple[str, ...] | None) -> str:
    """The order whose sorted sets hold exactly ``states`` (enqueued time when none does).

    Terminal states are kept by finished time, delayed by run time, waiting in claim
    order, active by lock expiry and waiting-children by fan-out time ("queue position"
    for the last three); a listing in that
    order reads only rows of those states, so its pages are exact at any size.
    """
    if not states:
        return "enqueued_at"
    if all(s in TERMINAL for s in states):
        return "finished_at"
    if states == ("delayed",):
        return "run_at"
    if states in (("waiting",), ("active",), ("waiting-children",)):
        return "position"
    return "enqueued_at"


#: Rows one list call may examine (the store's default budget).
SCAN_BUDGET = 2000
#: Queues per store whose oldest waiting job the overview looks up.
OLDEST_WAITING_QUEUES = 50
#: Minutes of throughput the overview draws.
THROUGHPUT_MINUTES = 180
#: Outbox entries one flow page reads per store when looking for its own.
FLOW_OUTBOX_BUDGET = 5000
#: Workers count as live when seen this recently (they refresh every few seconds).
LIVE_WORKER_MS = 60_000
#: A schedule is overdue when its next run is this far in the past: twice the
#: default schedule sweep interval of workers and runsweepers (15 s).
OVERDUE_AFTER_MS = 30_000
#: Schedules the schedules page shows per store (each reads its last runs).
MAX_SCHEDULE_ROWS = 200
#: Bulk runs: ids per chunk (each id is its own store call), items and rows per request.
BULK_CHUNK = 500
BULK_MAX_ITEMS = 5000
BULK_MAX_SCANNED = 50_000
#: Bulk previews count matches up to this many, then say "at least".
PREVIEW_CAP = 5000
PREVIEW_SAMPLE = 10


class StoreUnavailable(Exception):
    """A store's Redis could not be reached (or answered with an error)."""

    def __init__(self, store: str, message: str) -> None:
        super().__init__(f"store {store!r}: {message}")
        self.store = store
        self.message = message


class QueryRefused(Exception):
    """The store cannot serve this combination of filters and order (explained for the form)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class UnknownStore(LookupError):
    """A store name in a URL that MQ_STORES does not configure."""


@contextlib.contextmanager
def reaching(store_name: str) -> Iterator[None]:
    """Turn a store's connection failure into :class:`StoreUnavailable` naming the store."""
    from store.errors import JobStoreError

    try:
        yield
    except JobStoreError as exc:
        entry = services.configured_stores().get(store_name, {})
        url = services.store_url(entry) if entry else None
        logger.warning("store %s unavailable: %s", store_name, exc)
        raise StoreUnavailable(store_name, services.public_error(exc, url)) from exc


def store_names() -> list[str]:
    return list(services.configured_stores())


def open_store(name: str) -> Any:
    """The configured store ``name`` (raises :class:`UnknownStore` / :class:`StoreUnavailable`)."""
    if name not in services.configured_stores():
        raise UnknownStore(name)
    with reaching(name):
        return services.get_named_store(name)


# ---------------------------------------------------------------------- overview


@dataclass
class QueueRow:
    name: str
    counts: dict[str, int]
    paused: bool
    oldest_waiting: Any | None = None
    #: False when the oldest-runnable search hit a bound (more priority levels or names).
    oldest_complete: bool = True
    #: Live workers (announced within LIVE_WORKER_MS) that consume this queue.
    workers: int = 0

    @property
    def count_cells(self) -> list[tuple[str, int]]:
        return [(state, self.counts.get(state, 0)) for state in STATES]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass
class StoreBoard:
    """One store on the overview: totals, queues, paused queues, throughput."""

    overview: services.StoreOverview
    queues: list[QueueRow] = field(default_factory=list)
    paused: list[str] = field(default_factory=list)
    chart: ThroughputChart | None = None
    #: Queues with waiting jobs beyond OLDEST_WAITING_QUEUES (their age is not looked up).
    oldest_skipped: int = 0
    #: The eviction guard's warning for the store's Redis ("" when its policy is noeviction).
    eviction: str = ""

    @property
    def name(self) -> str:
        return self.overview.name


def eviction_warning(job_store: Any) -> str:
    """The eviction guard's message for a store's Redis, as read when the store started."""
    status = getattr(job_store, "eviction", None)
    return str(status.message) if status is not None else ""


def overview(with_chart: bool = True) -> list[StoreBoard]:
    """Every configured store; a store that cannot be reached is reported, not raised."""
    from redis.exceptions import RedisError

    from store.errors import StoreFailure

    boards: list[StoreBoard] = []
    for name, entry in services.configured_stores().items():
        prefix = str(entry["prefix"])
        url = services.store_url(entry)
        description = services.describe_redis(url)
        try:
            client, _ = services.get_client(url)
            version = services.server_version(client)
            job_store = services.get_named_store(name)
            by_queue = job_store.counts_by_queue()
            paused = job_store.paused_queues()
            chart = (
                throughput_chart(job_store.throughput(minutes=THROUGHPUT_MINUTES))
                if with_chart
                else None
            )
            totals = dict.fromkeys(STATES, 0)
            for counts in by_queue.values():
                for state, count in counts.items():
                    totals[state] = totals.get(state, 0) + int(count)
            # A paused queue that never held a job still gets a row (to resume it).
            rows = [
                QueueRow(queue, by_queue.get(queue) or dict.fromkeys(STATES, 0), queue in paused)
                for queue in sorted(set(by_queue) | set(paused))
            ]
            served: dict[str, int] = {}
            for worker in job_store.live_workers(max_age_ms=LIVE_WORKER_MS):
                for queue in worker.queues:
                    served[queue] = served.get(queue, 0) + 1
            for row in rows:
                row.workers = served.get(row.name, 0)
            waiting_rows = [row for row in rows if row.counts.get("waiting")]
            for row in waiting_rows[:OLDEST_WAITING_QUEUES]:
                oldest = job_store.oldest_runnable(row.name)
                row.oldest_waiting = oldest.record
                row.oldest_complete = oldest.complete
        except (StoreFailure, RedisError, OSError) as exc:
            logger.warning("store %s (%s) unavailable: %s", name, description, exc)
            boards.append(
                StoreBoard(
                    services.StoreOverview(
                        name=name,
                        prefix=prefix,
                        redis=description,
                        error=services.public_error(exc, url),
                    )
                )
            )
            continue
        boards.append(
            StoreBoard(
                overview=services.StoreOverview(
                    name=name,
                    prefix=prefix,
                    redis=description,
                    server_version=version,
                    counts=totals,
                ),
                queues=rows,
                paused=paused,
                chart=chart,
                oldest_skipped=max(0, len(waiting_rows) - OLDEST_WAITING_QUEUES),
                eviction=eviction_warning(job_store),
            )
        )
    return boards


def throughput_boards() -> list[StoreBoard]:
    """Only the throughput chart of each store (the chart's own refresh)."""
    boards: list[StoreBoard] = []
    for name, entry in services.configured_stores().items():
        url = services.store_url(entry)
        board = StoreBoard(
            services.StoreOverview(
                name=name, prefix=str(entry["prefix"]), redis=services.describe_redis(url)
            )
        )
        try:
            job_store = open_store(name)
            with reaching(name):
                board.chart = throughput_chart(job_store.throughput(minutes=THROUGHPUT_MINUTES))
        except StoreUnavailable as exc:
            board.overview = services.StoreOverview(
                name=name,
                prefix=str(entry["prefix"]),
                redis=board.overview.redis,
                error=exc.message,
            )
        boards.append(board)
    return boards


# ---------------------------------------------------------------------- job explorer


@dataclass(frozen=True)
class JobQuery:
    """A validated explorer query (see ``forms.JobFilterForm``)."""

    store: str
    queue: str | None = None
    name: str | None = None
    states: tuple[str, ...] | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    order_by: str = "enqueued_at"
    order: str = "desc"
    limit: int = 50
    cursor: str | None = None
    before: str | None = None
    #: The order was chosen automatically from the states (permalinks leave it out).
    order_auto: bool = False
    #: An error group id: only failed jobs of that error (from the group's job set).
    error: str | None = None

    @property
    def by_state(self) -> bool:
        """Served from the states' own sorted sets (``list_by_state``), not from an index."""
        return self.order_by != "enqueued_at" and not self.error

    @property
    def shows_finished(self) -> bool:
        """Finished jobs only: the explorer shows finish times instead of run times."""
        return self.order_by == "finished_at" or (
            bool(self.states) and all(s in TERMINAL for s in self.states or ())
        )

    @property
    def reversed_order(self) -> str:
        return "asc" if self.order == "desc" else "desc"

    def list_kwargs(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "name": self.name,
            "states": list(self.states) if self.states is not None else None,
            "metadata": dict(self.metadata) or None,
            "order_by": self.order_by,
        }

    def describe(self) -> str:
        """The filter in words (audit log targets, bulk confirmations)."""
        parts = [f"store={self.store}"]
        if self.queue:
            parts.append(f"queue={self.queue}")
        if self.name:
            parts.append(f"name={self.name}")
        if self.error:
            parts.append(f"error={self.error}")
        if self.states is not None:
            parts.append("states=" + ",".join(self.states))
        parts.extend(f"meta {key}={value}" for key, value in self.metadata.items())
        parts.append(f"order={self.order_by} {self.order}")
        return " ".join(parts)


@dataclass(frozen=True)
class QueryPlan:
    """Which structure serves a query and which filters it leaves to per-row checks."""

    route: str
    source: str
    residual: tuple[str, ...]
    order_label: str

    @property
    def residual_words(self) -> str:
        return ", ".join(self.residual)


def _route_words(route: str, states: tuple[str, ...] | None) -> str:
    kind, _, rest = route.partition(":")
    if route == "active":
        return "the active set (every running job, by lock expiry)"
    if kind == "parked":
        where = "every queue" if rest == "<every queue>" else f"queue “{rest}”"
        return f"the waiting-for-children sets of {where} (by the start of the fan-out run)"
    if kind == "waiting":
        queue, _, name = rest.partition("/")
        where = "every queue" if queue == "<every queue>" else f"queue “{queue}”"
        which = "" if name == "<every name>" else f" for “{name}”"
        return f"the waiting sets of {where}{which} (claim order: priority, then arrival)"
    if route == "delayed:<every queue>":
        return "the delayed sets of every queue (scored by run time)"
    if kind == "terminal" and "<names of " in rest:
        queue = rest.split("<names of ", 1)[1].rstrip(">")
        return (
            f"the finished-time sets of every job name of queue “{queue}” ("
            + ", ".join(states or ())
            + ")"
        )
    if route == "all":
        return "the all-jobs index (every job, scored by enqueued time)"
    if kind == "byname":
        return f"the name index of “{rest}” (scored by enqueued time)"
    if kind == "byqueue":
        return f"the queue index of “{rest}” (scored by enqueued time)"
    if kind == "delayed":
        return f"the delayed set of queue “{rest}” (scored by run time)"
    if kind == "finished":
        return "the finished-time sets of " + ", ".join(states or ()) + " jobs"
    if kind == "terminal":
        name = rest.split(":", 1)[1] if ":" in rest else rest
        return f"the finished-time sets of “{name}” per state (" + ", ".join(states or ()) + ")"
    return route


def plan_query(job_store: Any, query: JobQuery) -> QueryPlan:
    """Route ``query`` like the store will (raises :class:`QueryRefused` when it cannot)."""
    from store.errors import InvalidRequestError, ListIndexDisabledError, ListOrderUnsupportedError
    from store.listing import plan_list_query, plan_state_query

    kwargs = query.list_kwargs()
    if query.error:
        if query.order_by != "finished_at" or query.states != ("failed",):
            raise QueryRefused(
                "Filtering by error lists failed jobs by the time of their failure: tick only "
                "“failed” and order by finished time (or automatically).",
                "order_by",
            )
        residual = tuple(
            label for label, value in (("queue", query.queue), ("name", query.name)) if value
        ) + (("metadata",) if query.metadata else ())
        return QueryPlan(
            route=f"error:{query.error}",
            source="the failed jobs of this error group (kept at fail time, newest 10,000)",
            residual=residual,
            order_label=ORDER_LABELS["finished_at"],
        )
    try:
        if query.by_state:
            _check_order_states(query)
            plan = plan_state_query(
                job_store.keys,
                kwargs["states"] or [],
                kwargs["queue"],
                kwargs["name"],
                kwargs["metadata"],
                query.order,
                job_store.queue_name_pairs(),
            )
        else:
            plan = plan_list_query(
                job_store.keys,
                job_store.indexes,
                kwargs["queue"],
                kwargs["name"],
                kwargs["states"],
                kwargs["metadata"],
                query.order_by,
                query.order,
            )
    except ListOrderUnsupportedError as exc:
        raise QueryRefused(order_refusal(query, exc.message), "order_by") from exc
    except ListIndexDisabledError as exc:
        raise QueryRefused(
            index_refusal(query, exc.index), "name" if exc.index == "name" else "queue"
        ) from exc
    except InvalidRequestError as exc:
        raise QueryRefused(str(exc)) from exc
    return QueryPlan(
        route=plan.route,
        source=_route_words(plan.route, query.states),
        residual=tuple(plan.residual),
        order_label=ORDER_LABELS[query.order_by],
    )


def _check_order_states(query: JobQuery) -> None:
    """Refuse a state order with states its sets do not hold (before any store call)."""
    from store.errors import ListOrderUnsupportedError

    allowed = ORDER_STATES[query.order_by]
    states = query.states or ()
    ok = bool(states) and all(s in allowed for s in states)
    if query.order_by == "position":
        ok = states in (("waiting",), ("active",), ("waiting-children",))
    if not ok:
        raise ListOrderUnsupportedError(query.order_by, "states outside the order's sets")


def order_refusal(query: JobQuery, detail: str = "") -> str:
    if "more than" in detail:
        return (
            f"Listing {', '.join(query.states or ())} jobs in their own order here would merge "
            f"too many sorted sets ({detail.split('(', 1)[-1].split(')')[0]}): pick a queue or "
            "a job name, or order by enqueued time."
        )
    if query.order_by == "finished_at":
        return (
            "Ordering by finished time needs states made only of completed, failed and "
            "cancelled (it reads the finished-time sets): tick only terminal states, or "
            "order by enqueued time."
        )
    if query.order_by == "position":
        return (
            "Ordering by queue position needs only “waiting”, only “active” or only "
            "“waiting-children” ticked (it reads the waiting sets in claim order, the active set "
            "by lock expiry, or the parked flow parents by fan-out time), or order by enqueued "
            "time."
        )
    return (
        "Ordering by run time needs the state “delayed” alone (it reads the delayed sets): "
        "tick only delayed, or order by enqueued time."
    )


def index_refusal(query: JobQuery, index: str) -> str:
    if index == "name":
        return (
            f"Filtering by name uses the name index, which store “{query.store}” disables "
            f"(MQ_STORES['{query.store}']['indexes']['name'] is false). Order by finished "
            "time with only terminal states ticked (served without the index), or drop the "
            "name filter."
        )
    return (
        f"Filtering by queue uses the queue index, which store “{query.store}” disables "
        f"(MQ_STORES['{query.store}']['indexes']['queue'] is false). Order by run time with "
        "only “delayed” ticked, or by finished time with only terminal states, or drop the "
        "queue filter."
    )


def _row_cursor(record: Any, order_by: str) -> str:
    """The store's cursor for ``record`` in ``order_by`` ("<value>:<id>"; missing values sort as 0)."""
    value = getattr(record, order_by) or 0
    return f"{int(value)}:{record.id}"


@dataclass
class ExplorerPage:
    query: JobQuery
    plan: QueryPlan
    items: list[Any]
    #: Cursor of the page after this one (None on the last page).
    next_cursor: str | None
    #: ``before=`` value of the page before this one (None on the first page).
    previous_before: str | None
    #: The store's scan budget cut the page short; ``next_cursor`` continues the scan.
    truncated: bool
    scanned: int
    #: For a backward page cut short: the ``before=`` value that continues scanning backwards.
    backward_continue: str | None = None
    #: Exact number of matching jobs when O(1) counters can tell (queue/states filters only).
    total: int | None = None
    first_page: bool = True
    #: The store's clock when the page was read (overdue flags).
    now: int = 0
    #: Filters naming a queue or job name this store has never seen, in words.
    unknown: list[str] = field(default_factory=list)


def explore(query: JobQuery) -> ExplorerPage:
    """One page of the explorer.

    Forward pages (``cursor``) are the store's own keyset pages.  A backward page
    (``before`` = the first row of the page being left) is read with the opposite
    order starting strictly after that row, then reversed: opposite directions are
    exact mirror images of each other (store contract §4.10), so "previous" is
    exact however far one has paged, with no stack of cursors in the URL.
    """
    job_store = open_store(query.store)
    try:
        plan = plan_query(job_store, query)
    except QueryRefused:
        if not (query.order_auto and query.by_state):
            raise
        # Too many sets to merge for the automatic order: enqueued time still serves it.
        return explore(replace(query, order_by="enqueued_at"))
    with reaching(query.store):
        if query.before:
            result = fetch_page(job_store, query, query.reversed_order, query.before, query.limit)
        else:
            result = fetch_page(job_store, query, query.order, query.cursor, query.limit)
        total = _counter_total(job_store, query)
    if query.before and not result.items and not result.truncated:
        # Nothing lies before that row any more (rows were removed): the first page.
        return explore(replace(query, before=None, cursor=None))
    page = _explorer_page(query, plan, result, total)
    page.now = job_store.now()
    if not page.items and (query.queue or query.name):
        page.unknown = _unknown_filters(job_store, query)
    return page


def _unknown_filters(job_store: Any, query: JobQuery) -> list[str]:
    """Say so when a queue or job name filter names something the store never held."""
    notes = []
    with reaching(query.store):
        if query.queue and query.queue not in job_store.queue_names():
            notes.append(f"No queue named “{query.queue}” has ever held a job in this store.")
        if query.name and query.name not in job_store.job_names():
            notes.append(f"No job named “{query.name}” has ever been enqueued in this store.")
    return notes


def _explorer_page(
    query: JobQuery, plan: QueryPlan, result: Any, total: int | None
) -> ExplorerPage:
    cursors = list(getattr(result, "item_cursors", ()) or ())
    if not cursors:
        cursors = [_row_cursor(item, query.order_by) for item in result.items]
    if query.before:
        items = list(reversed(result.items))
        cursors.reverse()
        more_before = result.cursor is not None and not result.truncated
        return ExplorerPage(
            query=query,
            plan=plan,
            items=items,
            next_cursor=cursors[-1] if items else query.before,
            previous_before=cursors[0] if items and more_before else None,
            truncated=result.truncated,
            scanned=result.scanned,
            backward_continue=result.cursor if result.truncated else None,
            total=total,
            first_page=not more_before and not result.truncated,
        )
    first = query.cursor is None
    return ExplorerPage(
        query=query,
        plan=plan,
        items=result.items,
        next_cursor=result.cursor,
        previous_before=cursors[0] if result.items and not first else None,
        truncated=result.truncated,
        scanned=result.scanned,
        total=total,
        first_page=first,
    )


def fetch_page(
    job_store: Any,
    query: JobQuery,
    order: str,
    cursor: str | None,
    limit: int,
    scan_budget: int = SCAN_BUDGET,
) -> Any:
    """One store page of ``query``: ``list_by_state`` for a state order, else ``list``.

    Store refusals become :class:`QueryRefused` with the explorer's explanation.
    """
    from store.errors import InvalidRequestError, ListIndexDisabledError, ListOrderUnsupportedError

    kwargs = query.list_kwargs()
    try:
        if query.error:
            return job_store.list_by_error(
                query.error,
                queue=kwargs["queue"],
                name=kwargs["name"],
                metadata=kwargs["metadata"],
                order=order,
                cursor=cursor,
                limit=limit,
                scan_budget=scan_budget,
            )
        if query.by_state:
            _check_order_states(query)
            return job_store.list_by_state(
                kwargs["states"] or [],
                queue=kwargs["queue"],
                name=kwargs["name"],
                metadata=kwargs["metadata"],
                order=order,
                cursor=cursor,
                limit=limit,
                scan_budget=scan_budget,
            )
        return job_store.list(
            **kwargs, order=order, cursor=cursor, limit=limit, scan_budget=scan_budget
        )
    except ListOrderUnsupportedError as exc:
        raise QueryRefused(order_refusal(query, exc.message), "order_by") from exc
    except ListIndexDisabledError as exc:
        raise QueryRefused(index_refusal(query, exc.index)) from exc
    except InvalidRequestError as exc:
        raise QueryRefused(str(exc), "cursor") from exc


def _counter_total(job_store: Any, query: JobQuery) -> int | None:
    """The exact match count when the filter is only queue and/or states (O(1) counters)."""
    if query.name or query.metadata or query.error:
        return None
    counts = job_store.counts(query.queue) if query.queue else job_store.counts()
    states = query.states if query.states is not None else STATES
    return sum(counts.get(state, 0) for state in states)


def job_names(store_name: str) -> list[str]:
    """Known job names of a store (the explorer's suggestions)."""
    job_store = open_store(store_name)
    with reaching(store_name):
        return list(job_store.job_names())


def queue_names(store_name: str) -> list[str]:
    job_store = open_store(store_name)
    with reaching(store_name):
        return list(job_store.queue_names())


# ---------------------------------------------------------------------- job detail


@dataclass(frozen=True)
class Failure:
    """A failed run's exit, ``{"error": {type, module, message, kind, traceback}}``."""

    type: str
    module: str
    message: str
    kind: str
    traceback: str

    @property
    def qualified_type(self) -> str:
        if self.module and self.module not in ("builtins", "__main__"):
            return f"{self.module}.{self.type}"
        return self.type


def failure_of(exit_value: Any) -> Failure | None:
    """The failure inside an exit, when the exit has the worker's failure shape."""
    if not isinstance(exit_value, dict):
        return None
    error = exit_value.get("error")
    if not isinstance(error, dict) or "type" not in error:
        return None
    return Failure(
        type=str(error.get("type", "")),
        module=str(error.get("module", "") or ""),
        message=str(error.get("message", "") or ""),
        kind=str(error.get("kind", "") or ""),
        traceback=str(error.get("traceback", "") or ""),
    )


@dataclass(frozen=True)
class AttemptRow:
    attempt: int
    started_at: int | None
    finished_at: int
    outcome: str
    exit: Any
    failure: Failure | None
    #: From the job's enqueue (first attempt) or the previous attempt's end to this start.
    wait_ms: int | None
    run_ms: int | None
    # Timeline geometry, in percent of the job's whole life.
    bar_wait_x: float = 0.0
    bar_wait_w: float = 0.0
    bar_run_x: float = 0.0
    bar_run_w: float = 0.0

    @property
    def has_exit(self) -> bool:
        from store import MISSING

        return self.exit is not MISSING


@dataclass
class JobDetail:
    store: str
    record: Any
    attempts: list[AttemptRow]
    lock: services.LockInfo | None
    dedupe: services.DedupeOwner | None
    #: The parent flow's store, when this dashboard knows it (None: not configured here).
    parent_store: str | None
    failure: Failure | None
    allowed: dict[str, bool]
    now: int
    timeline_start: int = 0
    timeline_end: int = 0

    @property
    def has_exit(self) -> bool:
        from store import MISSING

        return self.record.exit is not MISSING

    @property
    def is_terminal(self) -> bool:
        return self.record.state in TERMINAL

    @property
    def dedupe_owned_by_self(self) -> bool:
        return self.dedupe is not None and self.dedupe.job_id == self.record.id


def job_detail(store_name: str, job_id: str) -> JobDetail | None:
    """Everything the job page shows, or None when the job does not exist."""
    job_store = open_store(store_name)
    with reaching(store_name):
        record = job_store.get_job(job_id)
        if record is None:
            return None
        attempts = job_store.get_attempts(job_id)
        lock = services.job_lock_info(job_store, job_id) if record.state == "active" else None
        dedupe = (
            services.dedupe_owner(job_store, record.name, record.dedupe_key)
            if record.dedupe_key
            else None
        )
    now = job_store.now()
    parent_store = None
    if record.parent is not None and record.parent.parent_store_key in services.configured_stores():
        parent_store = record.parent.parent_store_key
    rows, start, end = _attempt_rows(record, attempts, now)
    return JobDetail(
        store=store_name,
        record=record,
        attempts=rows,
        lock=lock,
        dedupe=dedupe,
        parent_store=parent_store,
        failure=failure_of(record.exit),
        allowed=actions_for_state(record.state),
        now=now,
        timeline_start=start,
        timeline_end=end,
    )


def _attempt_rows(record: Any, attempts: list[Any], now: int) -> tuple[list[AttemptRow], int, int]:
    start = int(record.enqueued_at)
    end = max(
        [now if record.state == "active" else 0]
        + [int(a.finished_at) for a in attempts]
        + [int(record.finished_at or 0), start + 1]
    )
    span = max(1, end - start)
    rows: list[AttemptRow] = []
    ready = start
    for attempt in attempts:
        started = int(attempt.started_at) if attempt.started_at is not None else None
        finished = int(attempt.finished_at)
        wait = max(0, started - ready) if started is not None else None
        run = max(0, finished - started) if started is not None else None
        wait_x = (ready - start) / span * 100
        run_x = ((started if started is not None else finished) - start) / span * 100
        rows.append(
            AttemptRow(
                attempt=int(attempt.attempt),
                started_at=started,
                finished_at=finished,
                outcome=attempt.outcome,
                exit=attempt.exit,
                failure=failure_of(attempt.exit),
                wait_ms=wait,
                run_ms=run,
                bar_wait_x=round(wait_x, 3),
                bar_wait_w=round(max(0.0, run_x - wait_x), 3),
                bar_run_x=round(run_x, 3),
                bar_run_w=round(max(0.4, (run or 0) / span * 100), 3),
            )
        )
        ready = finished
    return rows, start, end


# ---------------------------------------------------------------------- flows


@dataclass
class FlowChildRow:
    row: Any
    #: The child's store when configured here (links go there), else None.
    store: str | None
    #: The child's live record (None: missing from its store, or its store is not configured).
    record: Any | None
    #: True when the child's store could not be read.
    unreachable: bool = False

    @property
    def is_flow(self) -> bool:
        return self.record is not None and self.record.flow is not None

    @property
    def has_exit(self) -> bool:
        from store import MISSING

        return self.row.exit is not MISSING

    @property
    def failure(self) -> Failure | None:
        return failure_of(self.row.exit)


@dataclass
class OutboxMatch:
    store: str
    entries: list[Any]
    truncated: bool
    error: str | None = None
    #: Live workers of this store that can deliver reports to the parent's store.
    routers: list[str] = field(default_factory=list)


@dataclass
class FlowView:
    store: str
    record: Any
    children: list[FlowChildRow]
    next_cursor: str | None
    outbox: list[OutboxMatch]
    owed_cascades: int
    explanation: list[str]
    #: Live workers of the parent's store (they run the collect phase).
    paused: bool

    @property
    def flow(self) -> Any:
        return self.record.flow

    @property
    def outbox_total(self) -> int:
        return sum(len(match.entries) for match in self.outbox)


FLOW_PAGE = 50


def flow_view(
    store_name: str, flow_id: str, cursor: str | None, limit: int = FLOW_PAGE
) -> FlowView | None:
    """A flow parent with one page of its children, and why it is (still) where it is.

    Reads: the parent, one page of dependency rows, each listed child's record in
    its own store, the paused set, owed cascades, and a bounded scan of every
    configured store's outbox for reports naming this parent.  Nothing walks the tree:
    nested flows are loaded when asked for, one level at a time.
    """
    job_store = open_store(store_name)
    with reaching(store_name):
        record = job_store.get_job(flow_id)
        if record is None:
            return None
        page = job_store.list_child_results(flow_id, cursor=cursor, limit=limit)
        owed = job_store.flow_owed_cascades(flow_id)
        paused = record.queue in job_store.paused_queues()
    children = _child_rows(page.items)
    outbox = _outbox_matches(store_name, flow_id)
    view = FlowView(
        store=store_name,
        record=record,
        children=children,
        next_cursor=page.cursor,
        outbox=outbox,
        owed_cascades=owed,
        explanation=[],
        paused=paused,
    )
    view.explanation = explain_flow(view)
    return view


def _child_rows(rows: list[Any]) -> list[FlowChildRow]:
    """The page's children with their records, one batched read per child store."""
    configured = services.configured_stores()
    by_store: dict[str, list[Any]] = {}
    for row in rows:
        if row.store_key in configured:
            by_store.setdefault(row.store_key, []).append(row)
    records: dict[tuple[str, str], Any] = {}
    unreachable: set[str] = set()
    for store_name, store_rows in by_store.items():
        try:
            child_store = open_store(store_name)
            with reaching(store_name):
                found = child_store.get_jobs([r.child_job_id for r in store_rows])
        except StoreUnavailable:
            unreachable.add(store_name)
            continue
        for row, record in zip(store_rows, found, strict=True):
            records[(store_name, row.child_job_id)] = record
    out: list[FlowChildRow] = []
    for row in rows:
        store_name = row.store_key if row.store_key in configured else None
        out.append(
            FlowChildRow(
                row=row,
                store=store_name,
                record=records.get((store_name, row.child_job_id)) if store_name else None,
                unreachable=store_name in unreachable,
            )
        )
    return out


def _outbox_matches(parent_store: str, flow_id: str) -> list[OutboxMatch]:
    """Reports naming this parent, in every configured store's outbox (children report there)."""
    matches: list[OutboxMatch] = []
    for name in services.configured_stores():
        try:
            child_store = open_store(name)
            with reaching(name):
                entries, truncated = child_store.outbox_entries_for(
                    flow_id, scan_budget=FLOW_OUTBOX_BUDGET
                )
        except StoreUnavailable as exc:
            matches.append(OutboxMatch(name, [], False, exc.message))
            continue
        # Flow ids are only unique within their store: keep reports routed to this one.
        own = [e for e in entries if e.parent_store_key == parent_store]
        if own or truncated:
            match = OutboxMatch(name, own, truncated)
            if own:
                with reaching(name):
                    workers = child_store.live_workers(max_age_ms=LIVE_WORKER_MS)
                match.routers = [w.worker_id for w in workers if parent_store in w.routes]
            matches.append(match)
    return matches


def explain_flow(view: FlowView) -> list[str]:
    """Plain sentences answering "why is this parent where it is?"."""
    record = view.record
    flow = record.flow
    state = record.state
    lines: list[str] = []
    if flow is None:
        if state in ("waiting", "delayed"):
            lines.append(
                "This job has not fanned out yet: no child manifest exists. Its first run "
                "(the fan-out phase) creates the children."
            )
        elif state == "active":
            lines.append(
                "A worker is running its fan-out phase now; the manifest lands when it acks."
            )
        else:
            lines.append(f"This job is {state} and never fanned out: it has no children.")
        return lines
    total = flow.total
    if state == "waiting-children":
        lines.append(
            f"It waits for {flow.pending} of {total} children to report an outcome "
            f"({flow.completed} completed, {flow.failed} failed, {flow.cancelled} cancelled so far)."
        )
        pending_rows = [child for child in view.children if child.row.status == "pending"]
        if pending_rows:
            by_state: dict[str, int] = {}
            missing = 0
            unknown_store = 0
            for child in pending_rows:
                if child.store is None:
                    unknown_store += 1
                elif child.record is None and not child.unreachable:
                    missing += 1
                elif child.record is not None:
                    by_state[child.record.state] = by_state.get(child.record.state, 0) + 1
            described = ", ".join(f"{n} {s}" for s, n in sorted(by_state.items()))
            if described:
                lines.append(f"Of the pending children on this page: {described}.")
            terminal_unreported = sum(by_state.get(s, 0) for s in TERMINAL)
            if terminal_unreported:
                lines.append(
                    f"{terminal_unreported} of them already finished in their store but their "
                    "report has not been applied yet: it sits in the child store's outbox until "
                    "a relay delivers it (or the flow sweeper reconciles it)."
                )
            if missing:
                lines.append(
                    f"{missing} pending children are missing from their store (never enqueued, "
                    "or removed): the flow sweeper re-enqueues them from the stored specs."
                )
            if unknown_store:
                lines.append(
                    f"{unknown_store} pending children live in stores this dashboard does not "
                    "configure, so their state cannot be shown here."
                )
        if view.outbox_total:
            stores = ", ".join(f"{m.store} ({len(m.entries)})" for m in view.outbox if m.entries)
            lines.append(
                f"{view.outbox_total} child reports naming this flow wait in outboxes ({stores}): "
                "the outbox relay of a worker that can reach this store delivers them."
            )
            for match in view.outbox:
                if not match.entries:
                    continue
                if match.routers:
                    lines.append(
                        f"A live worker of store “{match.store}” ({', '.join(match.routers)}) "
                        f"routes reports to “{view.store}”: they should be delivered shortly."
                    )
                else:
                    lines.append(
                        f"But no live worker of store “{match.store}” can deliver to "
                        f"“{view.store}” (none lists it among its routes): run a worker with "
                        "this flow registered, or runsweepers, with both stores configured."
                    )
        if flow.fail_fast:
            lines.append("Fail-fast: the first failed child report settles the parent as failed.")
    elif state == "waiting":
        if flow.pending == 0:
            lines.append(
                "Every child has reported; the parent waits for a worker of queue "
                f"“{record.queue}” to run its collect phase."
            )
        else:
            lines.append(f"The parent is waiting to run ({flow.pending} children still pending).")
        if view.paused:
            lines.append(f"Queue “{record.queue}” is paused: no worker claims it until resumed.")
    elif state == "active":
        lines.append("A worker is running the collect phase now.")
    elif state == "delayed":
        lines.append("The parent is delayed (a retry of its collect phase is scheduled).")
    else:
        reason = f" ({record.failed_reason})" if record.failed_reason else ""
        lines.append(f"The flow is finished: the parent is {state}{reason}.")
    if view.owed_cascades:
        lines.append(
            f"{view.owed_cascades} children still owe a cancel delivery into their store: the "
            "flow sweeper delivers it."
        )
    return lines


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
    from store.flows import outbox_entry_time

    out: list[OutboxStore] = []
    for name in services.configured_stores():
        summary = OutboxStore(store=name)
        try:
            job_store = open_store(name)
            with reaching(name):
                summary.depth = job_store.outbox_depth()
                oldest = job_store.peek_outbox(limit=1)
                summary.oldest_at = outbox_entry_time(oldest[0]) if oldest else None
                summary.workers = job_store.live_workers(max_age_ms=LIVE_WORKER_MS)
                summary.unroutable = job_store.unroutable_outbox()
        except StoreUnavailable as exc:
            summary.error = exc.message
        for worker in summary.workers:
            summary.routes.update(worker.routes)
        out.append(summary)
    return out


def outbox_page(
    summary: OutboxStore, after_seq: int | None, limit: int | None = None
) -> OutboxPage:
    """One page of a store's outbox, oldest first, continuing after entry ``after_seq``."""
    from store.flows import outbox_entry_time

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


@dataclass
class FailuresView:
    store: str
    groups: list[Any]
    failed_total: int
    now: int


FAILURE_GROUPS = 100


def failures_view(store_name: str) -> FailuresView:
    """A store's failures grouped by error type and message (from the fail-time aggregates)."""
    job_store = open_store(store_name)
    with reaching(store_name):
        groups = job_store.error_groups(limit=FAILURE_GROUPS)
        failed = job_store.counts().get("failed", 0)
    return FailuresView(store_name, groups, int(failed), job_store.now())


def error_group(store_name: str, group: str) -> Any | None:
    job_store = open_store(store_name)
    with reaching(store_name):
        return job_store.error_group(group)


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
    out: list[WorkerStore] = []
    for name in services.configured_stores():
        item = WorkerStore(store=name)
        try:
            job_store = open_store(name)
            with reaching(name):
                item.workers = job_store.live_workers(max_age_ms=LIVE_WORKER_MS)
                queues = job_store.queue_names()
            item.now = job_store.now()
        except StoreUnavailable as exc:
            item.error = exc.message
            out.append(item)
            continue
        consumed = {queue for worker in item.workers for queue in worker.queues}
        item.unserved = [queue for queue in queues if queue not in consumed]
        out.append(item)
    return out


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
    from store.consistency import KINDS

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
    from store.consistency import last_check

    out: list[IndexStore] = []
    for name, entry in services.configured_stores().items():
        item = IndexStore(store=name, prefix=str(entry["prefix"]))
        try:
            job_store = open_store(name)
            with reaching(name):
                item.kinds = services.bounded_index_status(job_store)
                item.check = last_check_summary(last_check(job_store))
        except StoreUnavailable as exc:
            item.error = exc.message
        out.append(item)
    return out


# ---------------------------------------------------------------------- schedules


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
    out: list[ScheduleStore] = []
    for name in services.configured_stores():
        item = ScheduleStore(store=name)
        try:
            job_store = open_store(name)
            with reaching(name):
                records = job_store.list_schedules()[:MAX_SCHEDULE_ROWS]
                paused = job_store.paused_schedules()
                last_runs = {r.key: job_store.schedule_last_runs(r) for r in records}
            now = job_store.now()
        except StoreUnavailable as exc:
            item.error = exc.message
            out.append(item)
            continue
        item.now = now
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
        out.append(item)
    return out


# ---------------------------------------------------------------------- bulk


@dataclass(frozen=True)
class BulkItem:
    job_id: str
    ok: bool
    message: str


@dataclass
class BulkPreview:
    count: int
    capped: bool
    exact: bool
    sample: list[Any]
    scanned: int


@dataclass
class BulkRun:
    items: list[BulkItem]
    #: Where to continue ("continue" runs from here); None when every match was handled.
    resume: str | None
    scanned: int

    @property
    def succeeded(self) -> int:
        return sum(1 for item in self.items if item.ok)

    @property
    def failed(self) -> list[BulkItem]:
        return [item for item in self.items if not item.ok]


def bulk_ids(store_name: str, verb: str, ids: list[str]) -> list[BulkItem]:
    """``verb`` on each id (each its own store call), chunked, with a result per id."""
    job_store = open_store(store_name)
    items: list[BulkItem] = []
    with reaching(store_name):
        for start in range(0, len(ids), BULK_CHUNK):
            for job_id in ids[start : start + BULK_CHUNK]:
                result = run_job_action(job_store, verb, job_id)
                items.append(BulkItem(job_id, result.ok, result.message))
    return items


def bulk_preview(query: JobQuery) -> BulkPreview:
    """How many jobs match (exact from counters when possible, else counted up to a cap) and a sample."""
    job_store = open_store(query.store)
    plan_query(job_store, query)
    with reaching(query.store):
        sample_page = fetch_page(job_store, query, query.order, None, PREVIEW_SAMPLE)
        exact = _counter_total(job_store, query)
        if exact is not None:
            return BulkPreview(exact, False, True, sample_page.items, sample_page.scanned)
        count = 0
        scanned = 0
        cursor: str | None = None
        while True:
            page = fetch_page(job_store, query, query.order, cursor, BULK_CHUNK)
            count += len(page.items)
            scanned += page.scanned
            cursor = page.cursor
            if cursor is None:
                return BulkPreview(count, False, True, sample_page.items, scanned)
            if count >= PREVIEW_CAP or scanned >= BULK_MAX_SCANNED:
                return BulkPreview(count, True, False, sample_page.items, scanned)


def bulk_filter(query: JobQuery, verb: str, resume: str | None) -> BulkRun:
    """``verb`` on every job matching ``query``, from ``resume`` on, in bounded chunks.

    Pages of at most BULK_CHUNK ids are read with the keyset cursor, and each id gets
    its own store call.  One request handles at most BULK_MAX_ITEMS jobs and examines
    at most BULK_MAX_SCANNED rows; the returned ``resume`` cursor continues the run.
    The cursor is a position in the order, not an offset, so jobs that stop matching
    once acted on (a retried job is no longer failed) never shift what comes next.
    """
    job_store = open_store(query.store)
    plan_query(job_store, query)
    items: list[BulkItem] = []
    scanned = 0
    cursor = resume
    with reaching(query.store):
        while True:
            room = BULK_MAX_ITEMS - len(items)
            page = fetch_page(job_store, query, query.order, cursor, min(BULK_CHUNK, room))
            scanned += page.scanned
            for record in page.items:
                result = run_job_action(job_store, verb, record.id)
                items.append(BulkItem(record.id, result.ok, result.message))
            cursor = page.cursor
            if cursor is None:
                return BulkRun(items, None, scanned)
            if len(items) >= BULK_MAX_ITEMS or scanned >= BULK_MAX_SCANNED:
                return BulkRun(items, cursor, scanned)
