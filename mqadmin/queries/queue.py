"""The queue page (``views/queue.py``, ``queue.html``): one queue's counts, limits and job groups.

The busiest groups come from ``busiest_groups`` alone: the queue's group-size index
gives the :data:`BUSIEST_GROUPS` groups with the most waiting jobs and how many groups
have waiting jobs at all, at any number of groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mqadmin import actions
from mqadmin.queries.common import STATES
from mqadmin.queries.overview import limits_line
from mqadmin.services import StateCounts, open_store, reaching

#: Groups the queue page lists (the most waiting jobs first).
BUSIEST_GROUPS = 10

#: GroupUsage.reason -> why a held group waits, in words.
HELD_WHY = {
    "group full": "group full",
    "group rate": "group rate limit",
}


@dataclass(frozen=True)
class GroupRow:
    """One of the busiest groups: its jobs waiting and running, and what holds it back."""

    name: str
    waiting: int
    #: Claims holding one of its slots (counted only while the queue limits group concurrency).
    running: int
    #: Why its limits hold it back ("" when they do not).
    held: str
    #: Until when (epoch ms; None: not held, or until a running job of the group ends).
    held_until: int | None


@dataclass
class QueueView(StateCounts):
    store: str
    name: str
    counts: dict[str, int]
    paused: bool
    limits: Any
    #: The limits and their usage in words ("" when the queue has none).
    limits_text: str
    #: The "Set limits" form's values (the queue's current limits).
    limit_values: dict[str, Any]
    groups: list[GroupRow]
    #: Groups of the queue that have waiting jobs (``groups`` holds the busiest of them).
    groups_total: int
    now: int
    #: Group concurrency is set, so running jobs are counted per group.
    counts_running: bool = False

    @property
    def more_groups(self) -> int:
        """Groups with waiting jobs beyond the ones listed."""
        return max(0, self.groups_total - len(self.groups))


def queue_view(store_name: str, queue: str) -> QueueView:
    """What the queue page shows: counts, pause, limits and the busiest job groups."""
    job_store = open_store(store_name)
    with reaching(store_name):
        counts = job_store.counts(queue)
        paused = queue in job_store.paused_queues()
        limits = job_store.queue_limits(queue)
        busiest = job_store.busiest_groups(queue, limit=BUSIEST_GROUPS)
        now = job_store.now()
    rows = [
        GroupRow(
            name=usage.group,
            waiting=usage.waiting,
            running=usage.active,
            held=HELD_WHY.get(usage.reason or "", usage.reason or ""),
            held_until=usage.held_until,
        )
        for usage in busiest.groups
    ]
    return QueueView(
        store=store_name,
        name=queue,
        counts={state: int(counts.get(state, 0)) for state in STATES},
        paused=paused,
        limits=limits,
        limits_text=limits_line(limits, now),
        limit_values=actions.limits_initial(limits),
        groups=rows,
        groups_total=busiest.total,
        now=now,
        counts_running=limits.group_concurrency is not None,
    )
