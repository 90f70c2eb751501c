"""Bulk runs (``views/bulk.py``, ``bulk.html``): a verb on ticked ids, or on a filter's matches.

A filter's matches are read with the explorer's keyset pages (:func:`fetch_page`),
in chunks of :data:`BULK_CHUNK`, each id its own store call through
:func:`mqadmin.actions.run_job_action`; one request handles at most
:data:`BULK_MAX_ITEMS` jobs and examines at most :data:`BULK_MAX_SCANNED` rows.

The verbs offered and accepted depend on the states listed (:func:`query_states`):
a verb that applies to none of them is refused (:func:`verb_refusal`), and a preview
says per state what the verb will do (:func:`outcomes`).  The queue page's drain and
clean (``queries/queue.py``) run through the same machinery with the verb "remove".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mqadmin import actions
from mqadmin.queries.common import STATES
from mqadmin.queries.explorer import JobQuery, counter_total, fetch_page, plan_query
from mqadmin.services import open_store, reaching

#: Bulk runs: ids per chunk (each id is its own store call), items and rows per request.
BULK_CHUNK = 500
BULK_MAX_ITEMS = 5000
BULK_MAX_SCANNED = 50_000
#: Bulk previews count matches up to this many, then say "at least".
PREVIEW_CAP = 5000
PREVIEW_SAMPLE = 10


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
    #: Matches per state (from the counters, or tallied over the rows counted).
    by_state: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class StateOutcome:
    """What a verb does to the matches in one state."""

    state: str
    count: int
    applies: bool
    #: "will be retried", or why they are skipped ("only failed jobs can be retried").
    words: str


@dataclass(frozen=True)
class VerbOutcome:
    """A verb over a preview's matches: per state, which are changed and which skipped."""

    verb: actions.Verb
    states: tuple[StateOutcome, ...]

    @property
    def acted(self) -> int:
        return sum(line.count for line in self.states if line.applies)

    @property
    def skipped(self) -> int:
        return sum(line.count for line in self.states if not line.applies)


#: A run stops before the first row this returns True for (a clean's age cut-off).
StopAt = Callable[[Any], bool]


def query_states(query: JobQuery) -> frozenset[str] | None:
    """The states a filter can list (None: any state). An error group lists failed jobs."""
    if query.error or query.error_text:
        return frozenset({"failed"})
    return frozenset(query.states) if query.states else None


def offered_verbs(states: Iterable[str] | None, can: Mapping[str, bool]) -> list[actions.Verb]:
    """The bulk verbs ``can`` allows that apply to at least one of ``states``."""
    return [verb for verb in actions.bulk_verbs_for(states) if can.get(verb.key)]


def verb_refusal(verb: actions.Verb, states: Iterable[str] | None) -> str | None:
    """Why ``verb`` cannot act on jobs listed in ``states`` at all, or None when it can."""
    if states is None:
        return None
    listed = sorted(set(states), key=_state_order)
    if not listed or any(verb.applies_to(state) for state in listed):
        return None
    words = " or ".join(listed)
    return (
        f"Cannot {verb.name} these jobs: they are all {words}, and {verb.refusal}. "
        f"Choose one of: {', '.join(v.name for v in actions.bulk_verbs_for(listed)) or 'none'}."
    )


def _state_order(state: str) -> int:
    return STATES.index(state) if state in STATES else len(STATES)


def outcomes(verb: actions.Verb, by_state: Mapping[str, int]) -> VerbOutcome:
    """Per state with matches, what ``verb`` does to them (in the store's state order)."""
    lines = []
    for state in sorted(by_state, key=_state_order):
        count = by_state[state]
        if not count:
            continue
        applies = verb.applies_to(state)
        words = verb.outcome_in(state) if applies else f"will be skipped ({verb.refusal})"
        lines.append(StateOutcome(state, count, applies, words))
    return VerbOutcome(verb, tuple(lines))


def selected_states(store_name: str, ids: list[str]) -> set[str]:
    """The states of the ticked jobs that still exist (one batched read)."""
    job_store = open_store(store_name)
    with reaching(store_name):
        records = job_store.get_jobs(ids)
    return {record.state for record in records if record is not None}


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
                result = actions.run_job_action(job_store, verb, job_id)
                items.append(BulkItem(job_id, result.ok, result.message))
    return items


def bulk_preview(query: JobQuery, stop_at: StopAt | None = None) -> BulkPreview:
    """How many jobs match (exact from counters when possible, else counted up to a cap),
    how many per state, and a sample.

    ``stop_at`` ends the matches at the first row it accepts (rows in the query's order):
    the count then always pages, as the counters know nothing of it.
    """
    job_store = open_store(query.store)
    plan_query(job_store, query)
    with reaching(query.store):
        sample_page = fetch_page(job_store, query, query.order, None, PREVIEW_SAMPLE)
        sample = _until(sample_page.items, stop_at)
        exact = counter_total(job_store, query) if stop_at is None else None
        if exact is not None:
            counts = job_store.counts(query.queue) if query.queue else job_store.counts()
            states = query.states if query.states is not None else STATES
            by_state = {state: int(counts.get(state, 0)) for state in states}
            return BulkPreview(exact, False, True, sample, sample_page.scanned, by_state)
        tally: Counter[str] = Counter()
        scanned = 0
        cursor: str | None = None
        while True:
            page = fetch_page(job_store, query, query.order, cursor, BULK_CHUNK)
            rows = _until(page.items, stop_at)
            tally.update(record.state for record in rows)
            scanned += page.scanned
            cursor = page.cursor
            count = sum(tally.values())
            if cursor is None or len(rows) < len(page.items):
                return BulkPreview(count, False, True, sample, scanned, dict(tally))
            if count >= PREVIEW_CAP or scanned >= BULK_MAX_SCANNED:
                return BulkPreview(count, True, False, sample, scanned, dict(tally))


def _until(rows: list[Any], stop_at: StopAt | None) -> list[Any]:
    """``rows`` up to (without) the first one ``stop_at`` accepts."""
    if stop_at is None:
        return rows
    for index, row in enumerate(rows):
        if stop_at(row):
            return rows[:index]
    return rows


def bulk_filter(
    query: JobQuery, verb: str, resume: str | None, stop_at: StopAt | None = None
) -> BulkRun:
    """``verb`` on every job matching ``query``, from ``resume`` on, in bounded chunks.

    Pages of at most BULK_CHUNK ids are read with the keyset cursor, and each id gets
    its own store call.  One request handles at most BULK_MAX_ITEMS jobs and examines
    at most BULK_MAX_SCANNED rows; the returned ``resume`` cursor continues the run.
    The cursor is a position in the order, not an offset, so jobs that stop matching
    once acted on (a retried job is no longer failed) never shift what comes next.
    ``stop_at`` ends the run at the first row it accepts (a clean's age cut-off).
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
            rows = _until(page.items, stop_at)
            for record in rows:
                result = actions.run_job_action(job_store, verb, record.id)
                items.append(BulkItem(record.id, result.ok, result.message))
            cursor = page.cursor
            if cursor is None or len(rows) < len(page.items):
                return BulkRun(items, None, scanned)
            if len(items) >= BULK_MAX_ITEMS or scanned >= BULK_MAX_SCANNED:
                return BulkRun(items, cursor, scanned)
