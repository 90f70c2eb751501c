"""Clock skew: why every process needs NTP (redis-layout.md §7, hazard H8).

Every timestamp comes from the calling process's clock, and the stall sweeper judges other
workers' lock expiries with its own.  With a 30 s lock renewed every 15 s, a sweeper whose
clock is ahead by more than lockDuration - lockRenewInterval (15 s) can see a healthy,
heartbeated lock as expired and requeue the job: the handler runs twice (the first run's ack
is then refused, so the job still completes once).  A skew below that margin never does.

Two store objects share one prefix: the worker's, on the true (fake) clock, and a sweeper's
whose clock is ``skew`` ms ahead.  Store level, deterministic.
"""

from __future__ import annotations

from typing import Any

import pytest

from store import Claimed, Complete, EnqueueRequest, LockLostError

LOCK_MS = 30_000
RENEW_MS = 15_000  # the runtime's default lockRenewInterval = lockDuration / 2
SWEEP_EVERY_MS = 500


def claim(store: Any, token: str) -> Claimed:
    result = store.claim(queue="default", names=["Skew"], token=token, lock_duration_ms=LOCK_MS)
    assert isinstance(result, Claimed)
    return result


def run_with_sweeper(store: Any, sweeper: Any, clock: Any, job_id: str, until_ms: int) -> list[Any]:
    """Worker A holds the job and heartbeats every RENEW_MS; the sweeper sweeps every 500 ms.

    Returns what the sweeper recovered (stops at the first recovery).
    """
    for now in range(SWEEP_EVERY_MS, until_ms, SWEEP_EVERY_MS):
        clock.set(now)
        if now % RENEW_MS == 0:
            renewed = store.extend_locks([(job_id, "a")], LOCK_MS)
            if renewed.lost:
                return [f"lost at {now}"]
        recovered = sweeper.recover_stalled(1)
        if recovered:
            return recovered
    return []


@pytest.mark.parametrize("skew_ms", [0, 5_000, 14_000])
def test_a_sweeper_ahead_by_less_than_lock_minus_renew_never_recovers_a_healthy_job(
    store: Any, make_store: Any, clock: Any, skew_ms: int
) -> None:
    sweeper = make_store(clock=lambda: clock() + skew_ms)
    job_id = store.enqueue(EnqueueRequest(name="Skew")).id
    assert claim(store, "a").job.id == job_id
    assert run_with_sweeper(store, sweeper, clock, job_id, until_ms=120_000) == []
    store.ack(job_id, "a", Complete("once"))
    assert [a.outcome for a in store.get_attempts(job_id)] == ["completed"]


@pytest.mark.parametrize("skew_ms", [16_000, 45_000])
def test_a_sweeper_ahead_by_more_than_lock_minus_renew_double_runs_a_healthy_job(
    store: Any, make_store: Any, clock: Any, skew_ms: int
) -> None:
    sweeper = make_store(clock=lambda: clock() + skew_ms)
    job_id = store.enqueue(EnqueueRequest(name="Skew")).id
    assert claim(store, "a").job.id == job_id
    recovered = run_with_sweeper(store, sweeper, clock, job_id, until_ms=120_000)
    # The healthy job (its heartbeat never missed) was taken away from worker A ...
    assert [r.id for r in recovered] == [job_id]
    assert store.extend_locks([(job_id, "a")], LOCK_MS).lost == [job_id]
    # ... and runs a second time on worker B while A's run is still going.
    assert claim(store, "b").job.id == job_id
    store.ack(job_id, "b", Complete("second run"))
    with pytest.raises(LockLostError):
        store.ack(job_id, "a", Complete("first run"))
    # At-least-once, still completed exactly once: the ledger shows the false stall.
    assert [a.outcome for a in store.get_attempts(job_id)] == ["stalled", "completed"]
    assert store.get_job(job_id).exit == "second run"
