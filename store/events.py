"""The live surface of a store: its event stream, job progress and job logs.

Every state transition appends an event to the store's capped Redis stream
``{prefix}:events`` inside the same atomic script (lua/lib/events.lua), so a
reader sees a job's transitions in the order they happened, and only those
that happened.  A running handler reports progress and writes log lines
through ``current_job()``; both are guarded by the run's lock token (a run
that lost its lock writes nothing) and both append events too.

This module holds the parsing and checks both the sync store and the asyncio
one (store/aio) use, and the sync store's mixin.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from store import codec
from store.errors import InvalidRequestError, JobNotFoundError
from store.keys import StoreKeys
from store.records import JobEvent, JobLogLine, JobRecord
from store.steps import Steps, cmd, sleep

#: Every event type the stream carries.
EVENT_TYPES = (
    "enqueued",  # a new job, runnable now
    "delayed",  # a new job, runnable later
    "waiting",  # runnable again: a delayed job came due, a worker released it, a flow's children settled
    "active",  # claimed by a worker (attempt = the run)
    "progress",  # its handler reported progress (data = the value)
    "log",  # its handler wrote a log line (data = {"message": ...})
    "completed",
    "failed",
    "retrying",  # a failed run goes again (data {"run_at": ms} when later; {"manual": true} by an operator)
    "cancelled",
    "removed",  # deleted by an operator (retention's deletions are not events)
    "stalled",  # its lock expired: requeued, or failed when over the stall limit (a "failed" follows)
    "promoted",  # a delayed job made runnable now by an operator
    "waiting-children",  # a flow parent waits for its children (data {"pending": n})
)
#: The types after which a job never changes again.
FINAL_EVENT_TYPES = frozenset({"completed", "failed", "cancelled", "removed"})

#: The stream's length when no cap was set (``set_events_max_len``).
DEFAULT_EVENTS_MAX_LEN = 10_000
#: The largest cap (a stream of this many entries of a few hundred bytes is ~100 MB).
MAX_EVENTS_MAX_LEN = 1_000_000
#: Most stream entries (store calls' events) one ``events`` call returns.
MAX_EVENTS_COUNT = 1000
#: A blocking read waits in slices of at most this long (within any socket timeout).
BLOCK_SLICE_MS = 1000

#: Largest JSON text of one progress value.
MAX_PROGRESS_BYTES = 1024
#: A longer log message is cut to this many UTF-8 bytes (and marked).
MAX_LOG_LINE_BYTES = 8192
#: A log event carries at most this many characters of the message (the log has it whole).
EVENT_MESSAGE_CHARS = 1024
#: Default caps of one job's log: most lines and most bytes kept (the oldest go first).
DEFAULT_LOG_MAX_LINES = 1000
DEFAULT_LOG_MAX_BYTES = 256 * 1024
#: Most lines one ``job_logs`` call returns.
MAX_LOG_PAGE = 1000

_STREAM_ID = re.compile(r"\d{1,20}(-\d{1,20})?")
_CUT_MARK = " [cut]"


def check_after(after: Any) -> str:
    """A valid ``after`` cursor for XREAD: ``"$"``, ``"0"``, ``"<ms>"`` or ``"<ms>-<n>"``."""
    if after == "$":
        return after
    if not isinstance(after, str) or not _STREAM_ID.fullmatch(after):
        raise InvalidRequestError(
            f'after must be "$" or an event id like "1733472000000-0", not {after!r}'
        )
    return after


def check_count(count: Any, most: int, what: str = "count") -> int:
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= most:
        raise InvalidRequestError(f"{what} must be an integer from 1 to {most}, not {count!r}")
    return count


def check_block(block_ms: Any) -> int:
    """``block_ms`` as whole ms (0: do not block)."""
    if block_ms is None:
        return 0
    if (
        isinstance(block_ms, bool)
        or not isinstance(block_ms, int | float)
        or not math.isfinite(block_ms)
        or block_ms < 0
    ):
        raise InvalidRequestError(f"block_ms must be None or a number >= 0, not {block_ms!r}")
    return int(block_ms)


def check_max_len(max_len: Any) -> int:
    if (
        isinstance(max_len, bool)
        or not isinstance(max_len, int)
        or not 0 <= max_len <= MAX_EVENTS_MAX_LEN
    ):
        raise InvalidRequestError(
            f"the event stream's length must be an integer from 0 (no events) to "
            f"{MAX_EVENTS_MAX_LEN}, not {max_len!r}"
        )
    return max_len


def parse_max_len(raw: str | None) -> int:
    try:
        return int(raw) if raw not in (None, "") else DEFAULT_EVENTS_MAX_LEN
    except ValueError:
        return DEFAULT_EVENTS_MAX_LEN


#: The parts of a record of events in a stream entry before its job ids (lua/lib/events.lua):
#: type, name, queue, attempt, time, data, count.
RECORD_HEAD = 7


def events_from_entry(entry_id: str, fields: dict[str, str]) -> list[JobEvent]:
    """The JobEvents of one stream entry: every event one store call made, in order, all
    with the entry's id (tolerant of an entry edited by hand: unreadable parts default, a
    cut record yields the ids it has)."""
    parts = (fields.get("e") or "").split("\0")
    out: list[JobEvent] = []
    k = 0
    while k + RECORD_HEAD < len(parts):
        kind, name, queue, attempt_text, at_text, data_text, count = parts[k : k + RECORD_HEAD]
        ids = parts[k + RECORD_HEAD : k + RECORD_HEAD + codec.tolerant(int, count, 0)]
        k += RECORD_HEAD + len(ids)
        if not ids:
            break
        at = codec.tolerant(int, at_text, 0)
        attempt = codec.tolerant(int, attempt_text, 0)
        data = codec.tolerant(codec.loads, data_text, None) if data_text else None
        out.extend(
            JobEvent(entry_id, kind, job_id, name, queue, at, attempt, data) for job_id in ids
        )
    return out


def events_from_entries(entries: Any) -> list[JobEvent]:
    return [e for entry_id, fields in entries for e in events_from_entry(entry_id, fields or {})]


def events_from_reply(reply: Any) -> list[JobEvent]:
    """The events of an XREAD reply on one stream (RESP2 list or RESP3 map)."""
    if not reply:
        return []
    if isinstance(reply, dict):  # RESP3: {stream: [[entry, ...]]}
        (entries,) = next(iter(reply.values()))
    else:  # RESP2: [[stream, [entry, ...]]]
        entries = reply[0][1]
    return events_from_entries(entries)


def encode_progress(value: Any) -> str:
    """The JSON text of a progress value: a number 0-100, or a small JSON object."""
    if isinstance(value, bool) or not isinstance(value, int | float | dict):
        raise InvalidRequestError(
            f"progress must be a number from 0 to 100 or a JSON object, not {type(value).__name__}"
        )
    if not isinstance(value, dict) and not (math.isfinite(value) and 0 <= value <= 100):
        raise InvalidRequestError(f"progress must be from 0 to 100, not {value!r}")
    text = codec.dumps(value, "progress")
    if len(text.encode("utf-8")) > MAX_PROGRESS_BYTES:
        raise InvalidRequestError(
            f"progress is {len(text.encode('utf-8'))} bytes of JSON; at most {MAX_PROGRESS_BYTES}"
        )
    return text


def cut_message(message: Any) -> str:
    """``str(message)`` cut to MAX_LOG_LINE_BYTES of UTF-8 (marked), surrogates replaced."""
    text = message if isinstance(message, str) else str(message)
    raw = text.encode("utf-8", "replace")
    if len(raw) <= MAX_LOG_LINE_BYTES:
        return raw.decode("utf-8") if not text.isascii() else text
    room = MAX_LOG_LINE_BYTES - len(_CUT_MARK)
    return raw[:room].decode("utf-8", "ignore") + _CUT_MARK


def log_event_data(message: str) -> str:
    short = message if len(message) <= EVENT_MESSAGE_CHARS else message[:EVENT_MESSAGE_CHARS] + "…"
    return codec.dumps({"message": short}, "log message")


def check_log_caps(max_lines: Any, max_bytes: Any) -> tuple[int, int]:
    lines = DEFAULT_LOG_MAX_LINES if max_lines is None else max_lines
    size = DEFAULT_LOG_MAX_BYTES if max_bytes is None else max_bytes
    check_count(lines, 1_000_000, "log_max_lines")
    if (
        isinstance(size, bool)
        or not isinstance(size, int)
        or not MAX_LOG_LINE_BYTES <= size <= 1 << 30
    ):
        raise InvalidRequestError(
            f"log_max_bytes must be an integer from {MAX_LOG_LINE_BYTES} to {1 << 30}, not {size!r}"
        )
    return lines, size


def log_line(item: str) -> JobLogLine:
    at, _, message = item.partition(" ")
    return JobLogLine(at=codec.tolerant(int, at, 0), message=message)


def log_range(start: Any, limit: Any) -> tuple[int, int]:
    """LRANGE bounds for ``job_logs``: start counts from the oldest kept line (negative:
    from the newest)."""
    if isinstance(start, bool) or not isinstance(start, int):
        raise InvalidRequestError(f"start must be an integer, not {start!r}")
    check_count(limit, MAX_LOG_PAGE, "limit")
    stop = start + limit - 1
    if start < 0 <= stop:
        stop = -1
    return start, stop


def write_reply(reply: list[Any]) -> bool:
    """True when a progress/log write happened; False when the run lost its lock or the
    job is gone (nothing was written)."""
    return bool(reply) and reply[0] == "ok"


class EventSteps:
    """The live reads as steps (store/steps.py): events, the last event id, the stream's
    cap, job logs and the event-driven result wait, for the sync and the async store."""

    keys: StoreKeys
    # Provided by StoreCore.
    _get_job_steps: Callable[[str], Steps[JobRecord | None]]

    def _events_steps(self, after: Any, block_ms: Any, count: Any) -> Steps[list[JobEvent]]:
        after = check_after(after)
        count = check_count(count, MAX_EVENTS_COUNT)
        block = check_block(block_ms)
        key = self.keys.events
        if not block:
            return events_from_reply((yield cmd("events", "xread", {key: after}, count=count)))
        if after == "$":
            after = yield from self._last_event_id_steps()
        deadline = time.monotonic() + block / 1000
        while True:
            slice_ms = min(BLOCK_SLICE_MS, max(1, int((deadline - time.monotonic()) * 1000)))
            found = events_from_reply(
                (yield cmd("events", "xread", {key: after}, count=count, block=slice_ms))
            )
            if found or time.monotonic() >= deadline:
                return found

    def _last_event_id_steps(self) -> Steps[str]:
        newest = yield cmd("events", "xrevrange", self.keys.events, count=1)
        return str(newest[0][0]) if newest else "0-0"

    def _newest_events_steps(self, count: Any) -> Steps[list[JobEvent]]:
        count = check_count(count, MAX_EVENTS_COUNT)
        entries = yield cmd("events", "xrevrange", self.keys.events, count=count)
        return events_from_entries(reversed(entries))

    def _events_max_len_steps(self) -> Steps[int]:
        return parse_max_len((yield cmd("events", "get", self.keys.events_cap)))

    def _job_logs_steps(self, job_id: str, start: Any, limit: Any) -> Steps[list[JobLogLine]]:
        first, last = log_range(start, limit)
        items = yield cmd("job_logs", "lrange", self.keys.logs(job_id), first, last)
        return [log_line(item) for item in items]

    def _job_log_length_steps(self, job_id: str) -> Steps[int]:
        return int((yield cmd("job_logs", "llen", self.keys.logs(job_id))))

    def _wait_for_result_steps(self, job_id: str, timeout_s: float | None) -> Steps[JobRecord]:
        waiter = ResultWait(job_id, timeout_s)
        events_on = (yield from self._events_max_len_steps()) > 0
        # The cursor first, then the record: an end between the two is on the stream.
        cursor = (yield from self._last_event_id_steps()) if events_on else ""
        record = yield from self._get_job_steps(job_id)
        while not waiter.done(record):
            if not events_on:
                assert record is not None  # done() raised otherwise
                yield sleep(waiter.polls.next_delay(record.state))
                record = yield from self._get_job_steps(job_id)
                continue
            found = yield from self._events_steps(
                cursor, min(waiter.remaining_ms(), BLOCK_SLICE_MS), MAX_EVENTS_COUNT
            )
            cursor = newest_id(found, cursor)
            if waiter.should_read(found):
                record = yield from self._get_job_steps(job_id)
        assert record is not None
        return record


class EventOperations(EventSteps):
    """The live surface of ``RedisJobStore`` (mixed into the store class)."""

    # Provided by RedisJobStore.
    keys: StoreKeys
    client: Any
    _drive: Callable[..., Any]
    _command: Callable[..., Any]
    _run: Callable[..., Any]
    now: Callable[[], int]
    log_max_lines: int
    log_max_bytes: int

    # ---------------------------------------------------------------- events
    # The reads are written once as steps (EventSteps) and driven here with blocking calls.

    def events(
        self, after: str = "$", block_ms: float | None = None, count: int = 100
    ) -> list[JobEvent]:
        """Events after ``after`` (an event id; ``"0"``: from the oldest kept; ``"$"``: only
        new ones), oldest first, of at most ``count`` (1-1000) store calls.

        The events one store call made (a bulk enqueue, a batched ack and claim) share one
        stream entry and its id, and always come together.

        With ``block_ms`` it waits up to that long for the first event when none is there
        yet (a ``"$"`` cursor is pinned to the newest event when the call starts, so nothing
        appended meanwhile is missed); None or 0 returns at once.  Pass the last returned
        event's id as the next ``after``: the stream keeps about ``events_max_len()``
        events, so a reader that falls further behind skips the oldest.
        """
        return self._drive(self._events_steps(after, block_ms, count))

    def last_event_id(self) -> str:
        """The id of the newest event (``"0-0"`` when the stream is empty): a cursor for
        ``events`` that skips everything before now."""
        return self._drive(self._last_event_id_steps())

    def newest_events(self, count: int = 100) -> list[JobEvent]:
        """The events of the newest ``count`` (1-1000) store calls, oldest first."""
        return self._drive(self._newest_events_steps(count))

    def events_max_len(self) -> int:
        """How many events the stream keeps (about; 0: no events are written)."""
        return self._drive(self._events_max_len_steps())

    def set_events_max_len(self, max_len: int) -> None:
        """Set how many events the store's stream keeps (store-wide, every process at its
        next call; 0 stops writing events and deletes the stream).  The stream is trimmed
        to the new length at once."""
        self._run("events_cap", str(check_max_len(max_len)))

    # ------------------------------------------------------ progress and logs

    def set_progress(self, job_id: str, token: str, value: Any) -> bool:
        """Record the progress of the run holding ``token`` (``current_job().progress``).

        Returns False, writing nothing, when that run lost its lock (or the job is gone).
        """
        return write_reply(self._run("progress", self.now(), job_id, token, encode_progress(value)))

    def append_log(self, job_id: str, token: str, message: Any) -> bool:
        """Append a line to the log of the run holding ``token`` (``current_job().log``).

        Returns False, writing nothing, when that run lost its lock (or the job is gone).
        """
        text = cut_message(message)
        return write_reply(
            self._run(
                "log",
                self.now(),
                job_id,
                token,
                text,
                self.log_max_lines,
                self.log_max_bytes,
                log_event_data(text),
            )
        )

    def job_logs(self, job_id: str, start: int = 0, limit: int = 100) -> list[JobLogLine]:
        """A job's log lines, oldest first: ``limit`` (1-1000) from ``start`` (0 = the oldest
        line kept; negative counts from the newest, so ``start=-100`` is the last 100)."""
        return self._drive(self._job_logs_steps(job_id, start, limit))

    # ------------------------------------------------------------------ waits

    def wait_for_result(self, job_id: str, timeout_s: float | None = None) -> JobRecord:
        """Block until the job ends; return its terminal record.

        Event-driven: the cursor is taken first, then the record is read, then the call
        blocks on the event stream, so an end between the read and the block is never
        missed; it returns within milliseconds of the ack.  The record is read again on
        the job's final event and at least once a second (so a reader that fell behind a
        capped stream still sees the end).  With events turned off it polls (10 ms,
        doubling to 1 s).

        Raises:
            JobNotFoundError: the job does not exist (or was removed meanwhile).
            TimeoutError: it did not end within ``timeout_s``.
        """
        return self._drive(self._wait_for_result_steps(job_id, timeout_s))

    def job_log_length(self, job_id: str) -> int:
        """How many lines a job's log keeps now."""
        return self._drive(self._job_log_length_steps(job_id))


