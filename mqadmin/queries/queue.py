"""The queue page (``views/queue.py``, ``queue.html``, ``queue_sweep.html``): one queue's
counts, limits and job groups, and its drain and clean.

The busiest groups come from ``busiest_groups`` alone: the queue's group-size index
gives the :data:`BUSIEST_GROUPS` groups with the most waiting jobs and how many groups
have waiting jobs at all, at any number of groups.

A drain removes the queue's waiting (and delayed) jobs, a clean its finished ones
(optionally only those finished before a cut-off).  Both are bulk "remove" runs over a
:class:`JobQuery` of the queue and those states (``queries/bulk.py``): previewed first,
read in keyset pages of at most ``BULK_CHUNK`` ids, at most ``BULK_MAX_ITEMS`` per
request with "continue".  Active jobs and flow parents waiting for children are never
listed, and the store's remove refuses one that became so meanwhile (reported as skipped).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mqadmin import actions
from mqadmin.queries import bulk
from mqadmin.queries.common import STATES
from mqadmin.queries.explorer import JobQuery, auto_order
from mqadmin.queries.overview import limits_line
from mqadmin.services import StateCounts, open_store, reaching

#: Groups the queue page lists (the most waiting jobs first).
BUSIEST_GROUPS = 10

#: The states each sweep removes, in the order its form lists them.
SWEEP_STATES: dict[str, tuple[str, ...]] = {
    "drain": ("waiting", "delayed"),
    "clean": ("completed", "failed", "cancelled"),
}
#: The permission (an operation of ``mqadmin.actions``) each sweep needs.
SWEEP_PERMISSIONS = {"drain": actions.DRAIN, "clean": actions.CLEAN}
#: States no sweep removes: the store refuses to remove them.
NEVER_REMOVED = ("active", "waiting-children")

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


# ---------------------------------------------------------------------- drain and clean


@dataclass(frozen=True)
class Sweep:
    """One drain or clean of a queue: what it removes."""

    store: str
    queue: str
    #: "drain" or "clean".
    kind: str
    states: tuple[str, ...]
    #: A clean removes only jobs finished before this (epoch ms); None: any age.
    finished_before: int | None = None

    @property
    def query(self) -> JobQuery:
        """The queue's jobs in the sweep's states, oldest first (in the states' own order
        when they share one: finished time for a clean, so a cut-off ends the run)."""
        return JobQuery(
            store=self.store,
            queue=self.queue,
            states=self.states,
            order_by=auto_order(self.states),
            order="asc",
            order_auto=True,
            limit=bulk.PREVIEW_SAMPLE,
        )

    def stop_at(self, record: Any) -> bool:
        """The first job too young for a clean's cut-off (jobs come oldest first)."""
        cutoff = self.finished_before
        return cutoff is not None and int(record.finished_at or 0) >= cutoff

    @property
    def stopper(self) -> bulk.StopAt | None:
        return self.stop_at if self.finished_before is not None else None

    def describe(self) -> str:
        """The sweep in words (audit targets)."""
        words = f"{self.kind} queue {self.queue}: {', '.join(self.states)}"
        if self.finished_before is not None:
            words += f" finished before {self.finished_before}"
        return words


@dataclass
class SweepPreview:
    sweep: Sweep
    preview: bulk.BulkPreview
    #: Jobs of the queue the sweep leaves alone: state -> count (only states with jobs).
    kept: dict[str, int]


def sweep_preview(sweep: Sweep) -> SweepPreview:
    """How many jobs the sweep removes (exact from counters without a cut-off, else
    counted up to the bulk preview's cap), per state, a sample, and what stays."""
    preview = bulk.bulk_preview(sweep.query, sweep.stopper)
    job_store = open_store(sweep.store)
    with reaching(sweep.store):
        counts = job_store.counts(sweep.queue)
    kept = {state: int(counts.get(state, 0)) for state in NEVER_REMOVED if counts.get(state)}
    return SweepPreview(sweep, preview, kept)


def sweep_run(sweep: Sweep, resume: str | None) -> bulk.BulkRun:
    """Remove the sweep's jobs from ``resume`` on, in bounded chunks (``bulk_filter``)."""
    return bulk.bulk_filter(sweep.query, "remove", resume, sweep.stopper)


def sweep_states(kind: str, chosen: Iterable[str]) -> tuple[str, ...]:
    """The chosen states a sweep of ``kind`` removes, in its own order."""
    wanted = set(chosen)
    return tuple(state for state in SWEEP_STATES[kind] if state in wanted)


def store_now(store_name: str) -> int:
    """The store's clock (epoch ms): a clean's age is measured against it."""
    job_store = open_store(store_name)
    with reaching(store_name):
        return int(job_store.now())
