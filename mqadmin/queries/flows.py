"""The flow pages (``views/flows.py``): the list of flow parents (``flows.html``) and one
flow (``flow.html``): a parent, a page of children, its ancestors, why it waits.

Nothing walks the tree: a flow page reads one page of dependency rows, the listed
children's records (one batched read per child store), a bounded scan of each
configured store's outbox and at most MAX_ANCESTORS parent records up the tree;
nested flows load one level at a time.  The list reads one page of the parked
parents (``list_by_state(["waiting-children"])``) or of the store's capped set of
lately settled parents (``settled_flows``) plus those parents' records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mqadmin import services
from mqadmin.queries.common import LIVE_WORKER_MS, TERMINAL
from mqadmin.queries.explorer import QueryRefused
from mqadmin.queries.job import Failure, failure_of
from mqadmin.services import StoreUnavailable, open_store, reaching
from store.errors import InvalidRequestError, ListOrderUnsupportedError

#: Outbox entries one flow page reads per store when looking for its own.
FLOW_OUTBOX_BUDGET = 5000


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
class Ancestor:
    """A flow above the one shown, as the lower level's ``parent`` envelope names it."""

    store_key: str
    flow_id: str
    flow_name: str
    #: The child key this flow gave the level below it.
    child_key: str
    #: The store when configured here (links go there), else None.
    store: str | None
    #: Its record (None: gone, its store not configured, or unreachable).
    record: Any | None
    unreachable: bool = False


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
    #: The flows above this one, root first (at most MAX_ANCESTORS).
    ancestors: list[Ancestor] = field(default_factory=list)
    #: True when the tree goes higher than MAX_ANCESTORS (the root is not shown).
    ancestors_cut: bool = False

    @property
    def flow(self) -> Any:
        return self.record.flow

    @property
    def outbox_total(self) -> int:
        return sum(len(match.entries) for match in self.outbox)


FLOW_PAGE = 50
#: Parent records a flow page reads up the tree for its breadcrumb.
MAX_ANCESTORS = 10


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
    view.ancestors, view.ancestors_cut = ancestors_of(record)
    view.explanation = explain_flow(view)
    return view


def ancestors_of(record: Any, limit: int = MAX_ANCESTORS) -> tuple[list[Ancestor], bool]:
    """The flows above ``record``, root first, following each ``parent`` envelope.

    One record read per level, in the store the envelope names, at most ``limit``
    levels; the flag says the tree goes higher.  A level whose store is not
    configured here, cannot be reached or no longer holds the parent ends the walk
    (the envelope still names it).
    """
    configured = services.configured_stores()
    chain: list[Ancestor] = []
    seen: set[tuple[str, str]] = set()
    current = record
    while current is not None and current.parent is not None:
        envelope = current.parent
        where = (envelope.parent_store_key, envelope.flow_id)
        if len(chain) >= limit or where in seen:  # seen: a damaged envelope loops
            return chain[::-1], len(chain) >= limit
        seen.add(where)
        store = envelope.parent_store_key if envelope.parent_store_key in configured else None
        level = Ancestor(
            store_key=envelope.parent_store_key,
            flow_id=envelope.flow_id,
            flow_name=envelope.flow_name,
            child_key=envelope.child_key,
            store=store,
            record=None,
        )
        if store is not None:
            try:
                parent_store = open_store(store)
                with reaching(store):
                    level.record = parent_store.get_job(envelope.flow_id)
            except StoreUnavailable:
                level.unreachable = True
        chain.append(level)
        current = level.record
    return chain[::-1], False


# ---------------------------------------------------------------- the list of flows

#: The list's filters: parents parked in waiting-children, or settled lately.
FLOW_LIST_STATES = {"waiting": "Waiting for children", "settled": "Settled lately"}
FLOWS_PAGE = 50


@dataclass
class FlowListRow:
    record: Any
    #: Waiting: when its fan-out run started; settled: when it reached its final state.
    at: int | None

    @property
    def done(self) -> int | None:
        flow = self.record.flow
        return None if flow is None else flow.total - flow.pending


@dataclass
class FlowList:
    store: str
    state: str
    rows: list[FlowListRow]
    next_cursor: str | None
    now: int


def flow_list(store_name: str, state: str, cursor: str | None, limit: int = FLOWS_PAGE) -> FlowList:
    """One page of a store's flow parents, newest first.

    ``waiting``: parents parked in waiting-children, by the start of their fan-out run
    (the parked sets, one per queue).  ``settled``: parents that reached a terminal
    state lately (the store keeps the newest ``store.keys.FLOWS_SETTLED_CAP``), by
    when; a parent deleted since is left out.  A cursor of the other filter or a
    malformed one is :class:`QueryRefused`.
    """
    job_store = open_store(store_name)
    with reaching(store_name):
        try:
            rows, next_cursor = _flow_list_page(job_store, state, cursor, limit)
        except ListOrderUnsupportedError as exc:
            raise QueryRefused(exc.message, field="state") from exc
        except InvalidRequestError as exc:
            raise QueryRefused(f"This is not a cursor of this list: {exc}", field="cursor") from exc
    return FlowList(store_name, state, rows, next_cursor, job_store.now())


def _flow_list_page(
    job_store: Any, state: str, cursor: str | None, limit: int
) -> tuple[list[FlowListRow], str | None]:
    if state == "waiting":
        result = job_store.list_by_state(
            ["waiting-children"], order="desc", cursor=cursor, limit=limit
        )
        return [FlowListRow(r, r.processed_at) for r in result.items], result.cursor
    page = job_store.settled_flows(cursor=cursor, limit=limit)
    ids = [item.flow_id for item in page.items]
    records = job_store.get_jobs(ids) if ids else []
    rows = [
        FlowListRow(record, item.settled_at)
        for item, record in zip(page.items, records, strict=True)
        if record is not None
    ]
    return rows, page.cursor


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
        row_store = row.store_key if row.store_key in configured else None
        out.append(
            FlowChildRow(
                row=row,
                store=row_store,
                record=records.get((row_store, row.child_job_id)) if row_store else None,
                unreachable=row_store in unreachable,
            )
        )
    return out


def _outbox_matches(parent_store: str, flow_id: str) -> list[OutboxMatch]:
    """Reports naming this parent, in every configured store's outbox (children report there)."""

    def read(store: services.ConfiguredStore, child_store: Any) -> OutboxMatch | None:
        entries, truncated = child_store.outbox_entries_for(flow_id, scan_budget=FLOW_OUTBOX_BUDGET)
        # Flow ids are only unique within their store: keep reports routed to this one.
        own = [e for e in entries if e.parent_store_key == parent_store]
        if not (own or truncated):
            return None
        match = OutboxMatch(store.name, own, truncated)
        if own:
            workers = child_store.live_workers(max_age_ms=LIVE_WORKER_MS)
            match.routers = [w.worker_id for w in workers if parent_store in w.routes]
        return match

    def failed(store: services.ConfiguredStore, error: str) -> OutboxMatch | None:
        return OutboxMatch(store.name, [], False, error)

    return [match for match in services.for_each_store(read, failed) if match is not None]


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
