"""The schedule tick: fire every due occurrence, exactly once across all tickers."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from store.errors import JobStoreError
from store.schedules import next_occurrence, tick_request

if TYPE_CHECKING:
    from store.redis_store import RedisJobStore

logger = logging.getLogger(__name__)


def tick_due_schedules(store: RedisJobStore) -> int:
    """One pass over due schedules; returns how many occurrences this caller fired.

    Each schedule is handled in isolation: one with an unsatisfiable cadence is
    logged and skipped (it stays due until fixed or removed), a store error on
    one does not starve the rest.  Slot ``s`` fires job ``sched/<key>/<s>``;
    missed slots collapse into a single catch-up run.
    """
    fired = 0
    now = store.now()
    for schedule in store.due_schedules():
        slot = schedule.next_run_at
        if slot > now:
            continue  # advanced by another ticker since it was read
        upcoming = next_occurrence(schedule, slot, now)
        if upcoming is None:
            logger.error(
                "schedule %s has no next occurrence (cadence %s); skipped",
                schedule.key,
                schedule.cron or schedule.every_ms,
            )
            continue
        try:
            if store.tick_schedule(schedule.key, slot, upcoming, tick_request(schedule, slot)):
                fired += 1
        except JobStoreError:
            logger.exception("ticking schedule %s failed", schedule.key)
    return fired
