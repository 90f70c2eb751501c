"""The live dashboard: the wire format of its server-sent event stream (``views/events.py``).

A page subscribes to ``events/`` (htmx's SSE extension) and gets a few named events
instead of raw store events, so it does little work and stays correct under any load:

* ``ready`` -- sent first: the stream is live (app.js then pauses the page's polling);
* ``jobs`` -- jobs in the stream's scope changed state (a store, optionally one queue):
  the overview's counts and the explorer's rows re-fetch their partials;
* ``state`` -- (a job's stream) the job changed state: its summary re-fetches;
* ``progress`` -- (a job's stream) the job's progress bar, an HTML fragment swapped in;
* ``log`` -- (a job's stream) its new log lines, HTML ``<li>`` fragments appended.

Events are coalesced: at most one message of each kind per ``MQ_EVENTS_INTERVAL_MS``
(the first change of a quiet stream goes out at once, the last of a burst within one
interval), so 10,000 store events make a handful of fetches.  Fragments are rendered by
the job page's own templates (escaped like the page).  Every message carries the stream
position as its ``id`` (``<store>=<stream id>`` pairs, URL-encoded), so a reconnecting
browser resumes where it stopped (``Last-Event-ID``); a comment every
``MQ_EVENTS_HEARTBEAT_S`` keeps proxies from closing an idle stream and lets a WSGI
server notice a closed tab.

Settings (read per connection): ``MQ_EVENTS_ENABLED`` (default True: pages subscribe),
``MQ_EVENTS_MAX_CONNECTIONS`` (per process, default 8; over it the view answers 503 and
the page keeps polling), ``MQ_EVENTS_MAX_AGE_S`` (a connection's lifetime, default 300:
the browser reconnects), ``MQ_EVENTS_HEARTBEAT_S`` (15), ``MQ_EVENTS_INTERVAL_MS`` (500),
``MQ_EVENTS_RETRY_MS`` (the reconnect delay hinted to the browser, 3000).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode

from django.conf import settings
from django.template.loader import render_to_string

logger = logging.getLogger(__name__)

#: Store events that do not change a job's state (every other type does).
NOT_STATE_EVENTS = frozenset({"progress", "log"})
#: Store events read per call.
READ_COUNT = 500
#: Longest a single read blocks (ms): a closed tab or the lifetime limit is noticed
#: within this, and it stays well under the client's socket timeout.
READ_BLOCK_MS = 1000
#: A stream over several stores reads each without blocking, then sleeps this long.
MULTI_STORE_POLL_S = 0.25
#: New log lines held before they are sent even within the interval (memory bound).
MAX_PENDING_LINES = 500
#: A stream id as Redis issues them (``<ms>-<seq>``), or ``<ms>`` alone.
_STREAM_ID = re.compile(r"\A(\d{1,20})(?:-(\d{1,20}))?\Z")
_U64 = 2**64


def _setting(name: str, default: float) -> float:
    value = getattr(settings, name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"{name}={value!r} must be a positive number")
    return float(value)


@dataclass(frozen=True)
class Limits:
    """The stream's settings, read once per connection."""

    max_connections: int
    max_age_s: float
    heartbeat_s: float
    interval_s: float
    retry_ms: int

    @classmethod
    def from_settings(cls) -> Limits:
        return cls(
            max_connections=int(_setting("MQ_EVENTS_MAX_CONNECTIONS", 8)),
            max_age_s=_setting("MQ_EVENTS_MAX_AGE_S", 300),
            heartbeat_s=_setting("MQ_EVENTS_HEARTBEAT_S", 15),
            interval_s=_setting("MQ_EVENTS_INTERVAL_MS", 500) / 1000,
            retry_ms=int(_setting("MQ_EVENTS_RETRY_MS", 3000)),
        )


def enabled() -> bool:
    """Whether pages subscribe to the stream (``MQ_EVENTS_ENABLED``, default True)."""
    return bool(getattr(settings, "MQ_EVENTS_ENABLED", True))


# -- connection slots ------------------------------------------------------------------


class Slots:
    """The process's count of open streams, bounded by ``MQ_EVENTS_MAX_CONNECTIONS``.

    Shared by threads (WSGI) and the event loop (ASGI): a plain lock, held for a counter.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)
        self._open = 0
        #: Bumped when a stream finds no free slot: every open stream then writes at once
        #: (:meth:`Feed.due`), so those whose browser went away end (a WSGI server learns
        #: it only from a failed write) and free theirs.
        self.probe = 0

    @property
    def open(self) -> int:
        with self._lock:
            return self._open

    def acquire(self, limit: int, wait_s: float = 0.0) -> Slot | None:
        """A slot, or None when ``limit`` streams are open already.

        When they are, the open streams are asked to probe their browsers and the call
        waits up to ``wait_s`` for one of them to end (a blocking wait: WSGI only).
        """
        with self._lock:
            if self._open >= limit:
                self.probe += 1
                if not self._freed.wait_for(lambda: self._open < limit, timeout=wait_s):
                    return None
            self._open += 1
        return Slot(self)

    def give_back(self) -> None:
        """One stream closed (:meth:`Slot.release` calls it, once per slot)."""
        with self._lock:
            self._open -= 1
            self._freed.notify()


class Slot:
    """One open stream's place; :meth:`release` is idempotent (the generator's ``finally``
    and the response's ``close`` both call it: a response never iterated still frees it)."""

    def __init__(self, slots: Slots) -> None:
        self._slots = slots
        self._lock = threading.Lock()
        self._held = True

    def release(self) -> None:
        with self._lock:
            if not self._held:
                return
            self._held = False
        self._slots.give_back()


