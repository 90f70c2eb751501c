"""Schedule cadences in plain words, and their next run times.

``describe_cron`` covers the shapes people actually write (every N minutes, hourly
at a minute, daily/weekly/monthly at a time, weekday ranges); anything else is
spelt out field by field, so an operator never has to decode a cron line.
"""

from __future__ import annotations

from typing import Any

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS

WEEKDAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_DAY_ALIASES = {name[:3].lower(): i for i, name in enumerate(WEEKDAYS)}
_MONTH_ALIASES = {name[:3].lower(): i + 1 for i, name in enumerate(MONTHS)}


def describe_every(every_ms: int) -> str:
    """``900000`` -> "every 15 minutes"."""
    for unit_ms, unit in (
        (DAY_MS, "day"),
        (HOUR_MS, "hour"),
        (MINUTE_MS, "minute"),
        (1000, "second"),
    ):
        if every_ms % unit_ms == 0:
            n = every_ms // unit_ms
            return f"every {unit}" if n == 1 else f"every {n} {unit}s"
    return f"every {every_ms} ms"


def describe_cron(expr: str) -> str:
    """A 5-field cron expression in words, e.g. "at 07:00, Monday to Friday"."""
    fields = expr.split()
    if len(fields) != 5:
        return f"cron “{expr}”"
    minute, hour, dom, month, dow = fields
    when = _time_part(minute, hour)
    days = _days_part(dom, month, dow)
    if not days:
        return f"every day {when}" if when.startswith("at ") else when
    return f"{when} {days}"


def _plain_number(field: str) -> bool:
    return field.isdigit()


def _time_part(minute: str, hour: str) -> str:
    if minute == "*" and hour == "*":
        return "every minute"
    if minute.startswith("*/") and minute[2:].isdigit() and hour == "*":
        return f"every {int(minute[2:])} minutes"
    if _plain_number(minute) and hour == "*":
        return f"every hour at minute {int(minute)}"
    if _plain_number(minute) and hour.startswith("*/") and hour[2:].isdigit():
        return f"every {int(hour[2:])} hours at minute {int(minute)}"
    if _plain_number(minute) and all(part.isdigit() for part in hour.split(",")):
        times = [f"{int(h):02d}:{int(minute):02d}" for h in hour.split(",")]
        return "at " + _join(times)
    if minute == "*" and _plain_number(hour):
        return f"every minute of the hour {int(hour):02d}:00–{int(hour):02d}:59"
    return f"at minute {_field_words(minute)} of hour {_field_words(hour)}"


def _days_part(dom: str, month: str, dow: str) -> str:
    parts: list[str] = []
    if dow != "*":
        parts.append("on " + _weekdays(dow))
    if dom != "*":
        parts.append(f"on day {_field_words(dom)} of the month")
    if month != "*":
        parts.append(f"in {_months(month)}")
    return ", ".join(parts)


def _weekdays(field: str) -> str:
    words: list[str] = []
    for part in field.split(","):
        if "-" in part and "/" not in part:
            start, end = part.split("-", 1)
            words.append(f"{_weekday(start)} to {_weekday(end)}")
        else:
            words.append(_weekday(part) if "/" not in part else f"weekdays {part}")
    return _join(words)


def _weekday(token: str) -> str:
    token = token.strip().lower()
    if token.isdigit():
        return WEEKDAYS[int(token) % 7]
    index = _DAY_ALIASES.get(token[:3])
    return WEEKDAYS[index] if index is not None else token


def _months(field: str) -> str:
    words: list[str] = []
    for part in field.split(","):
        if "-" in part and "/" not in part:
            start, end = part.split("-", 1)
            words.append(f"{_month(start)} to {_month(end)}")
        else:
            words.append(_month(part))
    return _join(words)


def _month(token: str) -> str:
    token = token.strip().lower()
    if token.isdigit() and 1 <= int(token) <= 12:
        return MONTHS[int(token) - 1]
    index = _MONTH_ALIASES.get(token[:3])
    return MONTHS[index - 1] if index is not None else token


def _field_words(field: str) -> str:
    if field.startswith("*/"):
        return f"every {field[2:]}"
    return field.replace(",", ", ").replace("-", "–")


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def describe_schedule(schedule: Any) -> str:
    """The cadence of a ``ScheduleRecord`` in words."""
    if schedule.every_ms:
        return describe_every(int(schedule.every_ms))
    if schedule.cron:
        return describe_cron(schedule.cron)
    return "no cadence"


def next_run_times(schedule: Any, now: int, count: int = 5) -> list[int]:
    """The next ``count`` times ``schedule`` fires, starting with its stored next run.

    The stored ``next_run_at`` comes first even when it is overdue (that occurrence
    is still owed: the next tick fires it as one catch-up run); the following ones
    are computed as the ticker would, with missed slots collapsed.
    """
    from store.schedules import next_occurrence

    times: list[int] = [int(schedule.next_run_at)]
    # Only the step after the stored slot collapses missed slots into "now"; later
    # steps follow one another.
    reference = now
    while len(times) < count:
        last = times[-1]
        following = next_occurrence(schedule, last, max(reference, last))
        if following is None or following <= last:
            break
        times.append(following)
        reference = following
    return times
