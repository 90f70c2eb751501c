"""Seed a store with about 100,000 jobs in every state, fast: ``enqueue_many`` in chunks of
500 and batched ``ack_and_claim_many`` drains (each call acks one batch and claims the next),
on a store handle with a settable clock so finish times spread over the last hour."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from store import (
    Complete,
    EnqueueRequest,
    Fail,
    FanOut,
    FlowChildSpec,
    ParentEnvelope,
    RedisJobStore,
)
from store.flow_runtime import child_job_id
from store.jobs import encode_failure

CHUNK = 500
BATCH = 250


class SeedClock:
    def __init__(self, at: int) -> None:
        self.at = at

    def __call__(self) -> int:
        return self.at


@dataclass
class Seeded:
    total: int = 0
    starved: str = ""
    starved_at_ms: int = 0
    by_queue: dict[str, dict[str, int]] = field(default_factory=dict)


def _failure(n: int) -> dict[str, Any]:
    kinds = [
        (TimeoutError, "upstream timed out after 30 s"),
        (ConnectionResetError, "connection reset by peer"),
        (ValueError, f"row {n % 7} has no ledger code"),
    ]
    kind, message = kinds[n % len(kinds)]
    try:
        raise kind(message)
    except Exception as exc:  # noqa: BLE001 - any exception shape will do
        return encode_failure(exc)


def _drain(
    job_store: RedisJobStore, clock: SeedClock, queue: str, name: str, count: int, fail_every: int
) -> None:
    """Run ``count`` waiting jobs of (queue, name) to an end: every fail_every-th fails."""
    held: list[tuple[str, str]] = []
    done = 0
    serial = 0
    while done < count or held:
        acks = []
        for job_id, token in held:
            serial += 1
            outcome = (
                Fail(_failure(serial))
                if fail_every and serial % fail_every == 0
                else Complete(serial)
            )
            acks.append((job_id, token, outcome))
        want = min(BATCH, count - done)
        tokens = [f"seed:{done + i}" for i in range(want)]
        clock.at += 7
        batch = job_store.ack_and_claim_many(acks, queue=queue, names=[name], tokens=tokens)
        held = [(job.id, token) for job, token in batch.jobs]
        done += len(held)
        if not held and want:
            break


def seed_scale(client: Any, prefix: str, now_ms: int, store_key: str = "main") -> Seeded:
    """About 100k jobs: mostly finished, a failing queue, a waiting backlog with priorities,
    delayed and active jobs; one low-priority job has waited 12 minutes behind newer ones."""
    clock = SeedClock(now_ms - 3_600_000)
    job_store = RedisJobStore(client, prefix=prefix, clock=clock, store_key=store_key)
    seeded = Seeded()

    def add(requests: list[EnqueueRequest]) -> None:
        for start in range(0, len(requests), CHUNK):
            job_store.enqueue_many(requests[start : start + CHUNK])
        seeded.total += len(requests)

    # Finished history: export (some failures), mail (mostly completed), one cancel set.
    add([EnqueueRequest(name="Export", queue="export", payload={"n": i}) for i in range(40_000)])
    _drain(job_store, clock, "export", "Export", 40_000, fail_every=5)
    add([EnqueueRequest(name="SendEmail", queue="mail", payload={"n": i}) for i in range(35_000)])
    _drain(job_store, clock, "mail", "SendEmail", 35_000, fail_every=97)
    add([EnqueueRequest(name="Charge", queue="billing", payload={"n": i}) for i in range(300)])
    for record in job_store.list(queue="billing", limit=200).items:
        job_store.cancel(record.id)
    # The starved job: low priority, enqueued 12 minutes before the backlog.
    clock.at = seeded.starved_at_ms = now_ms - 12 * 60_000
    seeded.starved = job_store.enqueue(
        EnqueueRequest(name="Export", queue="export", payload={"starved": True}, priority=0)
    ).id
    seeded.total += 1
    clock.at = now_ms - 30_000
    add(
        [
            EnqueueRequest(name="Export", queue="export", payload={"n": i}, priority=1 + i % 4)
            for i in range(20_000)
        ]
    )
    add(
        [
            EnqueueRequest(name="Export", queue="export", payload={"n": i}, delay_ms=3_600_000 + i)
            for i in range(3_000)
        ]
    )
    add([EnqueueRequest(name="Sync", queue="sync", payload={"n": i}) for i in range(2_000)])
    clock.at = now_ms - 5_000
    # A few running jobs (claimed with a long lock) in mail.
    add([EnqueueRequest(name="SendEmail", queue="mail", payload={"n": i}) for i in range(10)])
    for i in range(6):
        job_store.claim(
            queue="mail", names=["SendEmail"], token=f"run:{i}", lock_duration_ms=3_600_000
        )
    # Flow parents waiting for their children (one child each, in the same store).
    for n in range(3):
        parent = job_store.enqueue(EnqueueRequest(name="BuildReport", queue="reports")).id
        job_store.claim(queue="reports", names=["BuildReport"], token=f"flow:{n}")
        key = f"part-{n}"
        spec = FlowChildSpec(
            child_key=key,
            store_key=store_key,
            request=EnqueueRequest(
                id=child_job_id(store_key, parent, key),
                name="RenderPart",
                queue="parts",
                parent=ParentEnvelope("Report", parent, key, store_key, 1),
            ),
        )
        job_store.ack(parent, f"flow:{n}", FanOut(False, [spec]))
        job_store.enqueue(spec.request)
        seeded.total += 2
    seeded.by_queue = job_store.counts_by_queue()
    return seeded
