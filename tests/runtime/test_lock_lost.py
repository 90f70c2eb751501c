"""WLL — lost locks and ``on_lock_lost`` (conformance-cases.md §23).

Harness of the section: lock 10 s, renew 2.5 s, stalled sweep 1 hour, concurrency 1; a
"ticking" job (attempts 3) whose handler sleeps 1 s on the worker clock and then records
``run<r>-tick<i>`` (r counts handler invocations), recording interrupted runs.  [OBS]
asserts map to ``worker.stats`` and the worker's log records.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from store import (
    ExtendLocksResult,
    FailureReport,
    Flow,
    Job,
    Worker,
    children,
    current_job,
)
from store.clock import blocking_sleep_ms
from tests.runtime.harness import (
    HeartbeatSpy,
    capture_worker_logs,
    eventually,
    log_messages,
    outcomes,
    running,
    state_of,
    walk,
)

FOREVER = 10**9


class Ticker:
    """The ticking handler (async: interrupts really cancel it)."""

    def __init__(self, ticks: int = 10, cleanup_ms: int = 0) -> None:
        self.default_ticks = ticks
        self.cleanup_ms = cleanup_ms
        self.ticks: list[str] = []
        self.interrupted: list[int] = []
        self.interrupted_ids: list[str] = []
        self.cleaned: list[int] = []
        self.runs = 0

    async def handler(self, payload: dict[str, Any]) -> str:
        self.runs += 1
        run = self.runs
        ctx = current_job()
        try:
            for i in range(payload.get("ticks", self.default_ticks)):
                await ctx.asleep(1000)
                self.ticks.append(f"run{run}-tick{i}")
        except asyncio.CancelledError:
            self.interrupted.append(run)
            self.interrupted_ids.append(ctx.job_id)
            if self.cleanup_ms and payload.get("slow_cleanup", True):
                await ctx.asleep(self.cleanup_ms)
                self.cleaned.append(run)
            raise
        return f"run{run} done"

    def of_run(self, run: int) -> list[str]:
        return [t for t in self.ticks if t.startswith(f"run{run}-")]


def lock_lost_worker(
    store: Any, job: Job, reports: list[FailureReport], **overrides: Any
) -> Worker:
    options: dict[str, Any] = {
        "lock_duration_ms": 10_000,
        "lock_renew_interval_ms": 2_500,
        "stalled_interval_ms": 3_600_000,
        "concurrency": 1,
        "on_job_failure": reports.append,
    }
    options.update(overrides)
    return Worker(store, [job], **options)


def ticking_job(registry: Any, ticker: Ticker, name: str = "Ticking") -> Job:
    return Job(name, attempts=3, handler=ticker.handler, registry=registry)


def test_wll_01_ignore_the_orphaned_run_keeps_going_to_its_end(store, registry, clock, caplog):
    capture_worker_logs(caplog)
    ticker, reports = Ticker(), []
    job = ticking_job(registry, ticker)
    spy = HeartbeatSpy(store, steal=lambda job_id: True)
    with running(lock_lost_worker(store, job, reports, registry=registry)):
        job_id = job.enqueue({})
        eventually(lambda: ticker.runs == 1)
        walk(clock, 12_000)
        assert spy.stolen == [job_id]
        assert "run1-tick9" in ticker.ticks
        assert ticker.interrupted == []
    messages = log_messages(caplog)
    assert any("failed to renew locks; jobs may run twice" in m for m in messages)
    assert any("ack dropped (LockLostError)" in m for m in messages)
    assert reports == []


def test_wll_02_ignore_the_orphan_holds_its_taker_slot(store, registry, clock):
    ticker, reports = Ticker(), []
    job = ticking_job(registry, ticker)
    HeartbeatSpy(store, steal=lambda job_id: True)
    with running(lock_lost_worker(store, job, reports, registry=registry)):
        job.enqueue({})
        eventually(lambda: ticker.runs == 1)
        walk(clock, 14_000)
    run1, run2 = ticker.of_run(1), ticker.of_run(2)
    assert run1[-1] == "run1-tick9"
    assert run2, "the re-queued job should have started once the orphan finished"
    assert ticker.ticks.index(run2[0]) > ticker.ticks.index(run1[-1])


def test_wll_03_interrupt_stops_the_run_within_one_heartbeat(store, registry, clock):
    ticker, reports = Ticker(), []
    job = ticking_job(registry, ticker)
    HeartbeatSpy(store, steal=lambda job_id: True)
    with running(
        lock_lost_worker(store, job, reports, on_lock_lost="interrupt", registry=registry)
    ):
        job.enqueue({})
        eventually(lambda: ticker.runs == 1)
        walk(clock, 12_000)
    assert 1 in ticker.interrupted
    assert ticker.of_run(1) == ["run1-tick0", "run1-tick1"]


def test_wll_04_interrupt_spends_no_attempt_and_reports_no_failure(store, registry, clock):
    ticker, reports = Ticker(ticks=FOREVER), []
    job = ticking_job(registry, ticker)
    HeartbeatSpy(store, steal=lambda job_id: True)
    worker = lock_lost_worker(store, job, reports, on_lock_lost="interrupt", registry=registry)
    with running(worker):
        job_id = job.enqueue({})
        eventually(lambda: ticker.runs == 1)
        walk(clock, 5_000)
        record = store.get_job(job_id)
        assert reports == []
        assert record.attempts_made == 0
        assert record.state != "failed"
        assert outcomes(store, job_id) == []
        assert worker.stats["lock-lost"] == 1
        assert (worker.stats["retried"], worker.stats["failed"]) == (0, 0)


def test_wll_05_interrupt_frees_the_taker_slot_for_the_requeued_job(store, registry, clock):
    ticker, reports = Ticker(), []
    job = ticking_job(registry, ticker)
    HeartbeatSpy(store, steal=lambda job_id: True)
    with running(
        lock_lost_worker(store, job, reports, on_lock_lost="interrupt", registry=registry)
    ):
        job.enqueue({})
        eventually(lambda: ticker.runs == 1)
        walk(clock, 8_000)
    assert "run2-tick0" in ticker.ticks
    assert "run1-tick9" not in ticker.ticks


def test_wll_06_slow_interrupt_finalizer_does_not_stall_other_locks(store, registry, clock):
    ticker, reports = Ticker(ticks=FOREVER, cleanup_ms=120_000), []
    job = ticking_job(registry, ticker)
    ids: dict[str, str] = {}
    spy = HeartbeatSpy(store, steal=lambda job_id: job_id == ids.get("slow"))
    worker = lock_lost_worker(
        store, job, reports, on_lock_lost="interrupt", concurrency=2, registry=registry
    )
    with running(worker):
        ids["slow"] = job.enqueue({"role": "slow"})
        bystander = job.enqueue({"role": "bystander", "slow_cleanup": False})
        eventually(lambda: ticker.runs == 2)
        walk(clock, 10_000)
        assert spy.stolen == [ids["slow"]]
        assert ticker.interrupted_ids == [ids["slow"]]
        assert ticker.cleaned == []  # the slow finalizer is still running
        record = store.get_job(bystander)
        assert (record.state, record.stalled_count) == ("active", 0)
        # The heartbeat kept renewing the bystander after the loss, at its normal cadence.
        assert spy.renewed(bystander) == [2_500, 5_000, 7_500, 10_000]


def test_wll_07_lost_and_cancel_requested_takes_the_lost_path(store, registry, clock):
    ticker, reports = Ticker(), []
    job = ticking_job(registry, ticker)
    spy = HeartbeatSpy(store, steal=lambda job_id: True, also_cancel=True)
    worker = lock_lost_worker(store, job, reports, on_lock_lost="interrupt", registry=registry)
    with running(worker):
        job_id = job.enqueue({})
        eventually(lambda: ticker.runs == 1)
        walk(clock, 5_000)
        assert spy.stolen == [job_id]
        assert worker.stats["lock-lost"] == 1
        assert worker.stats["cancelled"] == 0
        assert "cancelled" not in outcomes(store, job_id)
        assert state_of(store, job_id) != "cancelled"


def test_wll_08_flow_parent_losing_its_lock_mid_fan_out_enqueues_no_children(
    store, registry, clock
):
    child = Job("FanChild", registry=registry)
    parent = Job("FanParent", registry=registry)
    flow = Flow("slow-fan", parent=parent, children=[child])
    started: list[str] = []

    @flow.fan_out
    async def fan_out(payload):
        started.append(current_job().job_id)
        await current_job().asleep(6_000)  # the lock is stolen while this runs
        return children(child, [("a", {}), ("b", {})])

    @flow.collect
    def collect(payload, results):
        return results.counts.completed

    spy = HeartbeatSpy(store, steal=lambda job_id: True)
    worker = lock_lost_worker(store, parent, [], registry=registry, on_lock_lost="interrupt")
    with running(worker):
        parent_id = parent.enqueue({})
        eventually(lambda: started == [parent_id])
        walk(clock, 5_000)
        assert spy.stolen == [parent_id]
        eventually(lambda: worker.stats["lock-lost"] == 1)
        assert store.list(name="FanChild").items == []
        assert "fanned-out" not in outcomes(store, parent_id)
        assert store.get_job(parent_id).flow is None


def test_wll_09_unreachable_heartbeat_still_reports_an_expired_deadline(
    store, registry, clock, caplog
):
    capture_worker_logs(caplog)
    ticker, reports = Ticker(ticks=30), []
    job = ticking_job(registry, ticker)
    spy = HeartbeatSpy(store, unreachable_until=float("inf"))
    with running(lock_lost_worker(store, job, reports, registry=registry)):
        job.enqueue({})
        eventually(lambda: ticker.runs == 1)
        walk(clock, 20_000)
        assert ticker.interrupted == []
        assert "run1-tick18" in ticker.ticks
    assert spy.failures, "the heartbeat should have tried the store"
    messages = log_messages(caplog)
    assert any("lock renewal failed" in m for m in messages)
    assert any(
        "locks expired before the heartbeat could reach the store; jobs may run twice" in m
        for m in messages
    )


def test_wll_10_unreachable_heartbeat_interrupt_stops_the_run_past_its_deadline(
    store, registry, clock
):
    ticker, reports = Ticker(ticks=30), []
    job = ticking_job(registry, ticker)
    HeartbeatSpy(store, unreachable_until=float("inf"))
    worker = lock_lost_worker(store, job, reports, on_lock_lost="interrupt", registry=registry)
    with running(worker):
        job.enqueue({})
        eventually(lambda: ticker.runs == 1)
        walk(clock, 9_500)
        assert ticker.interrupted == []  # the lock's deadline (10 s) has not passed yet
        walk(clock, 10_500)
        assert ticker.interrupted == [1]
        assert reports == []
        assert worker.stats["lock-lost"] == 1


def test_wll_11_ignore_a_run_outliving_a_healed_partition_keeps_its_lock(
    store, registry, clock, caplog
):
    capture_worker_logs(caplog)
    ticker, reports = Ticker(ticks=40), []
    job = ticking_job(registry, ticker)
    spy = HeartbeatSpy(store, unreachable_until=14_000)
    worker = lock_lost_worker(
        store, job, reports, stalled_interval_ms=20_000, concurrency=2, registry=registry
    )
    with running(worker):
        job_id = job.enqueue({})
        eventually(lambda: ticker.runs == 1)
        walk(clock, 45_000)
        eventually(lambda: state_of(store, job_id) == "completed")
    messages = log_messages(caplog)
    expired = [
        m for m in messages if "locks expired before the heartbeat could reach the store" in m
    ]
    assert len(expired) == 1
    assert not any("failed to renew locks" in m for m in messages)
    assert spy.failures and max(spy.failures) < 14_000
    assert ticker.of_run(2) == []
    assert "run1-tick39" in ticker.ticks
    assert store.get_job(job_id).stalled_count == 0
    assert outcomes(store, job_id) == ["completed"]


def uninterruptible_handler(ticker: Ticker, done: list[int], fail: bool):
    """Run 1 does 6 s of work that ignores interrupts, then checks; later runs just wait."""

    def handler(payload: Any) -> str:
        ticker.runs += 1
        run = ticker.runs
        ctx = current_job()
        if run == 1:
            blocking_sleep_ms(ctx.clock, 6_000)  # not interruptible
            done.append(run)
            if fail:
                raise RuntimeError("the region ended with a genuine failure")
            ctx.check_interrupted()  # leaving the region: honour a pending interrupt
            return "finished"
        ctx.sleep(FOREVER)
        return "never"

    return handler


def test_wll_12_run_in_an_uninterruptible_region_is_dropped_when_it_leaves(store, registry, clock):
    ticker, reports, done = Ticker(), [], []
    job = Job(
        "Region",
        attempts=3,
        handler=uninterruptible_handler(ticker, done, fail=False),
        registry=registry,
    )
    spy = HeartbeatSpy(store, steal=lambda job_id: True)
    worker = lock_lost_worker(store, job, reports, on_lock_lost="interrupt", registry=registry)
    with running(worker):
        job_id = job.enqueue({})
        eventually(lambda: ticker.runs == 1)
        walk(clock, 4_000)
        assert spy.stolen == [job_id]
        assert done == []
        # Still inside its region: the run has not ended, so it is not dropped yet and it
        # keeps its taker slot (the released job waits; nothing else was claimed).
        assert worker.stats["lock-lost"] == 0
        assert state_of(store, job_id) == "waiting"
        walk(clock, 4_000)
        assert done == [1]
        assert reports == []
        assert worker.stats["lock-lost"] == 1
        assert worker.stats["completed"] == 0
        assert store.get_job(job_id).attempts_made == 0


def test_wll_13_run_ignoring_the_interrupt_and_failing_is_still_reported(store, registry, clock):
    ticker, reports, done = Ticker(), [], []
    job = Job(
        "RegionFails",
        attempts=3,
        handler=uninterruptible_handler(ticker, done, fail=True),
        registry=registry,
    )
    HeartbeatSpy(store, steal=lambda job_id: True)
    worker = lock_lost_worker(store, job, reports, on_lock_lost="interrupt", registry=registry)
    with running(worker):
        job_id = job.enqueue({})
        eventually(lambda: ticker.runs == 1)
        walk(clock, 8_000)
        assert done == [1]
        eventually(lambda: len(reports) == 1)
    assert len(reports) == 1
    assert (reports[0].job_id, reports[0].will_retry, reports[0].attempt) == (job_id, True, 1)


def test_wll_14_lost_report_for_a_finished_run_touches_nothing(store, registry, clock):
    ticker, reports = Ticker(ticks=3), []
    job = ticking_job(registry, ticker)
    original = store.extend_locks
    answered = threading.Event()

    def slow_lost(locks: Any, duration_ms: int) -> ExtendLocksResult:
        locks = list(locks)
        blocking_sleep_ms(clock, 1_000)  # the answer arrives one second later...
        answered.set()
        return ExtendLocksResult([job_id for job_id, _ in locks], [])  # ...saying "lost"

    store.extend_locks = slow_lost
    worker = lock_lost_worker(store, job, reports, on_lock_lost="interrupt", registry=registry)
    with running(worker):
        job_id = job.enqueue({})
        eventually(lambda: ticker.runs == 1)
        walk(clock, 4_000)
        assert answered.is_set()
        eventually(lambda: state_of(store, job_id) == "completed")
        assert ticker.interrupted == []
        assert worker.stats["completed"] == 1
        assert worker.stats["lock-lost"] == 0
    store.extend_locks = original
    assert outcomes(store, job_id) == ["completed"]


def test_wll_15_shutdown_wins_over_a_lost_lock(store, registry, clock, caplog):
    capture_worker_logs(caplog)
    ticker, reports = Ticker(ticks=FOREVER, cleanup_ms=5_000), []
    job = ticking_job(registry, ticker)
    HeartbeatSpy(store, steal=lambda job_id: True)
    worker = lock_lost_worker(store, job, reports, on_lock_lost="interrupt", registry=registry)
    with running(worker) as handle:
        job.enqueue({})
        eventually(lambda: ticker.runs == 1)
        walk(clock, 3_000)  # lost at 2.5 s: now inside the 5 s interrupt cleanup
        assert ticker.interrupted == [1]
        handle.stop(drive=clock)  # close the worker while still driving the clock
    stats = worker.stats
    assert (stats["released"], stats["lock-lost"]) == (1, 0), stats
    assert any("release dropped (LockLostError)" in m for m in log_messages(caplog))


def test_wll_16_positive_control_cancel_still_interrupts_and_acks_cancelled(store, registry, clock):
    ticker, reports = Ticker(), []
    job = ticking_job(registry, ticker)
    worker = lock_lost_worker(store, job, reports, on_lock_lost="interrupt", registry=registry)
    with running(worker):
        job_id = job.enqueue({})
        eventually(lambda: ticker.runs == 1)
        walk(clock, 2_000)
        job.cancel(job_id)
        walk(clock, 10_000)
        assert ticker.interrupted == [1]
        assert "run1-tick9" not in ticker.ticks
        assert state_of(store, job_id) == "cancelled"
    assert outcomes(store, job_id) == ["cancelled"]
    assert worker.stats["cancelled"] == 1
