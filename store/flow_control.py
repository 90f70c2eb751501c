"""Flow control: queue limits enforced by the store inside every claim.

A queue may have a concurrency limit (claimed jobs at once, all workers of all
processes together, counted by lock expiry) and a rate limit (claims per period,
a GCRA without burst tolerance: claims are spaced ``per_ms / limit`` apart, so no
window of ``per_ms`` holds more than ``limit`` claims).  The Lua side is
``store/lua/lib/limits.lua``; the settings live in one hash field per limited
queue, so a queue without limits costs a claim one HGET.  docs/flow-control.md
has the design, its guarantees and its costs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from store.codec import check_group
from store.errors import InvalidRequestError, redis_errors

if TYPE_CHECKING:
    from store.keys import StoreKeys

#: Upper bounds of the settings: far beyond any real use, and small enough that the
#: rate's integer arithmetic in Lua (doubles) stays exact.
MAX_CONCURRENCY = 1_000_000_000
MAX_RATE_LIMIT = 1_000_000_000
MAX_RATE_PERIOD_MS = 100 * 365 * 86_400_000

#: Active-set members one adopt call handles (set_queue_limits pages the active set).
ADOPT_PAGE = 500

#: Fields one HSCAN call of limited_queues asks for.
LIMITED_PAGE = 500


def _whole(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(f"{what} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise InvalidRequestError(f"{what} must be between {low} and {high}, got {value}")
    return value


@dataclass(frozen=True)
class Rate:
    """At most ``limit`` claims in any window of ``per_ms`` milliseconds."""

    limit: int
    per_ms: int

    def __post_init__(self) -> None:
        _whole(self.limit, "a rate's limit", 1, MAX_RATE_LIMIT)
        _whole(self.per_ms, "a rate's period (per_ms)", 1, MAX_RATE_PERIOD_MS)


@dataclass(frozen=True)
class QueueLimits:
    """A queue's limits (None: not limited in that way) and their live usage.

    ``active``: claims that hold a slot now (their lock has not expired; without a
    concurrency limit, the queue's active jobs);
    ``waiting``: jobs of the queue waiting to be claimed; ``throttled_until``: when
    the limits next admit a claim if they admit none now (epoch ms; for a full
    queue the earliest lock expiry, unless an ack frees a slot sooner), else None.
    ``groups``: job groups of the queue with waiting jobs; ``groups_held``: groups
    whose limits hold them back now (see ``busiest_groups`` for which).
    """

    concurrency: int | None = None
    rate: Rate | None = None
    group_concurrency: int | None = None
    group_rate: Rate | None = None
    active: int = 0
    throttled_until: int | None = None
    waiting: int = 0
    queue: str = ""
    groups: int = 0
    groups_held: int = 0

    @property
    def limited(self) -> bool:
        """Whether the queue has any limit (of the queue or of its groups)."""
        return any(
            v is not None
            for v in (self.concurrency, self.rate, self.group_concurrency, self.group_rate)
        )


def encode_limits(concurrency: Any, rate: Any, group_concurrency: Any, group_rate: Any) -> str:
    """The settings string of lib/limits.lua ('' = no limits), refusing invalid ones."""
    parts = ["", "", "", "", "", ""]
    if concurrency is not None:
        parts[0] = str(_whole(concurrency, "concurrency", 1, MAX_CONCURRENCY))
    if rate is not None:
        if not isinstance(rate, Rate):
            raise InvalidRequestError(f"rate must be a store.Rate, got {rate!r}")
        parts[1], parts[2] = str(rate.limit), str(rate.per_ms)
    if group_concurrency is not None:
        parts[3] = str(_whole(group_concurrency, "group_concurrency", 1, MAX_CONCURRENCY))
    if group_rate is not None:
        if not isinstance(group_rate, Rate):
            raise InvalidRequestError(f"group_rate must be a store.Rate, got {group_rate!r}")
        parts[4], parts[5] = str(group_rate.limit), str(group_rate.per_ms)
    if not any(parts):
        return ""
    if not any(parts[3:]):
        return ":".join(parts[:3])
    return ":".join(parts)


def decode_limits(
    settings: str | None,
) -> tuple[int | None, Rate | None, int | None, Rate | None]:
    """(concurrency, rate, group_concurrency, group_rate) of a settings string."""
    if not settings:
        return None, None, None, None
    f = (settings.split(":") + [""] * 6)[:6]
    return (
        int(f[0]) if f[0] else None,
        Rate(int(f[1]), int(f[2])) if f[1] and f[2] else None,
        int(f[3]) if f[3] else None,
        Rate(int(f[4]), int(f[5])) if f[4] and f[5] else None,
    )


def rate_free_at(tat: str | None, rate: Rate, now: int) -> int | None:
    """When a rate whose TAT is ``tat`` next admits a claim, if later than ``now`` (the
    TAT's whole ms, lua/lib/limits.lua LIMITS.tat; an older plain last-claim time counts
    one spacing on)."""
    if not tat:
        return None
    whole, sep, _rest = tat.partition(":")
    at = int(whole) if sep else int(tat) + rate.per_ms // rate.limit
    return at if at > now else None


def check_queue(queue: Any) -> str:
    if not isinstance(queue, str) or not queue:
        raise InvalidRequestError(f"a queue name must be a non-empty string, got {queue!r}")
    return queue


#: A rate's period unit -> its milliseconds (``format_rate`` picks the largest that fits).
RATE_UNITS: dict[str, int] = {"h": 3_600_000, "min": 60_000, "s": 1_000, "ms": 1}
_RATE_TEXT = re.compile(r"\s*(\d{1,10})\s*/\s*(\d{0,10})\s*(ms|s|min|h)\s*", re.ASCII)
#: What a rate's text looks like (the dashboard's and ``mqlimits``' help).
RATE_HELP = "N/PERIOD: 100/s, 10/min, 5/h, 20/250ms"


def parse_rate(text: str) -> Rate:
    """A rate from its text ("100/s", "10/min", "5/h", "20/250ms", "3/2s").

    Raises:
        InvalidRequestError: (a ValueError) the text is malformed or the rate invalid.
    """
    match = _RATE_TEXT.fullmatch(text)
    if match is None:
        raise InvalidRequestError(f"a rate looks like {RATE_HELP}")
    limit, count, unit = match.groups()
    return Rate(int(limit), int(count or 1) * RATE_UNITS[unit])


def format_rate(rate: Rate) -> str:
    """A rate's text per the largest unit its period is a whole number of (``parse_rate``'s inverse)."""
    for unit, ms in RATE_UNITS.items():
        if rate.per_ms % ms == 0:
            count = rate.per_ms // ms
            return f"{rate.limit}/{'' if count == 1 else count}{unit}"
    raise AssertionError("every period is a whole number of ms")  # pragma: no cover


class QueueLimitOperations:
    """Queue limits of ``RedisJobStore`` (mixed into the store class)."""

    # Provided by RedisJobStore.
    keys: StoreKeys
    client: Any
    _command: Callable[..., Any]
    _run: Callable[..., Any]
    now: Callable[[], int]

    def set_queue_limits(
        self,
        queue: str,
        *,
        concurrency: int | None = None,
        rate: Rate | None = None,
        group_concurrency: int | None = None,
        group_rate: Rate | None = None,
    ) -> None:
        """Replace ``queue``'s limits (None: no limit of that kind); the next claim obeys them.

        Jobs of the queue already active count against the concurrency limit at once.
        Invalid limits raise InvalidRequestError and nothing is written.
        """
        check_queue(queue)
        settings = encode_limits(concurrency, rate, group_concurrency, group_rate)
        self._run("set_limits", queue, settings)
        if settings:
            self._adopt_active(queue)

    def clear_queue_limits(self, queue: str) -> None:
        """Remove every limit of ``queue`` (and its usage bookkeeping)."""
        self._run("set_limits", check_queue(queue), "")

    def _adopt_active(self, queue: str) -> None:
        """Count the queue's jobs that were active before it became limited (paged)."""
        cursor = 0
        while True:
            cursor, page = self._command(
                "set_queue_limits", "zscan", self.keys.active, cursor, count=ADOPT_PAGE
            )
            ids = [member for member, _score in page]
            if ids:
                self._run("limits_adopt", queue, *ids)
            if not cursor:
                return

    def limited_queues(self) -> list[str]:
        """Names of the queues that have limits, sorted (the limits hash, read in pages)."""
        names: set[str] = set()
        cursor = 0
        while True:
            cursor, page = self._command(
                "limited_queues", "hscan", self.keys.limits, cursor, count=LIMITED_PAGE
            )
            # Fields NUL + queue mark queues with job groups, not limits.
            names.update(
                queue for queue, settings in page.items() if settings and queue[:1] != "\0"
            )
            if not cursor:
                return sorted(names)

    def queue_limits(self, queue: str) -> QueueLimits:
        """``queue``'s limits and live usage (all zeros / None when it has none)."""
        check_queue(queue)
        now = self.now()
        live = f"({now}"
        with redis_errors("queue_limits"):
            pipe = self.client.pipeline(transaction=False)
            pipe.hget(self.keys.limits, queue)
            pipe.zcount(self.keys.limit_active(queue), live, "+inf")
            pipe.zrangebyscore(
                self.keys.limit_active(queue), live, "+inf", start=0, num=1, withscores=True
            )
            pipe.hget(self.keys.limits_rate, queue)
            pipe.hget(self.keys.counts, f"{queue}|waiting")
            pipe.zcard(self.keys.group_sizes(queue))
            pipe.zcard(self.keys.group_held(queue))
            pipe.hget(self.keys.counts, f"{queue}|active")
            settings, active, first, last, waiting, groups, held, running = pipe.execute()
        concurrency, rate, group_concurrency, group_rate = decode_limits(settings)
        until: int | None = None
        if concurrency is not None and int(active) >= concurrency and first:
            until = int(first[0][1])
        if rate is not None:
            free_at = rate_free_at(last, rate, now)
            if free_at is not None:
                until = free_at if until is None else max(until, free_at)
        return QueueLimits(
            queue=queue,
            concurrency=concurrency,
            rate=rate,
            group_concurrency=group_concurrency,
            group_rate=group_rate,
            # Claims are counted by lock expiry under a concurrency limit; otherwise the
            # queue's active jobs are what runs.
            active=int(active) if concurrency is not None else int(running or 0) if settings else 0,
            waiting=int(waiting or 0),
            throttled_until=until,
            groups=int(groups),
            groups_held=int(held),
        )

    # -------------------------------------------------------- job groups

    def group_usage(self, queue: str, group: str) -> GroupUsage:
        """One group of ``queue``: its waiting jobs, its claims, and whether it is held back."""
        check_queue(queue)
        check_group(group)
        return self._group_usages(queue, [group], self.now())[0]

    def busiest_groups(self, queue: str, *, limit: int = 10) -> BusiestGroups:
        """The ``limit`` groups of ``queue`` with the most waiting jobs, their claims and
        whether their limits hold them back; ``total``: groups with waiting jobs.  Read
        from the queue's group-size index: O(log groups + limit) at any number of groups."""
        check_queue(queue)
        limit = _whole(limit, "limit", 1, LIMITED_PAGE)
        with redis_errors("busiest_groups"):
            pipe = self.client.pipeline(transaction=False)
            pipe.zrevrange(self.keys.group_sizes(queue), 0, limit - 1)
            pipe.zcard(self.keys.group_sizes(queue))
            names, total = pipe.execute()
        return BusiestGroups(
            queue=queue,
            groups=self._group_usages(queue, list(names), self.now()),
            total=int(total),
        )

    def _group_usages(self, queue: str, groups: list[str], now: int) -> list[GroupUsage]:
        if not groups:
            return []
        keys = self.keys
        live = f"({now}"
        with redis_errors("group_usage"):
            pipe = self.client.pipeline(transaction=False)
            pipe.hget(keys.limits, queue)
            for group in groups:
                pipe.zcard(keys.group_wait(queue, group))
                pipe.zcount(keys.group_active(queue, group), live, "+inf")
                pipe.zscore(keys.group_held(queue), group)
                pipe.hget(keys.group_tat(queue), group)
            replies = pipe.execute()
        _c, _r, group_concurrency, group_rate = decode_limits(replies[0])
        out = []
        for i, group in enumerate(groups):
            waiting, active, held, last = replies[1 + 4 * i : 5 + 4 * i]
            reason: str | None = None
            until: int | None = None
            if group_concurrency is not None and int(active) >= group_concurrency:
                reason = "group full"
                until = int(held) if held is not None else None
            elif group_rate is not None:
                free_at = rate_free_at(last, group_rate, now)
                if free_at is not None:
                    reason, until = "group rate", free_at
            out.append(
                GroupUsage(
                    group=group,
                    waiting=int(waiting),
                    active=int(active),
                    held_until=until if reason else None,
                    reason=reason,
                )
            )
        return out

    def wait_reason(self, job: Any) -> WaitReason | None:
        """Why a waiting job (a ``JobRecord``) is not being claimed now, when a pause or a
        limit holds it back (None: nothing does; a worker takes it when its turn comes)."""
        if getattr(job, "state", None) != "waiting" or not getattr(job, "queue", None):
            return None  # not waiting, or a row damaged behind the store's back (no queue)
        queue = job.queue
        if self._command("wait_reason", "sismember", self.keys.paused, queue):
            return WaitReason("paused", None, f"queue {queue!r} is paused")
        limits = self.queue_limits(queue)
        if limits.throttled_until is not None:
            if limits.concurrency is not None and limits.active >= limits.concurrency:
                text = f"queue full: {limits.active} of {limits.concurrency} running"
                return WaitReason("queue full", limits.throttled_until, text)
            return WaitReason("rate", limits.throttled_until, "queue rate limit: next claim later")
        if job.group is not None:
            # Read as stored: a group field edited by hand must not make this raise.
            usage = self._group_usages(queue, [str(job.group)], self.now())[0]
            if usage.reason == "group full":
                text = f"group full: {usage.active} of {limits.group_concurrency} running"
                return WaitReason("group full", usage.held_until, text)
            if usage.reason == "group rate":
                return WaitReason(
                    "group rate", usage.held_until, "group rate limit: next claim later"
                )
        return None


@dataclass(frozen=True)
class GroupUsage:
    """A job group of a queue: jobs waiting, claims holding one of its slots (while the
    queue limits group concurrency), and, when its limits hold it back, why
    (``"group full"`` / ``"group rate"``) and until when (epoch ms)."""

    group: str
    waiting: int = 0
    active: int = 0
    held_until: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class BusiestGroups:
    """``busiest_groups``: the queue's top groups (most waiting first) of ``total``."""

    queue: str
    groups: list[GroupUsage]
    total: int


@dataclass(frozen=True)
class WaitReason:
    """Why a waiting job waits: ``kind`` is "paused", "queue full", "rate", "group full"
    or "group rate"; ``until`` when the limit next admits a claim (None: unknown)."""

    kind: str
    until: int | None
    text: str
