"""The overview page (``views/overview.py``, ``home.html``): every store × queue × state.

Per store: per-state totals and per-queue counts from the O(1) counters, paused
queues, the oldest runnable job of the busiest queues, live workers per queue, the
eviction guard's warning and the throughput chart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mqadmin import actions, services
from mqadmin.charts import ThroughputChart, throughput_chart
from mqadmin.queries.common import LIVE_WORKER_MS, STATES

#: Queues per store whose oldest waiting job the overview looks up.
OLDEST_WAITING_QUEUES = 50

#: Limited queues per store whose limits and usage the overview reads (one pipelined read each).
LIMITS_QUEUES = 100

#: Minutes of throughput the overview draws.
THROUGHPUT_MINUTES = 180


@dataclass
class QueueRow(services.StateCounts):
    name: str
    counts: dict[str, int]
    paused: bool
    oldest_waiting: Any | None = None
    #: False when the oldest-runnable search hit a bound (more priority levels or names).
    oldest_complete: bool = True
    #: The oldest runnable job was looked up (it may still be None: see home.html).
    oldest_looked_up: bool = False
    #: Delayed jobs whose run time has come (None: not looked up).
    due: int | None = None
    #: Live workers (announced within LIVE_WORKER_MS) that consume this queue.
    workers: int = 0
    #: The queue's limits and their usage in words ("" when it has none or was not read).
    limits: str = ""
    #: The "Set limits" form's values: the queue's current limits (blank: none of that kind).
    limit_values: dict[str, Any] = field(default_factory=dict)
    #: The queue has limits the overview did not read (beyond LIMITS_QUEUES): its form
    #: is not offered here, where it would show blanks for limits the queue has.
    limits_unread: bool = False


@dataclass
class StoreBoard:
    """One store on the overview: totals, queues, paused queues, throughput."""

    overview: services.StoreOverview
    queues: list[QueueRow] = field(default_factory=list)
    paused: list[str] = field(default_factory=list)
    chart: ThroughputChart | None = None
    #: Queues with waiting jobs beyond OLDEST_WAITING_QUEUES (their age is not looked up).
    oldest_skipped: int = 0
    #: Flow results waiting in the store's outbox to be relayed (the "Store internals"
    #: menu's Outbox page; shown on the overview only when there are some).
    outbox: int = 0
    #: The eviction guard's warning for the store's Redis ("" when its policy is noeviction).
    eviction: str = ""

    @property
    def name(self) -> str:
        return self.overview.name


def eviction_warning(job_store: Any) -> str:
    """The eviction guard's message for a store's Redis, as read when the store started."""
    status = getattr(job_store, "eviction", None)
    return str(status.message) if status is not None else ""


def limits_line(limits: Any, now_ms: int) -> str:
    """ "3 of 3 running · rate 100/s · max 1 running per group · group rate 10/min ·
    47 waiting · throttled for 12 ms" ("" when unlimited)."""
    if not limits.limited:
        return ""
    parts = []
    if limits.concurrency is not None:
        parts.append(f"{limits.active} of {limits.concurrency} running")
    if limits.rate is not None:
        parts.append(f"rate {actions.format_rate(limits.rate)}")
    if limits.group_concurrency is not None:
        parts.append(f"max {limits.group_concurrency} running per group")
    if limits.group_rate is not None:
        parts.append(f"group rate {actions.format_rate(limits.group_rate)}")
    parts.append(f"{limits.waiting} waiting")
    if limits.throttled_until is not None and limits.throttled_until > now_ms:
        wait = limits.throttled_until - now_ms
        parts.append(
            f"throttled for {wait} ms" if wait < 10_000 else f"throttled for {wait // 1000} s"
        )
    return " · ".join(parts)


def overview(with_chart: bool = True) -> list[StoreBoard]:
    """Every configured store; a store that cannot be reached is reported, not raised."""
    from store.errors import UNAVAILABLE_ERRORS, StoreFailure

    def read(store: services.ConfiguredStore, job_store: Any) -> StoreBoard:
        client, _ = services.get_client(store.url)
        version = services.server_version(client)
        by_queue = job_store.counts_by_queue()
        paused = job_store.paused_queues()
        chart = (
            throughput_chart(job_store.throughput(minutes=THROUGHPUT_MINUTES))
            if with_chart
            else None
        )
        totals = dict.fromkeys(STATES, 0)
        for counts in by_queue.values():
            for state, count in counts.items():
                totals[state] = totals.get(state, 0) + int(count)
        # A paused queue that never held a job still gets a row (to resume it).
        rows = [
            QueueRow(queue, by_queue.get(queue) or dict.fromkeys(STATES, 0), queue in paused)
            for queue in sorted(set(by_queue) | set(paused))
        ]
        served: dict[str, int] = {}
        for worker in job_store.live_workers(max_age_ms=LIVE_WORKER_MS):
            for queue in worker.queues:
                served[queue] = served.get(queue, 0) + 1
        for row in rows:
            row.workers = served.get(row.name, 0)
        waiting_rows = [row for row in rows if row.counts.get("waiting")]
        for row in waiting_rows[:OLDEST_WAITING_QUEUES]:
            oldest = job_store.oldest_runnable(row.name)
            row.oldest_waiting = oldest.record
            row.oldest_complete = oldest.complete
            row.oldest_looked_up = True
        # "Delayed" counts jobs not yet promoted; say how many of them are already due.
        for row in [row for row in rows if row.counts.get("delayed")][:OLDEST_WAITING_QUEUES]:
            row.due = job_store.due_count(row.name)
        # Only the limited queues (one paged read of the limits) cost a read of their own.
        limited = set(job_store.limited_queues()) if rows else set()
        limited_rows = [row for row in rows if row.name in limited]
        if limited_rows:
            now_ms = job_store.now()
            for row in limited_rows[:LIMITS_QUEUES]:
                limits = job_store.queue_limits(row.name)
                row.limits = limits_line(limits, now_ms)
                row.limit_values = actions.limits_initial(limits)
            for row in limited_rows[LIMITS_QUEUES:]:
                row.limits_unread = True
        return StoreBoard(
            overview=services.StoreOverview(
                name=store.name,
                prefix=store.prefix,
                redis=store.redis,
                server_version=version,
                counts=totals,
            ),
            queues=rows,
            paused=paused,
            chart=chart,
            oldest_skipped=max(0, len(waiting_rows) - OLDEST_WAITING_QUEUES),
            eviction=eviction_warning(job_store),
            outbox=job_store.outbox_depth(),
        )

    return services.for_each_store(
        read, _failed_board, errors=(StoreFailure, OSError, *UNAVAILABLE_ERRORS)
    )


def throughput_boards() -> list[StoreBoard]:
    """Only the throughput chart of each store (the chart's own refresh)."""

    def read(store: services.ConfiguredStore, job_store: Any) -> StoreBoard:
        board = StoreBoard(
            services.StoreOverview(name=store.name, prefix=store.prefix, redis=store.redis)
        )
        board.chart = throughput_chart(job_store.throughput(minutes=THROUGHPUT_MINUTES))
        return board

    return services.for_each_store(read, _failed_board)


def _failed_board(store: services.ConfiguredStore, error: str) -> StoreBoard:
    return StoreBoard(
        services.StoreOverview(name=store.name, prefix=store.prefix, redis=store.redis, error=error)
    )
