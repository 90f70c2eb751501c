"""The job explorer (``views/explorer.py``, ``jobs.html``): one store's jobs, filtered and paged.

A validated form becomes a :class:`JobQuery`; :func:`plan_query` routes it like the
store will (and explains a combination the store cannot serve as
:class:`QueryRefused`), :func:`explore` reads one keyset page, forward or backward,
examining at most :data:`SCAN_BUDGET` rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from mqadmin.queries.common import STATES, TERMINAL
from mqadmin.services import open_store, reaching
from store.errors import InvalidRequestError, ListIndexDisabledError, ListOrderUnsupportedError

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


class QueryRefused(Exception):
    """The store cannot serve this combination of filters and order (explained for the form)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


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
    #: The search box's text (kept in permalinks) and what it asks for beyond the form's
    #: filters (mqadmin/search.py): payload and metadata predicates, an id prefix, and an
    #: error text the view resolves to an error group.
    search: str = ""
    payload: Mapping[str, str] = field(default_factory=dict)
    search_metadata: Mapping[str, str] = field(default_factory=dict)
    id_prefix: str | None = None
    error_text: str | None = None

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

    @property
    def all_metadata(self) -> dict[str, str]:
        return {**self.metadata, **self.search_metadata}

    @property
    def searching(self) -> bool:
        """Row predicates beyond the form's filters (the counters cannot count them)."""
        return bool(self.payload or self.search_metadata or self.id_prefix)

    def list_kwargs(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "name": self.name,
            "states": list(self.states) if self.states is not None else None,
            "metadata": self.all_metadata or None,
            "order_by": self.order_by,
            "payload": dict(self.payload) or None,
            "id_prefix": self.id_prefix,
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
        elif self.error_text:
            parts.append(f"error~{self.error_text}")
        if self.states is not None:
            parts.append("states=" + ",".join(self.states))
        parts.extend(f"meta {key}={value}" for key, value in self.all_metadata.items())
        parts.extend(f"args.{path}={value}" for path, value in self.payload.items())
        if self.id_prefix:
            parts.append(f"id^={self.id_prefix}")
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

    kwargs = query.list_kwargs()
    if query.error_text and not query.error:
        # Never list (or act on) every job when an error: search named no single group.
        raise QueryRefused(
            f"The search error:{query.error_text} does not name one kind of failure: open the "
            "failures it matches from the job list and pick one.",
            "q",
        )
    if query.error:
        if query.order_by != "finished_at" or query.states != ("failed",):
            raise QueryRefused(
                "Filtering by error lists failed jobs by the time of their failure: tick only "
                "“failed” and order by finished time (or automatically).",
                "order_by",
            )
        residual = tuple(
            label for label, value in (("queue", query.queue), ("name", query.name)) if value
        ) + (("metadata",) if query.all_metadata else ())
        return QueryPlan(
            route=f"error:{query.error}",
            source="the failed jobs of this error group (kept at fail time, newest 10,000)",
            residual=residual + search_residual(query),
            order_label=ORDER_LABELS["finished_at"],
        )
    try:
        if query.by_state:
            _check_order_states(query)
            plan = job_store.plan_list_by_state(
                kwargs["states"] or [],
                kwargs["queue"],
                kwargs["name"],
                kwargs["metadata"],
                query.order,
            )
        else:
            plan = job_store.plan_list(
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
        residual=tuple(plan.residual) + search_residual(query),
        order_label=ORDER_LABELS[query.order_by],
    )


def search_residual(query: JobQuery) -> tuple[str, ...]:
    """The search's row predicates, in words (the plan's residual filters)."""
    words = tuple(f"payload {path}" for path in query.payload)
    if query.id_prefix:
        words += ("id prefix",)
    return words


def _check_order_states(query: JobQuery) -> None:
    """Refuse a state order with states its sets do not hold (before any store call)."""

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
        total = counter_total(job_store, query)
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
                payload=kwargs["payload"],
                id_prefix=kwargs["id_prefix"],
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
                payload=kwargs["payload"],
                id_prefix=kwargs["id_prefix"],
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


def counter_total(job_store: Any, query: JobQuery) -> int | None:
    """The exact match count when the filter is only queue and/or states (O(1) counters)."""
    if query.name or query.all_metadata or query.error or query.searching:
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


def error_group(store_name: str, group: str) -> Any | None:
    job_store = open_store(store_name)
    with reaching(store_name):
        return job_store.error_group(group)


def find_error_groups(store_name: str, text: str, messages: bool) -> list[Any]:
    """Error groups matching a search's ``error:`` text (see ``find_error_groups``)."""
    job_store = open_store(store_name)
    with reaching(store_name):
        return list(job_store.find_error_groups(text, messages=messages))


def exact_job(store_name: str, job_id: str) -> bool:
    job_store = open_store(store_name)
    with reaching(store_name):
        return job_store.get_job(job_id) is not None


#: Rows of a page whose payloads suggest the search box's ``args.`` paths.
PATH_SAMPLE = 20


def search_suggestions(rows: list[Any]) -> list[str]:
    """``args.<path>:`` completions from the payloads of a page's first rows."""
    from mqadmin.search import payload_paths

    return [f"args.{path}:" for path in payload_paths([job.payload for job in rows[:PATH_SAMPLE]])]


def with_error_group(query: JobQuery, group: str) -> JobQuery:
    """``query`` narrowed to one error group's failed jobs (a resolved ``error:`` search)."""
    states = query.states if query.states is not None else ("failed",)
    order_by = auto_order(states) if query.order_auto else query.order_by
    return replace(query, error=group, states=states, order_by=order_by)


def resolve_error_search(query: JobQuery, messages: bool) -> tuple[JobQuery, list[Any]]:
    """The error groups an ``error:`` search matches, and ``query`` narrowed to the group
    when exactly one does (otherwise unchanged: listing it is refused by ``plan_query``)."""
    if not query.error_text or query.error:
        return query, []
    groups = find_error_groups(query.store, query.error_text, messages)
    if len(groups) == 1:
        return with_error_group(query, groups[0].id), groups
    return query, groups