class PollWaits:
    """The delays between the reads of a polling result wait (a ``poll_schedule`` given
    to ``Job.await_result`` / ``Job.aawait_result``) and its deadline: 10 ms doubling up
    to 1 s, or along the schedule (seconds; when it runs out the wait times out)."""

    def __init__(
        self, job_id: str, timeout_s: float | None, poll_schedule: Iterable[float] | None
    ) -> None:
        self.job_id = job_id
        self.timeout_s = timeout_s
        self.delays = iter(poll_schedule) if poll_schedule is not None else _default_poll_delays()
        self.deadline = None if timeout_s is None else time.monotonic() + timeout_s

    def next_delay(self, state: str) -> float:
        """Seconds to sleep before the next read; TimeoutError when the wait is over."""
        try:
            delay = next(self.delays)
        except StopIteration:
            raise TimeoutError(
                f"job {self.job_id!r} is still {state} (poll schedule exhausted)"
            ) from None
        if self.deadline is not None:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"job {self.job_id!r} is still {state} after {self.timeout_s} s")
            delay = min(delay, remaining)
        return float(delay)


def _default_poll_delays() -> Iterator[float]:
    delay = 0.01
    while True:
        yield delay
        delay = min(1.0, delay * 2)


class ResultWait:
    """The bookkeeping of one event-driven result wait (``wait_for_result``; the async
    store's too): when to read the record again; its deadline and its polling fallback
    (events turned off) are a :class:`PollWaits`'."""

    def __init__(self, job_id: str, timeout_s: float | None) -> None:
        self.job_id = job_id
        self.polls = PollWaits(job_id, timeout_s, None)
        self.deadline = self.polls.deadline
        self.last_read = time.monotonic()

    def done(self, record: JobRecord | None) -> bool:
        """True when ``record`` is terminal; raises when it is gone or time is up."""
        self.last_read = time.monotonic()
        if record is None:
            raise JobNotFoundError(self.job_id)
        if record.is_terminal:
            return True
        if self.deadline is not None and self.last_read >= self.deadline:
            raise TimeoutError(
                f"job {self.job_id!r} is still {record.state} after {self.polls.timeout_s} s"
            )
        return False

    def remaining_ms(self) -> int:
        if self.deadline is None:
            return BLOCK_SLICE_MS
        return max(1, int((self.deadline - time.monotonic()) * 1000))

    def should_read(self, found: Sequence[JobEvent]) -> bool:
        """Read the record again: the job's final event came, nothing came for a whole
        block, a second passed since the last read, or the deadline is here."""
        if not found:
            return True
        job_id = self.job_id
        if any(e.job_id == job_id and e.type in FINAL_EVENT_TYPES for e in found):
            return True
        now = time.monotonic()
        return now - self.last_read >= 1 or (self.deadline is not None and now >= self.deadline)


def newest_id(events: Sequence[JobEvent], after: str) -> str:
    """The cursor after reading ``events`` (``after`` when there were none)."""
    return events[-1].id if events else after