#: The slots of this process.
SLOTS = Slots()


# -- positions ---------------------------------------------------------------------------


class BadPosition(ValueError):
    """An ``after`` parameter or ``Last-Event-ID`` header that is not a stream position."""


def parse_stream_id(text: str) -> str:
    """A Redis stream id (``<ms>-<seq>`` or ``<ms>``), normalised to ``<ms>-<seq>``."""
    match = _STREAM_ID.match(text)
    if not match or int(match.group(1)) >= _U64 or int(match.group(2) or 0) >= _U64:
        raise BadPosition(f"“{text[:80]}” is not a stream id (expected <ms>-<seq>)")
    return f"{int(match.group(1))}-{int(match.group(2) or 0)}"


def parse_position(text: str, stores: Iterable[str]) -> dict[str, str]:
    """``store=id&store=id`` (as :func:`format_position` writes it) for the given stores.

    A bare stream id is accepted for a stream over one store.  Stores left out start
    from "now"; a store not in ``stores`` is an error.
    """
    names = list(stores)
    if len(text) > 4000:
        raise BadPosition("the position is too long")
    if "=" not in text:
        if len(names) != 1:
            raise BadPosition("a bare stream id names no store: use <store>=<stream id>")
        return {names[0]: parse_stream_id(text)}
    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise BadPosition("expected <store>=<stream id> pairs joined by “&”") from None
    out: dict[str, str] = {}
    for name, value in pairs:
        if name not in names:
            raise BadPosition(f"the position names store “{name[:80]}”, not streamed here")
        out[name] = parse_stream_id(value)
    return out


def format_position(position: dict[str, str]) -> str:
    return urlencode(sorted(position.items()))


# -- the feed: store events in, SSE messages out ------------------------------------------


@dataclass(frozen=True)
class Scope:
    """What one stream watches: its stores, and optionally one queue or one job."""

    stores: tuple[str, ...]
    queue: str | None = None
    job_id: str | None = None
    #: May the reader see the job's log lines and a progress object (view_payload)?
    can_view_payload: bool = False


def message(event: str | None, data: str, event_id: str | None = None) -> str:
    """One SSE message; ``data`` split into lines (CR, LF and CRLF all end a line)."""
    parts = []
    if event:
        parts.append(f"event: {event}\n")
    if event_id is not None:
        parts.append(f"id: {event_id}\n")
    for line in re.split(r"\r\n|\r|\n", data):
        parts.append(f"data: {line}\n")
    return "".join(parts) + "\n"


def render_progress(value: Any, can_view_payload: bool) -> str:
    """The job page's progress bar for ``value`` (its ``progress`` partial)."""
    from mqadmin.permissions import HIDDEN_VALUE

    return render_to_string(
        "mqadmin/job_detail.html#progress",
        {
            "progress": progress_view(value),
            "can_view_payload": can_view_payload,
            "hidden_value": HIDDEN_VALUE,
        },
    ).strip()


def render_log_lines(lines: list[tuple[int, str]]) -> str:
    """``<li>`` elements of log lines ``(at ms, message)`` (the ``log-lines`` partial)."""
    return render_to_string(
        "mqadmin/job_detail.html#log-lines", {"log_lines": [LogLine(at, m) for at, m in lines]}
    ).strip()


@dataclass(frozen=True)
class LogLine:
    at: int
    message: str


@dataclass(frozen=True)
class ProgressView:
    """How the page shows a progress value: a percent bar, a compact JSON, or nothing."""

    percent: float | None = None
    text: str | None = None

    @property
    def shown(self) -> bool:
        return self.percent is not None or self.text is not None


def progress_view(value: Any) -> ProgressView:
    if value is None:
        return ProgressView()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
        if number != number:  # NaN: nothing to draw
            return ProgressView(text="NaN")
        return ProgressView(percent=round(min(100.0, max(0.0, number)), 1))
    return ProgressView(text=json.dumps(value, separators=(",", ":"), ensure_ascii=False))


