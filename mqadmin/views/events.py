"""The dashboard's server-sent event stream (``events/``), which the live pages subscribe to.

One async view serves both servers: under ASGI (uvicorn, daphne) the response streams
from an async generator whose blocking store reads run in a small thread pool, off the
event loop; under WSGI (``runserver``, gunicorn) from a plain generator in the request's
thread.  Either way a closed tab ends the loop: ASGI cancels it at once, WSGI at the
next write (a heartbeat at the latest).  The wire format is in :mod:`mqadmin.live`.

Answers: 401 without a login; 400 for a malformed query or ``Last-Event-ID``; 404 for
a job the store does not have; 503 (``Retry-After``) when a store is unreachable or
the process already holds ``MQ_EVENTS_MAX_CONNECTIONS`` streams -- the page then keeps
polling.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.db import connections
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.http import require_GET

from mqadmin import forms, live, permissions, services
from mqadmin.views.common import secure
from store.errors import JobStoreError

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Under WSGI, the longest a stream goes without writing (a keep-alive comment): how soon the
#: slot of a browser that went away is freed.
WSGI_PROBE_S = 2.0
#: Under WSGI, how long a new stream waits for a slot while the open ones are probed: a
#: stream notices a probe within its read (at most a second), then its write fails.
SLOT_WAIT_S = 2.5

_pool_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None


def _executor(size: int) -> ThreadPoolExecutor:
    """The threads ASGI streams read the stores in: one read in flight per stream."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != size:
            _pool = (size, ThreadPoolExecutor(max_workers=size, thread_name_prefix="mq-events"))
        return _pool[1]


def plain(status: int, text: str, **headers: str) -> HttpResponse:
    response = HttpResponse(text + "\n", status=status, content_type="text/plain; charset=utf-8")
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return secure(response)


@require_GET
async def events(request: HttpRequest) -> HttpResponseBase:
    """The event stream of the stores in ``?store=`` (default: all), optionally of one
    ``?queue=`` or one ``?job=``, from ``Last-Event-ID`` or ``?after=`` (default: now)."""
    user = await request.auser()
    if not user.is_authenticated:
        return plain(401, "Log in to the dashboard to follow its events.")
    form = forms.EventStreamForm(request.GET)
    if not form.is_valid():
        return plain(400, "\n".join(forms.form_errors(form)))
    names: list[str] = form.cleaned_data["store"]
    raw_position = request.headers.get("Last-Event-ID") or form.cleaned_data["after"] or ""
    try:
        position = live.parse_position(raw_position, names) if raw_position else {}
    except live.BadPosition as exc:
        return plain(400, f"Cannot resume the event stream: {exc}.")
    limits = live.Limits.from_settings()
    scope = live.Scope(
        stores=tuple(names),
        queue=form.cleaned_data["queue"],
        job_id=form.cleaned_data["job"],
        can_view_payload=await sync_to_async(permissions.can_view_payload)(user),
    )
    # Under WSGI a full house may hold streams of pages already left: they are probed and
    # the request waits a moment for one to end (under ASGI a closed stream ends at once).
    wait_s = 0.0 if isinstance(request, ASGIRequest) else SLOT_WAIT_S
    slot = await sync_to_async(live.SLOTS.acquire, thread_sensitive=False)(
        limits.max_connections, wait_s
    )
    if slot is None:
        return plain(
            503,
            "Too many live dashboards are open on this server: this page refreshes by "
            "polling instead.",
            Retry_After=str(max(1, limits.retry_ms // 1000) * 10),
        )
    try:
        opened = await _off_loop(request, limits, functools.partial(_open, scope, position))
    except BaseException:
        slot.release()
        raise
    if isinstance(opened, HttpResponse):
        slot.release()
        return opened
    stores, position = opened
    await sync_to_async(_close_database_connections)()
    content: Iterator[str] | AsyncIterator[str]
    if isinstance(request, ASGIRequest):
        feed = live.Feed(scope=scope, position=position, limits=limits, started=live.now_s())
        content = _stream_async(feed, stores, slot, _executor(limits.max_connections))
    else:
        # A WSGI server learns that the browser left (another page, a closed tab) only when a
        # write fails: a short heartbeat frees the slot within seconds, not at the next
        # regular one (page after page would otherwise run the process out of slots).
        probing = dataclasses.replace(limits, heartbeat_s=min(limits.heartbeat_s, WSGI_PROBE_S))
        feed = live.Feed(scope=scope, position=position, limits=probing, started=live.now_s())
        content = _stream(feed, stores, slot)
    response = EventStreamResponse(content, slot)
    return secure(response)


class EventStreamResponse(StreamingHttpResponse):
    """``text/event-stream``, never cached or buffered, holding one connection slot.

    Closing the response frees the slot too: one closed before its first chunk (the
    client went away) never ran the generator's own ``finally``.
    """

    def __init__(self, content: Iterator[str] | AsyncIterator[str], slot: live.Slot) -> None:
        super().__init__(content, content_type="text/event-stream; charset=utf-8")
        self.slot = slot
        # And a response dropped without being closed (never served) frees it when collected.
        weakref.finalize(self, slot.release)
        self["Cache-Control"] = "no-cache, no-transform"
        # nginx (and proxies that honour it) would otherwise hold the stream in a buffer.
        self["X-Accel-Buffering"] = "no"

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.slot.release()


async def _off_loop(request: HttpRequest, limits: live.Limits, call: Callable[[], T]) -> T:
    """Run a blocking store call off the event loop (under ASGI), or in place (WSGI)."""
    if isinstance(request, ASGIRequest):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_executor(limits.max_connections), call)
    return call()


def _open(
    scope: live.Scope, position: dict[str, str]
) -> tuple[dict[str, Any], dict[str, str]] | HttpResponse:
    """The stores of the stream and where each starts (a store not in ``position``: now)."""
    stores: dict[str, Any] = {}
    start = dict(position)
    for name in scope.stores:
        try:
            job_store = services.open_store(name)
            with services.reaching(name):
                if scope.job_id is not None and job_store.get_job(scope.job_id) is None:
                    return plain(404, f"Store “{name}” has no job with this id.")
                if name not in start:
                    start[name] = job_store.last_event_id()
        except services.StoreUnavailable as exc:
            return plain(503, f"Store “{name}” is unavailable: {exc.message}", Retry_After="30")
        stores[name] = job_store
    return stores, start


def _close_database_connections() -> None:
    """A stream lives for minutes without the database: give its connection back now.

    (Not inside a transaction, e.g. a test's: closing would break it.)"""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close()


def _stream(feed: live.Feed, stores: dict[str, Any], slot: live.Slot) -> Iterator[str]:
    try:
        yield feed.opening(live.now_s())
        while not feed.expired(live.now_s()):
            out = live.step(feed, stores)
            if out:
                yield out
    except JobStoreError as exc:
        logger.warning("event stream ended: a store failed: %s", exc)
    finally:
        slot.release()


async def _stream_async(
    feed: live.Feed, stores: dict[str, Any], slot: live.Slot, executor: ThreadPoolExecutor
) -> AsyncIterator[str]:
    loop = asyncio.get_running_loop()
    try:
        yield feed.opening(live.now_s())
        while not feed.expired(live.now_s()):
            # A cancelled stream (the tab closed) leaves this read to finish in its thread
            # within READ_BLOCK_MS; its result is dropped.
            out = await loop.run_in_executor(executor, live.step, feed, stores)
            if out:
                yield out
    except JobStoreError as exc:
        logger.warning("event stream ended: a store failed: %s", exc)
    finally:
        slot.release()
