"""Bulk runs (``views/bulk.py``, ``bulk.html``): a verb on ticked ids, or on a filter's matches.

A filter's matches are read with the explorer's keyset pages (:func:`fetch_page`),
in chunks of :data:`BULK_CHUNK`, each id its own store call through
:func:`mqadmin.actions.run_job_action`; one request handles at most
:data:`BULK_MAX_ITEMS` jobs and examines at most :data:`BULK_MAX_SCANNED` rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mqadmin import actions
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


def bulk_preview(query: JobQuery) -> BulkPreview:
    """How many jobs match (exact from counters when possible, else counted up to a cap) and a sample."""
    job_store = open_store(query.store)
    plan_query(job_store, query)
    with reaching(query.store):
        sample_page = fetch_page(job_store, query, query.order, None, PREVIEW_SAMPLE)
        exact = counter_total(job_store, query)
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
                result = actions.run_job_action(job_store, verb, record.id)
                items.append(BulkItem(record.id, result.ok, result.message))
            cursor = page.cursor
            if cursor is None:
                return BulkRun(items, None, scanned)
            if len(items) >= BULK_MAX_ITEMS or scanned >= BULK_MAX_SCANNED:
                return BulkRun(items, cursor, scanned)
