"""Read models for monitoring tools: a scrape snapshot and per-job-name run metrics.

Both are bounded whatever the number of jobs:

* :func:`metrics_snapshot` reads O(1) counters and small registries in one
  pipeline (job counts, lifetime finished counts, worker presence, outbox
  depth, overdue schedules, index markers, known queue/name pairs), then the
  oldest waiting job of at most :data:`OLDEST_WAITING_QUEUES` queues.
* :func:`job_name_metrics` reads the per-name run aggregates the ack script
  writes (one small hash per job name and minute, and per name and clock
  hour; see ``lua/lib/claim_ack.lua``): at most 72 hashes per name, in
  pipelines of at most :data:`PIPELINE_BATCH` commands.  Percentiles come from
  the duration buckets of those hashes (bucket ``i`` holds runs of at most
  ``2 ** (i / 4)`` ms), so they are upper bounds within 19 % of the true value,
  never above the window's maximum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from store.errors import InvalidRequestError, JobStoreError
from store.indexes import INDEX_KINDS
from store.records import ALL_STATES

if TYPE_CHECKING:
    from store.redis_store import RedisJobStore

MINUTE_MS = 60_000
HOUR_MS = 3_600_000
#: At most this many queues get their oldest waiting job looked up per snapshot.
OLDEST_WAITING_QUEUES = 50
#: A worker whose presence is older than this is not live.
WORKER_LIVE_MS = 60_000
#: A schedule is overdue when its next run is this far in the past (2 x the 15 s sweep).
SCHEDULE_OVERDUE_MS = 30_000
#: At most this many commands per pipeline.
PIPELINE_BATCH = 500
#: At most this many job names on the metrics page.
MAX_JOB_NAMES = 200
TERMINAL_STATES = ("completed", "failed", "cancelled")

#: Period -> (slot length in ms, number of slots, "minute" or "hour" aggregates).
PERIODS: dict[str, tuple[int, int, str]] = {
    "1h": (MINUTE_MS, 60, "minute"),
    "24h": (HOUR_MS, 24, "hour"),
    "72h": (HOUR_MS, 72, "hour"),
}
#: Bucket i holds runs of at most 2 ** (i / BUCKETS_PER_DOUBLING) ms (mirrors the Lua).
BUCKETS_PER_DOUBLING = 4


@dataclass(frozen=True)
class StoreSnapshot:
    """What a Prometheus scrape reports about one store."""

    now: int
    #: queue -> state -> jobs now (from the O(1) counters).
    counts: dict[str, dict[str, int]]
    #: queue -> terminal state -> jobs that ever reached it.
    finished: dict[str, dict[str, int]]
    #: queue -> age in ms of its oldest waiting job (0 when none waits).
    oldest_waiting_ms: dict[str, int]
    live_workers: int
    outbox_entries: int
    schedules_overdue: int
    #: index kind -> whether it is enabled here and its ready marker is set.
    index_ready: dict[str, bool]


def metrics_snapshot(store: RedisJobStore) -> StoreSnapshot:
    """The store's monitoring figures (one pipeline plus the oldest-waiting lookups)."""
    keys = store.keys
    now = store.now()
    pipe = store.client.pipeline(transaction=False)
    pipe.hgetall(keys.counts)
    pipe.hgetall(keys.finished_total)
    pipe.zcard(keys.outbox)
    pipe.zcount(keys.schedules, "-inf", f"({now - SCHEDULE_OVERDUE_MS}")
    for kind in INDEX_KINDS:
        pipe.exists(keys.index_ready(kind))
    try:
        counts_raw, finished_raw, outbox, overdue, *markers = pipe.execute()
    except Exception as exc:
        raise JobStoreError(f"metrics snapshot failed: {exc}", exc) from exc

    counts: dict[str, dict[str, int]] = {}
    for name, value in counts_raw.items():
        queue, _, state = name.rpartition("|")
        if state in ALL_STATES:
            counts.setdefault(queue, dict.fromkeys(ALL_STATES, 0))[state] = int(value)
    finished: dict[str, dict[str, int]] = {}
    for name, value in finished_raw.items():
        queue, _, state = name.rpartition("|")
        if state in TERMINAL_STATES:
            finished.setdefault(queue, dict.fromkeys(TERMINAL_STATES, 0))[state] = int(value)
    # The store's own liveness rule (last seen within the window and before its expiry),
    # HSCAN-paged and bounded however many workers announced themselves.
    live = len(store.live_workers(max_age_ms=WORKER_LIVE_MS))

    oldest: dict[str, int] = dict.fromkeys(counts, 0)
    waiting = sorted(q for q, c in counts.items() if c.get("waiting", 0) > 0)
    for queue in waiting[:OLDEST_WAITING_QUEUES]:
        record = store.oldest_waiting(queue)
        if record is not None:
            oldest[queue] = max(0, now - int(record.run_at or record.enqueued_at))
    return StoreSnapshot(
        now=now,
        counts=counts,
        finished=finished,
        oldest_waiting_ms=oldest,
        live_workers=live,
        outbox_entries=int(outbox),
        schedules_overdue=int(overdue),
        index_ready={
            kind: bool(store.indexes[kind]) and bool(marker)
            for kind, marker in zip(INDEX_KINDS, markers, strict=True)
        },
    )


