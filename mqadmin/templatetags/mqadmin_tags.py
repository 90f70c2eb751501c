"""Template helpers of the dashboard: times, durations, state badges, JSON, links.

Everything that writes HTML escapes its input (``format_html`` / ``escape``): job
payloads, names and ids are user data and may hold markup.
"""

from __future__ import annotations

import contextlib
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from django import template
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from mqadmin import forms as mq_forms
from mqadmin.queries.explorer import JobQuery
from store import MISSING
from store.insights import error_group_id

register = template.Library()

#: JSON strings longer than this are cut in the highlighted view (the full text is one click away).
LONG_STRING = 240
#: Highlighted JSON longer than this many lines starts collapsed behind a summary.
LONG_JSON_LINES = 40


#: The epoch milliseconds a ``datetime`` can hold: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z.
FIRST_MS = -62_135_596_800_000
LAST_MS = 253_402_300_799_999
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _whole(value: Any) -> int | None:
    """``value`` as a whole number, or None when it is not one (NaN, inf, text)."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _datetime(ms: Any) -> datetime | None:
    """The UTC moment of epoch milliseconds ``ms``; None when no calendar date has it.

    Stored times are whatever Redis holds (a delay given in microseconds, a damaged
    hash): every helper here shows such a value as it is instead of failing the page.
    """
    value = _whole(ms)
    if value is None or not FIRST_MS <= value <= LAST_MS:
        return None
    return _EPOCH + timedelta(milliseconds=value)


def out_of_range(ms: Any) -> str:
    """How a stored time outside the calendar is shown: the raw value, said plainly."""
    value = _whole(ms)
    return f"{ms} (not a time)" if value is None else f"{value} ms (out of range)"


def _odd_time(ms: Any) -> SafeString:
    return format_html(
        '<span class="muted" title="A stored time that no calendar date has (epoch '
        'milliseconds as stored)">{}</span>',
        out_of_range(ms),
    )


def absolute(ms: Any) -> str:
    """``2026-12-02 17:33:05.120 UTC`` (the raw value for a time outside the calendar)."""
    if ms is None:
        return ""
    moment = _datetime(ms)
    if moment is None:
        return out_of_range(ms)
    return (
        f"{moment.year:04d}-"
        + moment.strftime("%m-%d %H:%M:%S.")
        + f"{moment.microsecond // 1000:03d} UTC"
    )


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def relative(ms: Any, now: Any = None) -> str:
    """``3 min ago`` / ``in 25 s`` (now: the wall clock, unless given)."""
    value = _whole(ms)
    if value is None:
        return out_of_range(ms)
    reference = _whole(now) if now is not None else None
    if reference is None:
        reference = int(time.time() * 1000)
    delta = value - reference
    words = duration_words(abs(delta), coarse=True)
    if abs(delta) < 1000:
        return "just now"
    return f"in {words}" if delta > 0 else f"{words} ago"


def duration_words(ms: Any, coarse: bool = False) -> str:
    """``340 ms``, ``2.1 s``, ``3 min 4 s``, ``2 h 5 min``, ``3 d 4 h``."""
    if ms is None:
        return ""
    whole = _whole(ms)
    if whole is None:
        return str(ms)
    ms = whole
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{int(seconds)} s" if coarse else f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min" if coarse or not secs else f"{minutes} min {secs} s"
    hours, mins = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h" if not mins else f"{hours} h {mins} min"
    days, hrs = divmod(hours, 24)
    return f"{days} d" if not hrs else f"{days} d {hrs} h"


@register.simple_tag
def reltime(ms: int | float | None, now: int | None = None) -> SafeString:
    """A relative time with the absolute UTC time as tooltip and machine-readable value."""
    if ms is None or ms == "":
        return mark_safe('<span class="muted">—</span>')
    moment = _datetime(ms)
    if moment is None:
        return _odd_time(ms)
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        _iso(moment),
        absolute(ms),
        relative(ms, now),
    )


@register.simple_tag
def bothtimes(ms: int | float | None, now: int | None = None) -> SafeString:
    """``3 min ago · 2026-12-03 13:40:05 UTC``: the relative and the absolute time side by side.

    The absolute part is a ``<time class="abs">`` that app.js can show in the browser's
    local time zone (the page's "show local time" toggle).
    """
    if ms is None or ms == "":
        return mark_safe('<span class="muted">—</span>')
    moment = _datetime(ms)
    if moment is None:
        return _odd_time(ms)
    return format_html(
        '{} <span class="muted">·</span> <time class="abs" datetime="{}" data-utc="{}">{}</time>',
        relative(ms, now),
        _iso(moment),
        absolute(ms),
        absolute(ms),
    )


@register.simple_tag
def abstime(ms: int | float | None, tz: str | None = None) -> SafeString:
    """An absolute time (in ``tz`` when given, with the UTC time as tooltip)."""
    if ms is None or ms == "":
        return mark_safe('<span class="muted">—</span>')
    moment = _datetime(ms)
    if moment is None:
        return _odd_time(ms)
    shown = f"{moment.year:04d}-" + moment.strftime("%m-%d %H:%M:%S UTC")
    if tz and tz != "UTC":
        from zoneinfo import ZoneInfo

        # The first and last days of the calendar have no local time east/west of UTC.
        with contextlib.suppress(OverflowError, ValueError):
            shown = moment.astimezone(ZoneInfo(tz)).strftime("%a %Y-%m-%d %H:%M %Z")
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        _iso(moment),
        absolute(ms),
        shown,
    )


@register.simple_tag
def logtime(ms: int | float | None) -> SafeString:
    """A log line's time to the millisecond (UTC; the full date in the tooltip)."""
    moment = _datetime(ms)
    if moment is None:
        return _odd_time(ms)
    return format_html(
        '<time class="log-at" datetime="{}" title="{}">{}</time>',
        _iso(moment),
        absolute(ms),
        f"{moment.strftime('%H:%M:%S')}.{moment.microsecond // 1000:03d}",
    )


@register.simple_tag
def countdown(until_ms: int | None, now: int | None = None) -> SafeString:
    """A live countdown to ``until_ms`` (``app.js`` ticks it; the text is right without JS)."""
    if until_ms is None:
        return mark_safe('<span class="muted">—</span>')
    moment = _datetime(until_ms)
    if moment is None:
        return _odd_time(until_ms)
    return format_html(
        '<time class="countdown" data-until="{}" datetime="{}" title="{}">{}</time>',
        int(until_ms),
        _iso(moment),
        absolute(until_ms),
        relative(until_ms, now),
    )


@register.filter
def epoch_ms(moment: datetime | None) -> int | None:
    """A datetime as epoch milliseconds (for ``reltime`` on database timestamps)."""
    return None if moment is None else int(moment.timestamp() * 1000)


@register.filter
def job_error(record: Any) -> dict[str, str] | None:
    """What a failed job failed with: type, message and its error group id (None otherwise)."""
    from mqadmin.queries.job import failure_of

    if getattr(record, "state", None) != "failed":
        return None
    failure = failure_of(getattr(record, "exit", None))
    if failure is not None:
        return {
            # The class name alone in lists; the module is in the link's title.
            "type": failure.type,
            "qualified_type": failure.qualified_type,
            "message": failure.message,
            "group": error_group_id(failure.type, failure.module, failure.message),
        }
    reason = getattr(record, "failed_reason", None)
    if reason:
        return {
            "type": "",
            "qualified_type": "",
            "message": reason,
            "group": error_group_id("(no exit)", "", reason),
        }
    return None


@register.filter
def thousands(value: Any) -> str:
    """``182,344``: a whole number with thousands separators (other values unchanged)."""
    if isinstance(value, bool):
        return str(value)
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return "" if value is None else str(value)


@register.filter
def duration(ms: int | float | None) -> str:
    return duration_words(ms)


@register.filter
def took(record: Any) -> str:
    """How long a finished job's last run took (finished - last claimed)."""
    finished = getattr(record, "finished_at", None)
    processed = getattr(record, "processed_at", None)
    finished, processed = _whole(finished), _whole(processed)
    if finished is None or processed is None:
        return ""
    return duration_words(max(0, finished - processed))


@register.filter
def keep_words(keep: Any) -> str:
    """A KeepPolicy in words: "completed: last 100, 7 d; failed: 30 d"."""
    parts: list[str] = []
    for state in ("completed", "failed", "cancelled"):
        policy = getattr(keep, state, None)
        if policy is None:
            continue
        rules = []
        if policy.count is not None:
            rules.append(f"last {policy.count}")
        if policy.age_ms:
            rules.append(f"{duration_words(policy.age_ms)}")
        parts.append(f"{state}: {', '.join(rules) or 'kept'}")
    return "; ".join(parts) or "store default"


@register.filter
def since(ms: int | float | None, now: int | None = None) -> str:
    """How long ago ``ms`` was, as a duration ("3 min")."""
    value = _whole(ms)
    if value is None:
        return "" if ms is None else out_of_range(ms)
    reference = _whole(now) if now is not None else None
    if reference is None:
        reference = int(time.time() * 1000)
    return duration_words(max(0, reference - value), coarse=True)


@register.filter
def get(mapping: Any, key: str) -> Any:
    """``counts|get:"waiting-children"`` (template variables cannot hold dashes)."""
    try:
        return mapping.get(key)
    except AttributeError:
        return None


@register.simple_tag
def state_badge(state: str) -> SafeString:
    return format_html('<span class="badge state-{}">{}</span>', state, state)


@register.simple_tag
def outcome_badge(outcome: str) -> SafeString:
    return format_html('<span class="badge outcome-{}">{}</span>', outcome, outcome)


@register.simple_tag
def explorer_qs(query: JobQuery, **overrides: Any) -> str:
    """The explorer's query string for ``query`` with some fields replaced."""
    return mq_forms.query_string(query, **overrides)


@register.filter
def is_missing(value: Any) -> bool:
    return value is MISSING


# ---------------------------------------------------------------------- JSON


def _highlight(value: Any, depth: int, state: dict[str, int]) -> str:
    pad = "  " * depth
    inner = "  " * (depth + 1)
    if isinstance(value, dict):
        if not value:
            return '<span class="j-punct">{}</span>'
        items = [
            f'{inner}<span class="j-key">{escape(json.dumps(str(k), ensure_ascii=False))}</span>'
            f'<span class="j-punct">:</span> {_highlight(v, depth + 1, state)}'
            for k, v in value.items()
        ]
        return (
            '<span class="j-punct">{</span>\n'
            + ",\n".join(items)
            + f'\n{pad}<span class="j-punct">}}</span>'
        )
    if isinstance(value, list | tuple):
        if not value:
            return '<span class="j-punct">[]</span>'
        items = [f"{inner}{_highlight(v, depth + 1, state)}" for v in value]
        return (
            '<span class="j-punct">[</span>\n'
            + ",\n".join(items)
            + f'\n{pad}<span class="j-punct">]</span>'
        )
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        if len(text) > LONG_STRING:
            state["cut"] += 1
            return (
                f'<span class="j-str">{escape(text[:LONG_STRING])}</span>'
                f'<span class="j-more">… +{len(text) - LONG_STRING:,} characters</span>'
            )
        return f'<span class="j-str">{escape(text)}</span>'
    if isinstance(value, bool) or value is None:
        return f'<span class="j-lit">{escape(json.dumps(value))}</span>'
    if isinstance(value, int | float):
        return f'<span class="j-num">{escape(json.dumps(value))}</span>'
    return f'<span class="j-str">{escape(json.dumps(str(value), ensure_ascii=False))}</span>'


@register.simple_tag
def json_block(value: Any, label: str = "JSON") -> SafeString:
    """Pretty-printed, highlighted, escaped JSON; long strings cut with the full text one click away."""

    if value is MISSING:
        return mark_safe('<p class="muted">absent</p>')
    full = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    state = {"cut": 0}
    highlighted = _highlight(value, 0, state)
    lines = highlighted.count("\n") + 1
    body = f'<pre class="json">{highlighted}</pre>'
    if lines > LONG_JSON_LINES:
        body = (
            f'<details class="json-long"><summary>{escape(label)}: {lines} lines — show</summary>'
            f"{body}</details>"
        )
    body = (
        f'<button type="button" class="copy copy-json" data-copy="{escape(full)}"'
        f' aria-label="Copy the {escape(label)} as JSON">copy</button>' + body
    )
    if state["cut"]:
        body += (
            f'<details class="json-full"><summary>Full {escape(label)} '
            f"({len(full):,} characters, nothing cut)</summary>"
            f'<pre class="json raw">{escape(full)}</pre></details>'
        )
    return mark_safe(body)  # every piece above was escaped


@register.simple_tag
def short_json(value: Any, limit: int = 80) -> str:
    """One line of JSON, cut at ``limit`` characters (autoescaped by the template)."""

    if value is MISSING:
        return ""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


#: Ids up to this length are shown whole; longer ones as head…tail (the full id in a title).
SHORT_ID_MAX = 20


@register.filter
def short_id(value: Any) -> str:
    """A long id cut to its head and tail (``01JD8ZK3QF…7Q9F2A``) for a label; show the full
    id beside it on request (a title, a "full id" toggle)."""
    text = str(value)
    if len(text) <= SHORT_ID_MAX:
        return text
    return f"{text[:10]}…{text[-6:]}"
