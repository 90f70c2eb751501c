"""The live dashboard's event stream (``events/``) under WSGI and ASGI, and the pages that
subscribe to it: login, limits, heartbeats, resume, filtering, escaping, disconnects."""

from __future__ import annotations

import asyncio
import html as htmllib
import re
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from asgiref.sync import async_to_sync
from django.core.handlers.asgi import ASGIHandler
from django.core.signals import request_finished
from django.db import close_old_connections
from django.test import AsyncClient, Client

from mqadmin import live
from store import Claimed, EnqueueRequest, RedisJobStore
from tests.mqadmin.test_views_common import *  # noqa: F403  (the fixtures in its __all__)
from tests.mqadmin.test_views_common import MARKUP, Stores, text_of

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def quick_stream(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Short intervals so a test sees coalescing, heartbeats and lifetimes in a second.

    And slots of the test's own: a stream another test of this process left open (a
    browser test's tab, closed a moment ago) ends on its own schedule and gives its slot
    back to the process's slots, never to these."""
    settings.MQ_EVENTS_INTERVAL_MS = 50
    settings.MQ_EVENTS_HEARTBEAT_S = 30
    settings.MQ_EVENTS_MAX_AGE_S = 30
    monkeypatch.setattr(live, "SLOTS", live.Slots())
    before = live.SLOTS.open
    yield
    # Every stream a test opened is closed by then: no slot (and no thread) leaks.
    deadline = time.monotonic() + 5
    while live.SLOTS.open != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live.SLOTS.open == before


def parse(text: str) -> list[dict[str, str]]:
    """SSE text as a browser reads it: one dict per message, comments as {"comment": ...}."""
    out = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line.startswith(":"):
                fields["comment"] = line[1:].strip()
                continue
            if not line:
                continue
            name, _, value = line.partition(": ")
            fields[name] = f"{fields[name]}\n{value}" if name in fields else value
        if fields:
            out.append(fields)
    return out


class Reader:
    """Reads a streaming response (WSGI test client) message by message."""

    def __init__(self, response: Any) -> None:
        self.response = response
        self.chunks = iter(response.streaming_content)
        self.buffer = ""

    def until(
        self, wanted: Callable[[dict[str, str]], bool], timeout: float = 8.0
    ) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while "\n\n" in self.buffer:
                block, self.buffer = self.buffer.split("\n\n", 1)
                for message in parse(block + "\n\n"):
                    if wanted(message):
                        return message
            self.buffer += next(self.chunks).decode()
        raise AssertionError("the stream did not send the expected message in time")

    def event(self, name: str, timeout: float = 8.0) -> dict[str, str]:
        return self.until(lambda m: m.get("event") == name, timeout)

    def close(self) -> None:
        # As Django's test client does when a streamed response is read to its end: the
        # request's end must not close the test's database connection, which holds the
        # test's transaction (PostgreSQL would lose it; SQLite's in-memory one shrugs).
        request_finished.disconnect(close_old_connections)
        try:
            self.response.close()
        finally:
            request_finished.connect(close_old_connections)


def stream(client: Client, query: str = "store=main", **headers: str) -> Reader:
    response = client.get(f"/events/?{query}", headers=headers)
    assert response.status_code == 200, response.content if not response.streaming else ""
    assert response["Content-Type"] == "text/event-stream; charset=utf-8"
    return Reader(response)


def claim(store: RedisJobStore, job_id: str, queue: str = "q") -> str:
    claimed = store.claim(queue=queue, names=["A"], token="w:1", lock_duration_ms=30_000)
    assert isinstance(claimed, Claimed) and claimed.job.id == job_id
    return "w:1"


# ---------------------------------------------------------------------- access


def test_the_stream_needs_a_login(stores: Stores) -> None:
    response = Client().get("/events/?store=main")
    assert response.status_code == 401
    assert not response.streaming


def test_the_stream_opens_with_retry_and_ready_and_is_never_buffered(
    stores: Stores, viewer: Client
) -> None:
    reader = stream(viewer)
    try:
        assert reader.response["Cache-Control"] == "no-cache, no-transform"
        assert reader.response["X-Accel-Buffering"] == "no"
        first = next(reader.chunks).decode()
        assert first.startswith("retry: 3000\n\n")
        assert parse(first)[1]["event"] == "ready"
    finally:
        reader.close()


@pytest.mark.parametrize(
    ("query", "headers", "message"),
    [
        ("store=main&after=yesterday", {}, "is not a stream id"),
        ("store=main", {"Last-Event-ID": "main=1-0&main2=2-0"}, "not streamed here"),
        ("store=main", {"Last-Event-ID": "$"}, "is not a stream id"),
        ("after=1-0", {}, "a bare stream id names no store"),
        ("store=nowhere", {}, "nowhere"),
        ("job=j-1", {}, "exactly one store"),
        ("store=main&queue=a&job=b", {}, "not both"),
        ("store=main&job=a%00b", {}, "Null characters are not allowed"),
    ],
)
def test_a_bad_query_or_position_is_400(
    stores: Stores, viewer: Client, query: str, headers: dict[str, str], message: str
) -> None:
    response = viewer.get(f"/events/?{query}", headers=headers)
    assert response.status_code == 400
    assert message in response.content.decode()


def test_an_unknown_job_is_404(stores: Stores, viewer: Client) -> None:
    response = viewer.get("/events/?store=main&job=ghost")
    assert response.status_code == 404


def test_over_the_connection_limit_the_answer_is_503_with_retry_after(
    stores: Stores, viewer: Client, settings: Any
) -> None:
    settings.MQ_EVENTS_MAX_CONNECTIONS = live.SLOTS.open + 1
    first = stream(viewer)
    try:
        refused = viewer.get("/events/?store=main")
        assert refused.status_code == 503
        assert int(refused["Retry-After"]) > 0
        assert "polling" in refused.content.decode()
    finally:
        first.close()
    again = stream(viewer)
    again.close()


# ---------------------------------------------------------------------- what it sends


def test_state_changes_are_coalesced_into_jobs_messages(stores: Stores, viewer: Client) -> None:
    reader = stream(viewer)
    try:
        reader.event("ready")
        for n in range(300):
            stores.main.enqueue(EnqueueRequest(id=f"j-{n}", name="A", queue="q"))
        seen = 0
        while seen < 300:
            seen += int(re.search(r"\d+", reader.event("jobs")["data"]).group())  # type: ignore[union-attr]
        assert seen == 300
    finally:
        reader.close()


def test_the_stream_starts_now_unless_told_where(stores: Stores, viewer: Client) -> None:
    stores.main.enqueue(EnqueueRequest(id="before", name="A", queue="q"))
    reader = stream(viewer)
    try:
        ready = reader.event("ready")
        assert ready["id"] == f"main={stores.main.last_event_id()}"
        stores.main.enqueue(EnqueueRequest(id="after", name="A", queue="q"))
        assert reader.event("jobs")["data"] == '{"events": 1}'
    finally:
        reader.close()


def test_last_event_id_resumes_where_the_browser_stopped(stores: Stores, viewer: Client) -> None:
    stores.main.enqueue(EnqueueRequest(id="seen", name="A", queue="q"))
    seen = stores.main.last_event_id()
    stores.main.enqueue(EnqueueRequest(id="missed-1", name="A", queue="q"))
    stores.main.enqueue(EnqueueRequest(id="missed-2", name="A", queue="q"))
    newest = stores.main.last_event_id()

    # The header wins over the page's ?after= (the page's render is older).
    reader = stream(viewer, "store=main&after=0-0", **{"Last-Event-ID": f"main={seen}"})
    try:
        message = reader.event("jobs")
        assert message["data"] == '{"events": 2}'
        assert message["id"] == f"main={newest}"
    finally:
        reader.close()


def test_after_from_the_page_resumes_too(stores: Stores, viewer: Client) -> None:
    stores.main.enqueue(EnqueueRequest(id="one", name="A", queue="q"))
    reader = stream(viewer, "store=main&after=0")
    try:
        assert reader.event("jobs")["data"] == '{"events": 1}'
    finally:
        reader.close()


def test_a_queue_stream_ignores_other_queues(stores: Stores, viewer: Client) -> None:
    reader = stream(viewer, "store=main&queue=mail")
    try:
        reader.event("ready")
        stores.main.enqueue(EnqueueRequest(id="other", name="A", queue="billing"))
        stores.main.enqueue(EnqueueRequest(id="mine", name="A", queue="mail"))
        message = reader.event("jobs")
        assert message["data"] == '{"events": 1}'
        assert message["id"] == f"main={stores.main.last_event_id()}"
    finally:
        reader.close()


def test_one_stream_follows_every_store(stores: Stores, viewer: Client) -> None:
    reader = stream(viewer, "")
    try:
        ready = reader.event("ready")
        assert set(parse_qs(ready["id"])) == {"main", "side"}
        stores.side.enqueue(EnqueueRequest(id="s-1", name="A", queue="q"))
        message = reader.event("jobs")
        assert parse_qs(message["id"])["side"] == [stores.side.last_event_id()]
    finally:
        reader.close()


def test_a_job_stream_sends_its_state_progress_and_escaped_log_lines(
    stores: Stores, admin_client_: Client
) -> None:
    main = stores.main
    job_id = main.enqueue(EnqueueRequest(id="watched", name="A", queue="q")).id
    main.enqueue(EnqueueRequest(id="other", name="B", queue="q"))
    reader = stream(admin_client_, "store=main&job=watched")
    try:
        reader.event("ready")
        token = claim(main, job_id)
        assert reader.event("state")["data"] == '{"type": "active"}'
        assert main.set_progress(job_id, token, 37)
        assert main.append_log(job_id, token, f"step 1 {MARKUP}")
        progress = reader.event("progress")
        assert '<progress id="job-progress-bar" max="100" value="37">' in progress["data"]
        log = reader.event("log")
        assert htmllib.escape(f"step 1 {MARKUP}") in log["data"]
        assert "<script>" not in log["data"]
        assert log["data"].startswith("<li data-at=")
    finally:
        reader.close()


def test_log_lines_are_not_sent_without_the_view_payload_permission(
    stores: Stores, viewer: Client
) -> None:
    main = stores.main
    job_id = main.enqueue(EnqueueRequest(id="secretive", name="A", queue="q")).id
    reader = stream(viewer, "store=main&job=secretive")
    try:
        reader.event("ready")
        token = claim(main, job_id)
        assert main.append_log(job_id, token, "the password is hunter2")
        assert main.set_progress(job_id, token, 50)
        got = [reader.event("state"), reader.event("progress")]
        main.set_progress(job_id, token, 60)
        reader.event("progress")
        assert all("hunter2" not in m["data"] for m in got)
        assert "log" not in reader.buffer
    finally:
        reader.close()


def test_heartbeats_keep_an_idle_stream_open(stores: Stores, viewer: Client, settings: Any) -> None:
    settings.MQ_EVENTS_HEARTBEAT_S = 0.2
    reader = stream(viewer)
    try:
        ready = reader.event("ready")
        beat = reader.until(lambda m: m.get("comment") == "keep-alive", timeout=3)
        assert beat["id"] == ready["id"]  # the position, so a reconnect resumes there
    finally:
        reader.close()


def test_a_stream_ends_at_its_lifetime_and_frees_its_slot(
    stores: Stores, viewer: Client, settings: Any
) -> None:
    settings.MQ_EVENTS_MAX_AGE_S = 0.3
    open_before = live.SLOTS.open
    response = viewer.get("/events/?store=main")
    assert live.SLOTS.open == open_before + 1
    started = time.monotonic()
    body = b"".join(response.streaming_content).decode()
    assert time.monotonic() - started < 3
    assert parse(body)[-1]["event"] == "ready"
    assert live.SLOTS.open == open_before


# ---------------------------------------------------------------------- ASGI


def test_under_asgi_the_stream_is_async_and_ends_when_closed(
    stores: Stores, admin_client_: Client
) -> None:
    """Django's AsyncClient: an async generator streams events; closing it frees the slot."""
    open_before = live.SLOTS.open

    async def scenario() -> list[dict[str, str]]:
        client = AsyncClient()
        client.cookies = admin_client_.cookies
        response = await client.get("/events/?store=main")
        assert response.status_code == 200
        assert response.is_async
        content = response.streaming_content
        got = parse((await anext(content)).decode())
        assert live.SLOTS.open == open_before + 1
        await asyncio.to_thread(
            stores.main.enqueue, EnqueueRequest(id="asgi-1", name="A", queue="q")
        )
        buffer = ""
        while "event: jobs" not in buffer:
            buffer += (await asyncio.wait_for(anext(content), 5)).decode()
        got += parse(buffer)
        await content.aclose()
        return got

    messages = async_to_sync(scenario)()

    assert [m.get("event") for m in messages if "event" in m] == ["ready", "jobs"]
    assert live.SLOTS.open == open_before


@pytest.mark.django_db(transaction=True)
def test_under_asgi_a_closed_tab_ends_the_loop_at_once(
    stores: Stores, admin_client_: Client
) -> None:
    """The ASGI handler itself: after http.disconnect the stream stops within a read.

    Committed data (transaction=True): the handler reads the session on a connection of its
    own, which on PostgreSQL would not see a row the test's transaction has not committed.
    """
    session = admin_client_.cookies["sessionid"].value
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/events/",
        "raw_path": b"/events/",
        "query_string": b"store=main",
        "root_path": "",
        "headers": [(b"host", b"testserver"), (b"cookie", f"sessionid={session}".encode())],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }
    open_before = live.SLOTS.open

    async def scenario() -> tuple[list[dict[str, Any]], float]:
        disconnect = asyncio.Event()
        sent: list[dict[str, Any]] = []
        requested = False

        async def receive() -> dict[str, Any]:
            nonlocal requested
            if not requested:
                requested = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await disconnect.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
            if b"event: ready" in message.get("body", b""):
                disconnect.set()

        task = asyncio.ensure_future(ASGIHandler()(scope, receive, send))
        try:
            await asyncio.wait_for(disconnect.wait(), 15)
        except TimeoutError:
            task.cancel()
            raise AssertionError(f"no ready event from the stream: {sent!r}") from None
        asked = time.monotonic()
        await asyncio.wait_for(task, 5)
        return sent, time.monotonic() - asked

    sent, took = async_to_sync(scenario)()

    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    assert took < 2  # cancelled at its pending read, which blocks at most a second
    assert live.SLOTS.open == open_before


