"""Repeatable schedules: the store operations and the cadence arithmetic.

A schedule fires a job per occurrence.  ``tick_schedule`` claims one
occurrence atomically (compare-and-set on ``next_run_at``), so any number of
tickers fire each slot exactly once; missed slots collapse into one catch-up
run.  Cron expressions are 5-field, evaluated in an IANA time zone (UTC by
default) with croniter; ``every_ms`` schedules stay on their original grid.

DST: in the repeated hour of a fall-back night, an expression with a fixed
hour (e.g. ``30 2 * * *``) fires once, like cron does; expressions with a
wildcard or stepped hour fire in both hours, which are distinct real times.
A skipped spring-forward time fires at the first instant after the gap.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from store import codec
from store.errors import InvalidRequestError, JobNotFoundError, JobStoreError
from store.records import MAX_RUN_AT_MS, EnqueueRequest, EnqueueResult, ScheduleRecord

if TYPE_CHECKING:
    from store.keys import StoreKeys

#: Schedules fetched per call when listing or collecting due ones.
SCHEDULE_PAGE = 500
#: Newest jobs of a schedule's job name looked at for its last runs.
SCHEDULE_RUN_SCAN = 2000


# ---------------------------------------------------------------- cadence math


def zone(tz: str | None) -> ZoneInfo:
    try:
        return ZoneInfo(tz or "UTC")
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidRequestError(
            f"unknown time zone {tz!r} (use an IANA name such as 'Europe/Berlin')"
        ) from exc


def validate_cron(expr: str) -> None:
    if not isinstance(expr, str) or len(expr.split()) != 5:
        raise InvalidRequestError(
            f"invalid cron expression {expr!r}: expected 5 fields (minute hour day month weekday)"
        )
    if not croniter.is_valid(expr):
        raise InvalidRequestError(f"invalid cron expression {expr!r}")


def validate_cadence(cron: str | None, tz: str | None, every_ms: int | None) -> None:
    if (cron is None) == (every_ms is None):
        raise InvalidRequestError("a schedule needs exactly one of cron or every_ms")
    if cron is not None:
        validate_cron(cron)
        zone(tz)
        if next_cron(cron, tz, 0) is None and next_cron(cron, tz, 4_102_444_800_000) is None:
            raise InvalidRequestError(f"cron expression {cron!r} never matches")
    else:
        if tz is not None:
            zone(tz)
        if isinstance(every_ms, bool) or not isinstance(every_ms, int) or every_ms <= 0:
            raise InvalidRequestError(f"every_ms must be a positive integer, got {every_ms!r}")


def _ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def _is_repeat(dt: datetime, tz: ZoneInfo) -> bool:
    """True when ``dt`` is the second occurrence of a wall time repeated by a fall-back."""
    naive = dt.replace(tzinfo=None)
    first = naive.replace(tzinfo=tz, fold=0)
    second = naive.replace(tzinfo=tz, fold=1)
    return first.utcoffset() != second.utcoffset() and _ms(dt) == _ms(second)


def next_cron(expr: str, tz: str | None, after_ms: int) -> int | None:
    """The first instant strictly after ``after_ms`` that matches ``expr`` in ``tz``.

    None when there is none up to MAX_RUN_AT_MS (an expression that never matches,
    such as ``0 0 30 2 *``, or the end of the calendar).  croniter reports "no match"
    with ``CroniterBadDateError`` (a ``CroniterError``, itself a ``ValueError``) on
    6.x and 7.x alike; 7.0 dropped the alias on the ``croniter`` class.
    """
    zi = zone(tz)
    fixed_hour = not any(c in expr.split()[1] for c in "*/")
    try:
        start = datetime.fromtimestamp(after_ms / 1000, UTC).astimezone(zi)
        it = croniter(expr, start)
        for _ in range(4):
            candidate: datetime = it.get_next(datetime)
            if _ms(candidate) <= after_ms:
                continue
            if fixed_hour and _is_repeat(candidate, zi):
                continue
            found = _ms(candidate)
            return found if found <= MAX_RUN_AT_MS else None
    except (CroniterError, ValueError, KeyError, OverflowError, OSError):
        return None
    return None


def first_run_at(cron: str | None, tz: str | None, every_ms: int | None, now: int) -> int | None:
    """When a new schedule first fires: the next cron match after now, or now + every."""
    if every_ms is not None:
        return now + every_ms
    assert cron is not None
    return next_cron(cron, tz, now)


def next_occurrence(schedule: ScheduleRecord, slot: int, now: int) -> int | None:
    """The occurrence after ``slot`` given the time ``now`` (missed slots collapse)."""
    if schedule.every_ms:
        every = schedule.every_ms
        upcoming = slot + ((max(0, now - slot) // every) + 1) * every
        return upcoming if upcoming <= MAX_RUN_AT_MS else None
    if schedule.cron:
        return next_cron(schedule.cron, schedule.tz, max(slot, now))
    return None


def tick_request(schedule: ScheduleRecord, slot: int) -> EnqueueRequest:
    """The job an occurrence fires: id ``sched/<key>/<slot>``, metadata.scheduledFor = the slot."""
    scheduled_for = datetime.fromtimestamp(slot / 1000, UTC).isoformat(timespec="milliseconds")
    return EnqueueRequest(
        id=f"sched/{schedule.key}/{slot}",
        name=schedule.job_name,
        queue=schedule.queue,
        payload=schedule.payload,
        metadata={**schedule.metadata, "scheduledFor": scheduled_for.replace("+00:00", "Z")},
        priority=schedule.priority,
        attempts_max=schedule.attempts_max,
        backoff=schedule.backoff,
        keep=schedule.keep,
        timeout_ms=schedule.timeout_ms,
    )


# ---------------------------------------------------------------- encoding


def encode_schedule(record: ScheduleRecord, now: int | None = None) -> list[str]:
    """Field/value pairs of a schedule hash (absent fields are not sent).

    ``now`` (default: the wall clock) bounds the backoff (see ``codec.check_backoff``).
    """
    if not isinstance(record, ScheduleRecord):
        raise InvalidRequestError(f"expected a ScheduleRecord, got {type(record).__name__}")
    if not isinstance(record.key, str) or not record.key or "\0" in record.key:
        raise InvalidRequestError(
            f"schedule key must be a non-empty string without NUL, got {record.key!r}"
        )
    validate_cadence(record.cron, record.tz, record.every_ms)
    # The job part reuses the enqueue validation (name, queue, numbers, policies).
    job = codec.encode_request(
        EnqueueRequest(
            name=record.job_name,
            queue=record.queue,
            payload=record.payload,
            metadata=record.metadata,
            priority=record.priority,
            attempts_max=record.attempts_max,
            backoff=record.backoff,
            keep=record.keep,
            timeout_ms=record.timeout_ms,
        ),
        "user",
        "",
        now,
    )
    fields: dict[str, str] = {
        "job_name": job[2],
        "queue": job[3],
        "payload": job[4],
        "metadata": job[5],
        "priority": job[6],
        "attempts_max": job[7],
        "backoff": job[8],
        "keep": job[9],
        "timeout_ms": job[10],
        "cron": record.cron or "",
        "tz": record.tz or "",
        "every_ms": str(record.every_ms) if record.every_ms is not None else "",
        "group": record.group or "",
    }
    out: list[str] = []
    for field, value in fields.items():
        if value != "":
            out.extend((field, value))
    return out


def decode_schedule(h: Mapping[str, str]) -> ScheduleRecord:
    backoff = h.get("backoff")
    keep = h.get("keep")
    return ScheduleRecord(
        key=h["key"],
        job_name=h["job_name"],
        queue=h.get("queue") or "default",
        cron=h.get("cron") or None,
        tz=h.get("tz") or None,
        every_ms=int(h["every_ms"]) if h.get("every_ms") else None,
        payload=codec.loads(h["payload"]) if "payload" in h else None,
        metadata=codec.loads(h["metadata"]) if h.get("metadata") else {},
        priority=codec._number(h.get("priority") or "0"),
        attempts_max=int(h.get("attempts_max") or 1),
        backoff=codec.loads(backoff) if backoff else None,
        keep=codec.loads(keep) if keep else None,
        timeout_ms=int(h["timeout_ms"]) if h.get("timeout_ms") else None,
        group=h.get("group") or None,
        next_run_at=int(float(h["next_run_at"])),
    )


# ---------------------------------------------------------------- store operations


class ScheduleOperations:
    """Schedule operations of ``RedisJobStore`` (mixed into the store class)."""

    # Provided by RedisJobStore.
    keys: StoreKeys
    client: Any
    _idx: str
    _run: Callable[..., Any]
    _command: Callable[..., Any]
    now: Callable[[], int]
    _signal_wake: Callable[[str], None]
    enqueue: Callable[[EnqueueRequest], EnqueueResult]
    indexes: Mapping[str, bool]
    get_jobs: Callable[[list[str]], list[Any]]

    def upsert_schedule(self, record: ScheduleRecord) -> ScheduleRecord:
        """Create or replace a schedule; an unchanged cadence keeps the stored next_run_at.

        An invalid cron expression, time zone or interval is refused before
        anything is written.  Returns the record as stored.
        """
        now = self.now()
        pairs = encode_schedule(record, now)
        if record.every_ms is not None:
            codec.check_delay(record.every_ms, "every_ms", now)
        next_run_at = int(record.next_run_at)
        codec.check_run_at(next_run_at, f"next_run_at {next_run_at}")
        stored = self._run("upsert_schedule", record.key, str(next_run_at), *pairs)
        self._signal_wake(record.queue)
        return decode_schedule(
            {
                **dict(zip(pairs[::2], pairs[1::2], strict=True)),
                "key": record.key,
                "next_run_at": stored,
            }
        )

    def trigger_schedule(self, key: str) -> str:
        """Enqueue one occurrence of a schedule now (its cadence is untouched); returns the job id."""
        schedule = self.get_schedule(key)
        if schedule is None:
            raise JobNotFoundError(key)
        now = self.now()
        request = dataclasses.replace(tick_request(schedule, now), id=f"sched/{key}/manual/{now}")
        result: EnqueueResult = self.enqueue(request)
        return result.id

    def remove_schedule(self, key: str) -> bool:
        removed = bool(self._run("remove_schedule", key))
        self._command("remove_schedule", "srem", self.keys.schedules_paused, key)
        return removed

    # -------------------------------------------------------- pausing

    def pause_schedule(self, key: str) -> bool:
        """Stop firing a schedule until it is resumed (False: no such schedule).

        A paused schedule stays listed with its cadence; tickers skip it.  A ticker
        that read it as due just before the pause may still fire that one slot.
        """
        if self.get_schedule(key) is None:
            return False
        self._command("pause_schedule", "sadd", self.keys.schedules_paused, key)
        return True

    def resume_schedule(self, key: str) -> bool:
        """Fire a paused schedule again, from its next occurrence after now (False: not paused).

        Slots missed while paused are not caught up: next_run_at moves past now.
        """
        if not self._command("resume_schedule", "srem", self.keys.schedules_paused, key):
            return False
        schedule = self.get_schedule(key)
        now = self.now()
        if schedule is not None and schedule.next_run_at <= now:
            upcoming = next_occurrence(schedule, schedule.next_run_at, now)
            if upcoming is not None:
                self.advance_schedule(key, schedule.next_run_at, upcoming)
        return True

    def paused_schedules(self) -> set[str]:
        """Keys of the paused schedules (read in SSCAN pages)."""
        keys: set[str] = set()
        cursor = 0
        while True:
            cursor, chunk = self._command(
                "paused_schedules", "sscan", self.keys.schedules_paused, cursor, count=500
            )
            keys.update(chunk)
            if int(cursor) == 0:
                return keys

    def schedule_last_runs(self, schedule: ScheduleRecord, limit: int = 3) -> list[Any]:
        """The latest jobs a schedule fired (its ``sched/<key>/...`` jobs), newest first.

        One list call on the job name's index (the all-jobs index when it is disabled), its
        ids matched by prefix in the script: at most SCHEDULE_RUN_SCAN of the newest jobs
        are looked at, and only the schedule's own rows are read.
        """
        name = schedule.job_name if self.indexes.get("name", True) else None
        store: Any = self  # the RedisJobStore this mixin is part of (its list query)
        page = store.list(
            name=name,
            id_prefix=f"sched/{schedule.key}/",
            limit=limit,
            scan_budget=SCHEDULE_RUN_SCAN,
        )
        return list(page.items)

    def get_schedule(self, key: str) -> ScheduleRecord | None:
        h = self._command("get_schedule", "hgetall", self.keys.schedule(key))
        return decode_schedule(h) if h else None

    def _schedules_by_rank(self, max_score: str) -> list[ScheduleRecord]:
        out: list[ScheduleRecord] = []
        offset = 0
        while True:
            keys = self._command(
                "schedules",
                "zrangebyscore",
                self.keys.schedules,
                "-inf",
                max_score,
                offset,
                SCHEDULE_PAGE,
            )
            if keys:
                pipe = self.client.pipeline(transaction=False)
                for key in keys:
                    pipe.hgetall(self.keys.schedule(key))
                try:
                    rows = pipe.execute()
                except Exception as exc:
                    raise JobStoreError(f"schedules failed: {exc}", exc) from exc
                out.extend(decode_schedule(h) for h in rows if h)
            if len(keys) < SCHEDULE_PAGE:
                return out
            offset += len(keys)

    def list_schedules(
        self, job_name: str | None = None, queue: str | None = None, group: str | None = None
    ) -> list[ScheduleRecord]:
        """All schedules (ordered by next_run_at), filtered by job name, queue and group."""
        return [
            s
            for s in self._schedules_by_rank("+inf")
            if (job_name is None or s.job_name == job_name)
            and (queue is None or s.queue == queue)
            and (group is None or s.group == group)
        ]

    def due_schedules(self) -> list[ScheduleRecord]:
        """Schedules with next_run_at <= now, earliest first (paused ones are not due)."""
        now = self.now()
        paused = self.paused_schedules()
        # Rows are read after the index: one advanced in between is no longer due.
        return [
            s
            for s in self._schedules_by_rank(str(now))
            if s.next_run_at <= now and s.key not in paused
        ]

    def advance_schedule(self, key: str, expected_run_at: int, next_run_at: int) -> None:
        """Compare-and-set next_run_at; a stale expectation is a silent no-op."""
        self._run("advance_schedule", key, str(int(expected_run_at)), str(int(next_run_at)))

    def tick_schedule(
        self, key: str, expected_run_at: int, next_run_at: int, request: EnqueueRequest
    ) -> bool:
        """Fire one occurrence: iff next_run_at == expected, advance it and insert ``request``."""
        if request.id is None:
            raise JobStoreError("tick_schedule needs request.id (the slot's deterministic job id)")
        args = codec.encode_wire(request, "user", request.id)
        fired = self._run(
            "tick_schedule",
            self.now(),
            self._idx,
            key,
            str(int(expected_run_at)),
            str(int(next_run_at)),
            *args,
        )
        if fired:
            self._signal_wake(request.queue)
        return bool(fired)
