"""The live dashboard's wire format (``mqadmin/live.py``) without a server: store events
folded into coalesced SSE messages, positions, fragments and connection slots."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from mqadmin import live

LIMITS = live.Limits(max_connections=2, max_age_s=60, heartbeat_s=15, interval_s=0.5, retry_ms=3000)


@dataclass(frozen=True)
class Event:
    """The fields of ``store.JobEvent`` the feed reads."""

    id: str
    type: str
    job_id: str = "j-1"
    name: str = "Export"
    queue: str = "q"
    at: int = 1_733_472_000_000
    attempt: int = 1
    data: Any = None


def feed(**scope: Any) -> live.Feed:
    stores = scope.pop("stores", ("main",))
    return live.Feed(
        scope=live.Scope(stores=stores, **scope),
        position=dict.fromkeys(stores, "0-0"),
        limits=LIMITS,
        started=0.0,
    )


def messages(text: str) -> list[dict[str, str]]:
    """Parse SSE text the way a browser does (one dict per message; comments dropped)."""
    out = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(": ")
            fields[name] = fields[name] + "\n" + value if name in fields else value
        if fields:
            out.append(fields)
    return out


def test_a_burst_of_ten_thousand_changes_is_one_message_per_interval() -> None:
    stream = feed()
    stream.take("main", [Event(f"1-{n}", "completed", job_id=f"j-{n}") for n in range(10_000)])

    first = messages(stream.due(1.0))
    stream.take("main", [Event("2-0", "failed")])
    held = stream.due(1.2)
    second = messages(stream.due(1.5))

    assert first == [{"event": "jobs", "id": "main=1-9999", "data": '{"events": 10000}'}]
    assert held == ""  # within the interval: coalesced, not dropped
    assert second == [{"event": "jobs", "id": "main=2-0", "data": '{"events": 1}'}]
    assert stream.due(5.0) == ""


def test_progress_and_log_events_do_not_move_counts() -> None:
    stream = feed()
    stream.take("main", [Event("1-0", "progress", data=40), Event("1-1", "log", data={})])

    assert stream.due(1.0) == ""
    assert stream.position == {"main": "1-1"}


def test_a_queue_scope_sees_only_its_queue() -> None:
    stream = feed(queue="mail")
    stream.take("main", [Event("1-0", "enqueued", queue="billing")])
    assert stream.due(1.0) == ""
    stream.take("main", [Event("1-1", "enqueued", queue="mail")])
    assert [m["event"] for m in messages(stream.due(2.0))] == ["jobs"]


def test_a_job_scope_sends_its_state_latest_progress_and_escaped_lines() -> None:
    stream = feed(job_id="j-1", can_view_payload=True)
    stream.take(
        "main",
        [
            Event("1-0", "active"),
            Event("1-1", "progress", data=10),
            Event("1-2", "log", data={"message": "<b>step</b> 1 & more"}),
            Event("1-3", "progress", data=42.5),
            Event("1-4", "log", data={"message": "line\r\ntwo"}),
            Event("1-5", "completed", job_id="j-2"),
        ],
    )

    sent = messages(stream.due(1.0))

    assert [m["event"] for m in sent] == ["state", "progress", "log"]
    assert json.loads(sent[0]["data"]) == {"type": "active"}
    assert 'value="42.5"' in sent[1]["data"] and 'value="10"' not in sent[1]["data"]
    assert "&lt;b&gt;step&lt;/b&gt; 1 &amp; more" in sent[2]["data"]
    assert "<b>" not in sent[2]["data"]
    # The CRLF inside a line is a data line break on the wire, not the end of the message.
    assert "line\ntwo" in sent[2]["data"]
    assert all(m["id"] == "main=1-5" for m in sent)


def test_log_lines_need_the_view_payload_permission() -> None:
    stream = feed(job_id="j-1", can_view_payload=False)
    stream.take("main", [Event("1-0", "log", data={"message": "secret"})])
    assert stream.due(1.0) == ""


def test_a_progress_object_is_compact_escaped_json_for_payload_viewers_only() -> None:
    value = {"done": 3, "of": "<10>"}
    shown = live.render_progress(value, can_view_payload=True)
    hidden = live.render_progress(value, can_view_payload=False)

    assert "{&quot;done&quot;:3,&quot;of&quot;:&quot;&lt;10&gt;&quot;}" in shown
    assert "done" not in hidden and "hidden" in hidden
    assert live.render_progress(None, True) == ""
    assert 'value="100"' in live.render_progress(250, True)  # clamped to the bar


def test_the_opening_says_retry_and_ready_then_heartbeats_carry_the_position() -> None:
    stream = feed(stores=("main", "side"))
    opening = stream.opening(0.0)
    assert opening.startswith("retry: 3000\n\n")
    assert messages(opening)[1]["event"] == "ready"

    stream.take("side", [Event("7-1", "log", data={})])
    assert stream.due(10.0) == ""
    beat = stream.due(15.0)
    assert beat == ": keep-alive\nid: main=0-0&side=7-1\n\n"
    assert stream.wait_s(15.0) == pytest.approx(15.0)


def test_the_wait_ends_at_the_lifetime() -> None:
    stream = feed()
    stream.last_write = 50.0  # a heartbeat is due at 65 s, after the end of life
    assert stream.wait_s(55.0) == pytest.approx(5.0)
    assert not stream.expired(59.9) and stream.expired(60.0)


def test_a_data_line_never_ends_a_message_early() -> None:
    assert live.message("log", "a\rb\nc\r\nd", "x") == (
        "event: log\nid: x\ndata: a\ndata: b\ndata: c\ndata: d\n\n"
    )


@pytest.mark.parametrize(
    ("text", "stores", "expected"),
    [
        ("1733472000000-5", ["main"], {"main": "1733472000000-5"}),
        ("1733472000000", ["main"], {"main": "1733472000000-0"}),
        ("main=1-0&side=2-3", ["main", "side"], {"main": "1-0", "side": "2-3"}),
        ("side=0", ["main", "side"], {"side": "0-0"}),
        ("we%20ird=5-5", ["we ird"], {"we ird": "5-5"}),
    ],
)
def test_positions_parse(text: str, stores: list[str], expected: dict[str, str]) -> None:
    assert live.parse_position(text, stores) == expected


@pytest.mark.parametrize(
    ("text", "stores"),
    [
        ("$", ["main"]),
        ("abc", ["main"]),
        ("1-2-3", ["main"]),
        ("-1", ["main"]),
        ("99999999999999999999-0", ["main"]),
        ("1-0", ["main", "side"]),
        ("other=1-0", ["main"]),
        ("main=1-0&&", ["main"]),
        ("main=x", ["main"]),
        ("x" * 5000, ["main"]),
    ],
)
def test_bad_positions_are_refused(text: str, stores: list[str]) -> None:
    with pytest.raises(live.BadPosition):
        live.parse_position(text, stores)


def test_positions_round_trip() -> None:
    position = {"side": "2-0", "a&b=c": "1-1"}
    assert live.parse_position(live.format_position(position), list(position)) == position


def test_slots_are_bounded_and_released_once() -> None:
    slots = live.Slots()
    first, second = slots.acquire(2), slots.acquire(2)
    assert first is not None and second is not None
    assert slots.acquire(2) is None

    first.release()
    first.release()

    assert slots.open == 1
    assert slots.acquire(2) is not None
    assert slots.open == 2


def test_a_full_house_probes_the_open_streams_and_waits_for_a_slot() -> None:
    import threading

    slots = live.Slots()
    held = slots.acquire(1)
    assert held is not None
    probes = slots.probe
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(slots.acquire(1, wait_s=5)))
    waiter.start()
    threading.Timer(0.2, held.release).start()
    waiter.join(5)
    assert got and got[0] is not None and slots.open == 1
    assert slots.probe == probes + 1
    # Nobody leaves: refused after the wait.
    assert slots.acquire(1, wait_s=0.1) is None


def test_an_open_stream_answers_a_probe_at_once() -> None:
    stream = feed()
    stream.opening(100.0)
    assert stream.due(100.5) == ""  # the heartbeat is not due yet
    live.SLOTS.probe += 1
    assert stream.due(100.6).startswith(": keep-alive")
    assert stream.due(100.7) == ""  # answered once