# ------------------------------------------------------------- per job name


@dataclass(frozen=True)
class RunSlot:
    """One minute or one hour of a job name's runs."""

    start: int
    runs: int
    failures: int


@dataclass
class JobNameMetrics:
    """A job name's runs over a period (from the ack-time aggregates)."""

    name: str
    runs: int = 0
    failures: int = 0
    max_ms: int = 0
    #: Bucket index -> runs (bucket i: at most 2 ** (i / 4) ms).
    buckets: dict[int, int] = field(default_factory=dict)
    series: list[RunSlot] = field(default_factory=list)

    @property
    def failure_rate(self) -> float:
        return self.failures / self.runs if self.runs else 0.0

    def percentile_ms(self, q: float) -> int:
        """An upper bound of the q-quantile run time (capped at the maximum); 0 without runs."""
        if not self.runs:
            return 0
        rank = max(1, math.ceil(q * self.runs))
        seen = 0
        for index in sorted(self.buckets):
            seen += self.buckets[index]
            if seen >= rank:
                return min(self.max_ms, bucket_upper_ms(index))
        return self.max_ms

    @property
    def p50_ms(self) -> int:
        return self.percentile_ms(0.50)

    @property
    def p95_ms(self) -> int:
        return self.percentile_ms(0.95)


def bucket_upper_ms(index: int) -> int:
    """The largest run time (ms) bucket ``index`` holds."""
    return math.floor(2 ** (index / BUCKETS_PER_DOUBLING))


def job_name_metrics(
    store: RedisJobStore, period: str = "1h", names: list[str] | None = None
) -> list[JobNameMetrics]:
    """Runs, failures and run times per job name over ``period`` ("1h", "24h" or "72h").

    "1h" is the last 60 minutes (minute aggregates, the current minute included);
    "24h" and "72h" are the last 24 / 72 clock hours, the current one included.
    Names default to every job name the store has seen (at most MAX_JOB_NAMES).
    """
    if period not in PERIODS:
        raise InvalidRequestError(f"period must be one of {', '.join(PERIODS)}, not {period!r}")
    slot_ms, slots, kind = PERIODS[period]
    if names is None:
        names = store.job_names()
    names = sorted(set(names))[:MAX_JOB_NAMES]
    current = store.now() // slot_ms
    indexes = list(range(current - slots + 1, current + 1))
    key_of = store.keys.job_metrics_minute if kind == "minute" else store.keys.job_metrics_hour
    wanted = [(name, index) for name in names for index in indexes]
    replies: list[dict[str, str]] = []
    for start in range(0, len(wanted), PIPELINE_BATCH):
        pipe = store.client.pipeline(transaction=False)
        for name, index in wanted[start : start + PIPELINE_BATCH]:
            pipe.hgetall(key_of(index, name))
        try:
            replies.extend(pipe.execute())
        except Exception as exc:
            raise JobStoreError(f"job metrics failed: {exc}", exc) from exc
    out = {name: JobNameMetrics(name) for name in names}
    for (name, index), fields in zip(wanted, replies, strict=True):
        entry = out[name]
        runs = 0
        for field_name, value in fields.items():
            if field_name.startswith("b"):
                bucket, count = int(field_name[1:]), int(value)
                entry.buckets[bucket] = entry.buckets.get(bucket, 0) + count
                runs += count
        failures = int(fields.get("f", 0))
        entry.series.append(RunSlot(index * slot_ms, runs, failures))
        entry.runs += runs
        entry.failures += failures
        entry.max_ms = max(entry.max_ms, int(fields.get("x", 0)))
    return [out[name] for name in names]