# ---------------------------------------------------------------------- WSGI disconnects


@pytest.mark.django_db(transaction=True)
def test_under_a_threaded_wsgi_server_a_closed_tab_ends_the_loop(
    live_server: Any, stores: Stores, admin_client_: Client, settings: Any
) -> None:
    """runserver's kind of server: the loop notices the closed socket at its next write."""
    settings.MQ_EVENTS_HEARTBEAT_S = 0.2
    open_before = live.SLOTS.open
    address = urlsplit(live_server.url)
    session = admin_client_.cookies["sessionid"].value
    with socket.create_connection((address.hostname, address.port), timeout=5) as conn:
        conn.sendall(
            b"GET /events/?store=main HTTP/1.1\r\nHost: testserver\r\n"
            + f"Cookie: sessionid={session}\r\n\r\n".encode()
        )
        received = b""
        while b"event: ready" not in received:
            received += conn.recv(4096)
        assert b"200 OK" in received.split(b"\r\n", 1)[0]
        assert live.SLOTS.open == open_before + 1
    deadline = time.monotonic() + 5
    while live.SLOTS.open != open_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live.SLOTS.open == open_before


# ---------------------------------------------------------------------- the pages


def after_of(html: str) -> dict[str, list[str]]:
    match = re.search(r'sse-connect="([^"]+)"', html)
    assert match, "the page does not subscribe"
    return parse_qs(urlsplit(htmllib.unescape(match.group(1))).query)


