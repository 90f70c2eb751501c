"""Process-local Prometheus instruments of a worker (``prometheus-client``).

A :class:`store.worker.Worker` given ``metrics=WorkerMetrics()`` records:

* ``mq_job_duration_seconds{name,queue,outcome}`` histogram of handler runs,
  outcome one of completed, failed, retried, cancelled, released, lock-lost,
  fanned-out (20 exponential buckets from 5 ms, doubling);
* ``mq_job_attempts_total{name,queue}`` handler runs started;
* ``mq_lock_lost_total`` job locks the heartbeat found lost (a possible double run);
* ``mq_stalled_recovered_total{outcome}`` stalled jobs this worker's stall recovery
  requeued or failed;
* ``mq_jobs_in_flight{queue}`` handlers running now.

With ``PROMETHEUS_MULTIPROC_DIR`` set before ``prometheus_client`` is imported
(``runworker --processes N --metrics-port P`` does this for its children), the
values go to that directory and the supervisor serves their sum; the in-flight
gauge then sums live processes only.
"""

from __future__ import annotations

from typing import Any

#: 5 ms doubling, 20 bounds (the last about 44 minutes).
DURATION_BUCKETS = tuple(0.005 * 2**i for i in range(20))
OUTCOMES = ("completed", "failed", "retried", "cancelled", "released", "lock-lost", "fanned-out")


class WorkerMetrics:
    """The worker's instruments, registered on ``registry`` (default: the global one)."""

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import REGISTRY, Counter, Gauge, Histogram

        registry = REGISTRY if registry is None else registry
        self.duration = Histogram(
            "mq_job_duration_seconds",
            "Handler run time per job name, queue and outcome.",
            ["name", "queue", "outcome"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.attempts = Counter(
            "mq_job_attempts", "Handler runs started.", ["name", "queue"], registry=registry
        )
        self.lock_lost = Counter(
            "mq_lock_lost",
            "Job locks the heartbeat found lost (another worker may run the job too).",
            registry=registry,
        )
        self.stalled_recovered = Counter(
            "mq_stalled_recovered",
            "Stalled jobs recovered by this worker's stall recovery.",
            ["outcome"],
            registry=registry,
        )
        self.in_flight = Gauge(
            "mq_jobs_in_flight",
            "Handlers running now.",
            ["queue"],
            registry=registry,
            multiprocess_mode="livesum",
        )

    def started(self, name: str, queue: str) -> None:
        self.attempts.labels(name, queue).inc()
        self.in_flight.labels(queue).inc()

    def finished(self, name: str, queue: str, outcome: str, seconds: float) -> None:
        self.in_flight.labels(queue).dec()
        self.duration.labels(name, queue, outcome).observe(max(0.0, seconds))

    def locks_lost(self, count: int = 1) -> None:
        if count:
            self.lock_lost.inc(count)

    def stalled(self, requeued: int, failed: int) -> None:
        if requeued:
            self.stalled_recovered.labels("requeued").inc(requeued)
        if failed:
            self.stalled_recovered.labels("failed").inc(failed)