@dataclass
class Feed:
    """Folds store events into the pending messages of one stream and says when they are due.

    No I/O: the views' loops read the stores and write what :meth:`due` returns.
    """

    scope: Scope
    position: dict[str, str]
    limits: Limits
    started: float
    last_flush: float = float("-inf")
    last_write: float = 0.0
    changed: int = 0
    state: str | None = None
    progress: tuple[Any] | None = None
    lines: list[tuple[int, str]] = field(default_factory=list)
    #: The last probe request of SLOTS this stream answered.
    probe_seen: int = field(default_factory=lambda: SLOTS.probe)

    def take(self, store: str, events: Iterable[Any]) -> None:
        for event in events:
            self.position[store] = event.id
            if self.scope.queue is not None and event.queue != self.scope.queue:
                continue
            if self.scope.job_id is not None:
                if event.job_id != self.scope.job_id:
                    continue
                if event.type == "progress":
                    self.progress = (event.data,)
                elif event.type == "log":
                    if self.scope.can_view_payload:
                        self.lines.append((int(event.at), _log_message(event.data)))
                else:
                    self.state = event.type
                continue
            if event.type not in NOT_STATE_EVENTS:
                self.changed += 1

    @property
    def pending(self) -> bool:
        return bool(self.changed or self.state or self.progress or self.lines)

    def wait_s(self, now: float) -> float:
        """Seconds until something is due (a flush, a heartbeat or the end of life)."""
        until = [self.last_write + self.limits.heartbeat_s, self.started + self.limits.max_age_s]
        if self.pending:
            until.append(self.last_flush + self.limits.interval_s)
        return max(0.0, min(until) - now)

    def expired(self, now: float) -> bool:
        return now >= self.started + self.limits.max_age_s

    def opening(self, now: float) -> str:
        """The first bytes: the reconnect hint and ``ready`` (with the position)."""
        self.last_write = now
        data = json.dumps({"stores": list(self.scope.stores)})
        return f"retry: {self.limits.retry_ms}\n\n" + message(
            "ready", data, format_position(self.position)
        )

    def due(self, now: float) -> str:
        """The messages to write now ('' for none): coalesced changes, else a heartbeat."""
        flush = self.pending and (
            now >= self.last_flush + self.limits.interval_s or len(self.lines) >= MAX_PENDING_LINES
        )
        if flush:
            self.last_flush = now
            self.last_write = now
            return self._flush()
        probe = SLOTS.probe
        if now >= self.last_write + self.limits.heartbeat_s or probe != self.probe_seen:
            self.last_write, self.probe_seen = now, probe
            # A comment, and the position: an id-only message moves the browser's
            # Last-Event-ID without dispatching anything.
            return f": keep-alive\nid: {format_position(self.position)}\n\n"
        return ""

    def _flush(self) -> str:
        at = format_position(self.position)
        out = []
        if self.changed:
            out.append(message("jobs", json.dumps({"events": self.changed}), at))
        if self.state:
            out.append(message("state", json.dumps({"type": self.state}), at))
        if self.progress is not None:
            html = render_progress(self.progress[0], self.scope.can_view_payload)
            out.append(message("progress", html, at))
        if self.lines:
            out.append(message("log", render_log_lines(self.lines), at))
        self.changed, self.state, self.progress, self.lines = 0, None, None, []
        return "".join(out)


def _log_message(data: Any) -> str:
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return str(data["message"])
    return json.dumps(data, ensure_ascii=False)


# -- reading --------------------------------------------------------------------------------


def read_block_ms(feed: Feed, now: float, stores: int) -> int | None:
    """How long the next read may block (None: not at all, several stores are polled)."""
    if stores != 1:
        return None
    wait_ms = int(min(feed.wait_s(now) * 1000, READ_BLOCK_MS))
    # BLOCK 0 would wait forever: a flush that is due now reads without blocking.
    return wait_ms if wait_ms >= 1 else None


def now_s() -> float:
    return time.monotonic()


def step(feed: Feed, stores: dict[str, Any]) -> str:
    """One round of a stream: read each store once, return what is due to be written.

    A stream over one store blocks in its read (at most :data:`READ_BLOCK_MS`); over
    several, each is read without blocking and the round sleeps a little when nothing
    came.  Raises the store's errors (``store.JobStoreError``): the stream then ends.
    """
    block = read_block_ms(feed, now_s(), len(stores))
    got = False
    for name, job_store in stores.items():
        events = job_store.events(after=feed.position[name], block_ms=block, count=READ_COUNT)
        if events:
            got = True
            feed.take(name, events)
    if not got and block is None:
        time.sleep(min(MULTI_STORE_POLL_S, feed.wait_s(now_s())))
    return feed.due(now_s())


def events_url(
    stores: Iterable[str], *, queue: str | None = None, job_id: str | None = None
) -> str:
    """The stream URL a page subscribes to ('' when the stream is off or no store answers).

    It starts at the stores' newest events now, so nothing that happens between the
    page's render and its subscription is missed.
    """
    from django.urls import reverse

    from mqadmin import services
    from store.errors import JobStoreError

    if not enabled():
        return ""
    position: dict[str, str] = {}
    for name in stores:
        try:
            job_store = services.open_store(name)
            with services.reaching(name):
                position[name] = job_store.last_event_id()
        except (services.StoreUnavailable, services.UnknownStore, JobStoreError):
            continue
    if not position:
        return ""
    query: list[tuple[str, str]] = [("store", name) for name in position]
    if queue is not None:
        query.append(("queue", queue))
    if job_id is not None:
        query.append(("job", job_id))
    query.append(("after", format_position(position)))
    return f"{reverse('mqadmin:events')}?{urlencode(query)}"
