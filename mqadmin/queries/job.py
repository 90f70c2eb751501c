"""The job page (``views/job.py``, ``job_detail.html``): one job, its attempts, lock and dedupe,
and why a waiting job waits.

:func:`failure_of` reads the worker's failure shape out of an exit value; the flow
page and the templates use it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mqadmin import actions, services
from mqadmin.queries.common import TERMINAL
from mqadmin.services import open_store, reaching

#: The newest log lines the job page shows (live lines are appended after them).
LOG_TAIL = 200
#: Log lines a page of the job's own log page shows (the store's default cap is 1,000).
LOG_PAGE = 500


@dataclass(frozen=True)
class LogTail:
    """The newest lines of a job's log and how many it keeps in all."""

    lines: list[Any]
    total: int

    @property
    def cut(self) -> bool:
        return self.total > len(self.lines)


@dataclass(frozen=True)
class LogPage:
    """Lines ``start`` onwards of a job's log (oldest first), and how many it keeps."""

    start: int
    lines: list[Any]
    total: int

    @property
    def first_number(self) -> int:
        return self.start + 1

    @property
    def last_number(self) -> int:
        return self.start + len(self.lines)

    @property
    def next_start(self) -> int | None:
        return self.last_number if self.last_number < self.total else None

    @property
    def previous_start(self) -> int | None:
        return max(0, self.start - LOG_PAGE) if self.start > 0 else None


def log_tail(store_name: str, job_id: str) -> LogTail:
    """The job page's Logs section: the newest :data:`LOG_TAIL` lines."""
    job_store = open_store(store_name)
    with reaching(store_name):
        lines = job_store.job_logs(job_id, start=-LOG_TAIL, limit=LOG_TAIL)
        total = job_store.job_log_length(job_id)
    return LogTail(lines=list(lines), total=max(total, len(lines)))


def log_page(store_name: str, job_id: str, start: int = 0) -> LogPage | None:
    """A page of the job's log from line ``start`` (0: the oldest kept); None when the job
    does not exist.  The store drops a log's oldest lines past its cap, so line numbers
    count from the oldest line kept now."""
    job_store = open_store(store_name)
    with reaching(store_name):
        if job_store.get_job(job_id) is None:
            return None
        lines = job_store.job_logs(job_id, start=start, limit=LOG_PAGE)
        total = job_store.job_log_length(job_id)
    return LogPage(start=start, lines=list(lines), total=max(total, start + len(lines)))


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
    #: Why the waiting job is not claimed now (a pause or a limit), None when nothing holds it.
    wait: Any | None = None

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
        wait = job_store.wait_reason(record) if record.state == "waiting" else None
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
        allowed=actions.actions_for_state(record.state),
        now=now,
        timeline_start=start,
        timeline_end=end,
        wait=wait,
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