def test_the_live_pages_subscribe_from_their_render(stores: Stores, admin_client_: Client) -> None:
    job_id = stores.main.enqueue(EnqueueRequest(id="a/b c", name="A", queue="q")).id
    newest = stores.main.last_event_id()

    overview = after_of(text_of(admin_client_.get("/")))
    explorer = after_of(text_of(admin_client_.get("/jobs/?store=main&queue=q")))
    job = after_of(text_of(admin_client_.get(f"/stores/main/jobs/{job_id}")))

    assert overview["store"] == ["main", "side"]
    assert parse_qs(overview["after"][0])["main"] == [newest]
    assert explorer["store"] == ["main"] and "queue" not in explorer
    assert job["job"] == [job_id] and job["after"] == [f"main={newest}"]


def test_pages_do_not_subscribe_when_the_stream_is_off(
    stores: Stores, admin_client_: Client, settings: Any
) -> None:
    settings.MQ_EVENTS_ENABLED = False
    for url in ("/", "/jobs/?store=main"):
        html = text_of(admin_client_.get(url))
        assert "sse-connect" not in html
        assert 'class="poll"' in html or 'data-refresh="#results"' in html


def test_htmx_swaps_do_not_reopen_the_stream(stores: Stores, admin_client_: Client) -> None:
    job_id = stores.main.enqueue(EnqueueRequest(name="A", queue="q")).id
    for url in ("/", "/jobs/?store=main", f"/stores/main/jobs/{job_id}"):
        partial = text_of(admin_client_.get(url, headers={"HX-Request": "true"}))
        assert "sse-connect" not in partial and "<html" not in partial


