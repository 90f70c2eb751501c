"""The dashboard's Prometheus collector: every configured store, read at scrape time.

A custom ``prometheus_client`` collector (nothing is kept between scrapes, so
several dashboard processes report the same numbers).  Per store, one
:func:`store.monitoring.metrics_snapshot`: a single pipeline of O(1) reads plus
the oldest waiting job of at most 50 queues, so a scrape costs the same number of
Redis commands at 10 jobs and at a million.

Families (labels):

* ``mq_store_up{store}`` 1 when the store's Redis answered, else 0 (its other
  families are then left out of this scrape);
* ``mq_jobs{store,queue,state}`` jobs now, from the O(1) counters;
* ``mq_jobs_finished_total{store,queue,state}`` jobs that ever reached a
  terminal state (completed, failed, cancelled);
* ``mq_oldest_waiting_age_seconds{store,queue}`` age of the oldest waiting job
  (0 when none waits);
* ``mq_workers{store}`` live workers (presence refreshed within 60 s);
* ``mq_outbox_entries{store}`` flow child reports not yet delivered;
* ``mq_schedules_overdue{store}`` schedules whose next run is over 30 s late;
* ``mq_index_ready{store,kind}`` 1 when the list index is enabled and ready;
* ``mq_queue_limit_concurrency{store,queue}`` and
  ``mq_queue_limit_rate_per_second{store,queue}`` a limited queue's settings (a
  family has no sample for a queue without that kind of limit);
* ``mq_queue_active_claims{store,queue}`` claims holding a slot of a limited
  queue now (counted by lock expiry);
* ``mq_queue_throttled{store,queue}`` 1 while the limits admit no claim;
* ``mq_queue_limit_group_concurrency{store,queue}`` and
  ``mq_queue_limit_group_rate_per_second{store,queue}`` the per-group limits;
* ``mq_queue_groups{store,queue}`` job groups with waiting jobs and
  ``mq_queue_groups_held{store,queue}`` those the group limits hold back now.

The queue-limit families cover at most :data:`LIMITED_PER_STORE` limited
queues per store (the first by name): ``limited_queues()`` reads the limits hash
in HSCAN pages, then each of those queues costs one pipeline.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mqadmin import services

logger = logging.getLogger(__name__)

#: Limited queues per store whose queue-limit families a scrape reports.
LIMITED_PER_STORE = 50


class StoreCollector(Collector):
    """Collects the families above for every store in ``MQ_STORES``."""

    def collect(self) -> Iterator[Metric]:
        from store.errors import UNAVAILABLE_ERRORS, StoreDefect, StoreFailure
        from store.monitoring import metrics_snapshot

        up = GaugeMetricFamily(
            "mq_store_up", "1 when the store's Redis answered this scrape.", labels=["store"]
        )
        jobs = GaugeMetricFamily(
            "mq_jobs",
            "Jobs per queue and state now (O(1) counters).",
            labels=["store", "queue", "state"],
        )
        finished = CounterMetricFamily(
            "mq_jobs_finished",
            "Jobs that reached a terminal state, per queue and state, since the store began counting.",
            labels=["store", "queue", "state"],
        )
        oldest = GaugeMetricFamily(
            "mq_oldest_waiting_age_seconds",
            "Age of the oldest waiting job of the queue (0 when none waits).",
            labels=["store", "queue"],
        )
        workers = GaugeMetricFamily(
            "mq_workers", "Live worker processes (presence within 60 s).", labels=["store"]
        )
        outbox = GaugeMetricFamily(
            "mq_outbox_entries", "Flow child reports waiting in the outbox.", labels=["store"]
        )
        overdue = GaugeMetricFamily(
            "mq_schedules_overdue",
            "Schedules whose next run is more than 30 s in the past.",
            labels=["store"],
        )
        index_ready = GaugeMetricFamily(
            "mq_index_ready",
            "1 when the list index of this kind is enabled and its ready marker is set.",
            labels=["store", "kind"],
        )
        limit_concurrency = GaugeMetricFamily(
            "mq_queue_limit_concurrency",
            "Concurrency limit of the queue (claimed jobs at once).",
            labels=["store", "queue"],
        )
        limit_rate = GaugeMetricFamily(
            "mq_queue_limit_rate_per_second",
            "Rate limit of the queue, in claims per second.",
            labels=["store", "queue"],
        )
        active_claims = GaugeMetricFamily(
            "mq_queue_active_claims",
            "Claims of a limited queue holding a slot now (lock not expired).",
            labels=["store", "queue"],
        )
        throttled = GaugeMetricFamily(
            "mq_queue_throttled",
            "1 while the queue's limits admit no claim (throttled_until in the future).",
            labels=["store", "queue"],
        )
        limit_group_concurrency = GaugeMetricFamily(
            "mq_queue_limit_group_concurrency",
            "Concurrency limit of each job group of the queue.",
            labels=["store", "queue"],
        )
        limit_group_rate = GaugeMetricFamily(
            "mq_queue_limit_group_rate_per_second",
            "Rate limit of each job group of the queue, in claims per second.",
            labels=["store", "queue"],
        )
        groups = GaugeMetricFamily(
            "mq_queue_groups",
            "Job groups of a limited queue that have waiting jobs.",
            labels=["store", "queue"],
        )
        groups_held = GaugeMetricFamily(
            "mq_queue_groups_held",
            "Job groups of the queue held back by the group limits now.",
            labels=["store", "queue"],
        )
        for name in services.configured_stores():
            try:
                job_store = services.get_named_store(name)
                snap = metrics_snapshot(job_store)
                now = job_store.now()
                limits = [
                    job_store.queue_limits(queue)
                    for queue in job_store.limited_queues()[:LIMITED_PER_STORE]
                ]
            except (StoreFailure, StoreDefect, OSError) + UNAVAILABLE_ERRORS as exc:
                logger.warning("metrics: store %s unavailable: %s", name, type(exc).__name__)
                up.add_metric([name], 0)
                continue
            up.add_metric([name], 1)
            for queue in sorted(snap.counts):
                for state, value in snap.counts[queue].items():
                    jobs.add_metric([name, queue, state], value)
            for queue in sorted(snap.finished):
                for state, value in snap.finished[queue].items():
                    finished.add_metric([name, queue, state], value)
            for queue in sorted(snap.oldest_waiting_ms):
                oldest.add_metric([name, queue], snap.oldest_waiting_ms[queue] / 1000)
            workers.add_metric([name], snap.live_workers)
            outbox.add_metric([name], snap.outbox_entries)
            overdue.add_metric([name], snap.schedules_overdue)
            for kind, ready in sorted(snap.index_ready.items()):
                index_ready.add_metric([name, kind], 1 if ready else 0)
            for queue_limits in limits:
                labels = [name, queue_limits.queue]
                if queue_limits.concurrency is not None:
                    limit_concurrency.add_metric(labels, queue_limits.concurrency)
                for family, rate in (
                    (limit_rate, queue_limits.rate),
                    (limit_group_rate, queue_limits.group_rate),
                ):
                    if rate is not None:
                        family.add_metric(labels, rate.limit * 1000 / rate.per_ms)
                if queue_limits.group_concurrency is not None:
                    limit_group_concurrency.add_metric(labels, queue_limits.group_concurrency)
                groups.add_metric(labels, queue_limits.groups)
                groups_held.add_metric(labels, queue_limits.groups_held)
                active_claims.add_metric(labels, queue_limits.active)
                until = queue_limits.throttled_until
                throttled.add_metric(labels, 1 if until is not None and until > now else 0)
        yield from (up, jobs, finished, oldest, workers, outbox, overdue, index_ready)
        yield from (limit_concurrency, limit_rate, active_claims, throttled)
        yield from (limit_group_concurrency, limit_group_rate, groups, groups_held)


def exposition() -> bytes:
    """One scrape in the Prometheus text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector())
    return generate_latest(registry)