def test_the_job_page_shows_progress_and_the_newest_log_lines(
    stores: Stores, admin_client_: Client
) -> None:
    main = stores.main
    job_id = main.enqueue(EnqueueRequest(id="runner", name="A", queue="q")).id
    token = claim(main, job_id)
    main.set_progress(job_id, token, 64)
    for n in range(205):
        main.append_log(job_id, token, f"line {n} {MARKUP}")

    html = text_of(admin_client_.get(f"/stores/main/jobs/{job_id}"))

    assert '<progress id="job-progress-bar" max="100" value="64">' in html
    assert '<label for="job-progress-bar">Progress</label>' in html
    lines = re.findall(r'<span class="log-message">(.*?)</span>', html)
    assert len(lines) == 200
    assert lines[0] == htmllib.escape(f"line 5 {MARKUP}") and lines[-1].startswith("line 204 ")
    assert "The newest 200 of 205 lines kept" in html
    assert 'sse-swap="log" hx-swap="beforeend"' in html


def test_a_progress_object_shows_as_compact_json(
    stores: Stores, admin_client_: Client, viewer: Client
) -> None:
    main = stores.main
    job_id = main.enqueue(EnqueueRequest(id="obj", name="A", queue="q")).id
    token = claim(main, job_id)
    main.set_progress(job_id, token, {"rows": 3, "of": "<all>"})

    shown = text_of(admin_client_.get(f"/stores/main/jobs/{job_id}"))
    hidden = text_of(viewer.get(f"/stores/main/jobs/{job_id}"))

    assert "{&quot;rows&quot;:3,&quot;of&quot;:&quot;&lt;all&gt;&quot;}" in shown
    assert "&lt;all&gt;" not in hidden
    assert 'id="logs-title"' in hidden and "log-lines" not in hidden


def test_the_whole_log_pages_from_the_oldest_line(
    stores: Stores, admin_client_: Client, viewer: Client
) -> None:
    main = stores.main
    job_id = main.enqueue(EnqueueRequest(id="a/long", name="A", queue="q")).id
    token = claim(main, job_id)
    for n in range(600):
        main.append_log(job_id, token, f"line {n}")

    first = text_of(admin_client_.get(f"/stores/main/logs/{job_id}"))
    second = text_of(admin_client_.get(f"/stores/main/logs/{job_id}?start=500"))

    assert "Lines 1–500 of 600" in first and "line 0<" in first and "line 500<" not in first
    assert 'rel="next" href="/stores/main/logs/a/long?start=500"' in first
    assert "Lines 501–600 of 600" in second and 'rel="prev"' in second
    assert viewer.get(f"/stores/main/logs/{job_id}").status_code == 403
    assert admin_client_.get(f"/stores/main/logs/{job_id}?start=-1").status_code == 400
    assert admin_client_.get("/stores/main/logs/ghost").status_code == 404
