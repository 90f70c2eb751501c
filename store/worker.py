"""The worker: claims jobs, runs their handlers, acks the outcome.

One :class:`Worker` serves one store.  Inside an asyncio event loop it runs,
per registered queue, ``concurrency`` taker tasks (claim -> run -> ack, with
the acks of a batch and the next claim in one round trip; ``prefetch="auto"``
sizes each batch, see :class:`AutoPrefetch`), plus a heartbeat (lock renewal
and cancel delivery) and, unless ``maintenance=False``, the maintenance loops
(stalled recovery, schedule ticks, history and dedupe sweeps).  Store calls run
in a small thread pool on the synchronous store; sleeps run on the store's
clock, so tests drive a worker with a fake clock.

Handlers:

* ``async def`` handlers run on the event loop; cancel, timeout, shutdown and
  (with ``on_lock_lost="interrupt"``) a lost lock interrupt them for real
  (``asyncio.CancelledError`` is raised at their next await).
* plain functions (the Django ORM kind) run in a thread pool; interruption is
  cooperative: ``current_job().check_interrupted()`` / ``current_job().sleep()``
  raise once the worker asked the run to stop.
* ``run_sync_in="process"`` runs plain functions in a forked child process per
  job that is killed on cancel, timeout or shutdown.

Jobs with no registered definition can still be served through a
:class:`NameResolver` (``resolver=``): it names extra queues and, per queue, the
job names to claim there, and turns a claimed job's name into a definition on
first use (mqadmin's Django Tasks backend runs Django tasks this way, by module
path).  The resolver's names are re-read when a claim comes back empty and at
least once a second while the queue is busy.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import itertools
import json
import logging
import multiprocessing
import os
import secrets
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from store import codec
from store.clock import sleep_ms
from store.errors import (
    InvalidRequestError,
    JobNotFoundError,
    JobStoreError,
    LockLostError,
    ValueTooLargeError,
)
from store.flow_runtime import (
    Flow,
    FlowDefinitionError,
    FlowResults,
    enqueue_children,
    relay_outbox,
    sweep_flows,
)
from store.insights import InFlightJob
from store.jobs import (
    JOBS,
    Job,
    JobContext,
    JobInterrupted,
    encode_failure,
    install_log_context,
    is_unrecoverable,
    reset_current_job,
    set_current_job,
)
from store.limits import over_limit
from store.records import (
    MAX_RUN_AT_MS,
    AckOutcome,
    BackoffPolicy,
    Cancelled,
    Complete,
    Empty,
    Fail,
    FanOut,
    FlowChildSpec,
    JobRecord,
    Retry,
)
from store.redis_store import ClaimBatch, RedisJobStore
from store.registry import StoreRegistry, default_registry
from store.scheduler import tick_due_schedules
from store.tracing import attempt_span, finish_span

logger = logging.getLogger(__name__)

JobHook = Callable[[], None]
PRESENCE_INTERVAL_MS = 10_000
#: A busy worker announces itself this often when its totals or jobs in flight changed
#: (the workers page shows what it has done within seconds, not at the next interval).
PRESENCE_REFRESH_MS = 2_000
#: How often a worker reads the operator's command for it (quiet, stop; ``control_worker``).
CONTROL_INTERVAL_MS = 1_000
# How often a busy taker re-reads its resolver's names (an idle one re-reads on every empty claim).
RESOLVER_REFRESH_MS = 1_000
#: The largest batch an "auto" prefetch claims (the drain bench's best tuned setting).
AUTO_PREFETCH_MAX = 64
#: The default bound on how long an auto-prefetched job waits in a taker before it starts.
PREFETCH_WAIT_MS = 500
#: The share of the wait bound a batch is sized to fill at the estimated run time: the rest
#: absorbs run times above the estimate, so that the bound rarely has to hand jobs back.
WAIT_SHARE = 0.5
#: After a queue-limited answer, how long an auto prefetch claims one job at a time.
LIMITED_HOLD_MS = 1_000
#: The weight of a new run time in the auto prefetch's estimate when it is below the estimate
#: (a longer run replaces the estimate at once: fairness first).
RUN_TIME_DECAY = 0.2


async def first_of(*awaitables: Any) -> None:
    """Wait until the first of ``awaitables`` is done; cancel the others and reap them."""
    waiters = [asyncio.ensure_future(a) for a in awaitables]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)


class NameResolver(Protocol):
    """Serves jobs that have no registered :class:`Job` (see the module docstring)."""

    def queues(self) -> Iterable[str]:
        """The queues to serve besides those of registered jobs."""
        ...

    def names(self, queue: str) -> Iterable[str]:
        """The job names to claim on ``queue`` now (a blocking call; run off the event loop)."""
        ...

    def resolve(self, name: str) -> Job:
        """The definition that runs ``name`` (its handler may fail the job; it must not raise)."""
        ...


@dataclass(frozen=True)
class FailureReport:
    """What ``on_job_failure`` receives after each failed run (or a stall exhaustion)."""

    job_id: str
    name: str
    queue: str
    attempt: int
    attempts_max: int
    will_retry: bool
    cause: Any


@dataclass
class _InFlight:
    job: JobRecord
    token: str
    ctx: JobContext
    deadline: int
    task: asyncio.Future[Any] | None = None
    process: Any = None
    interrupted_by: str | None = None
    cancelling: bool = False
    lost: bool = False
    expired_reported: bool = False
    in_thread: bool = False
    #: Set when the run ends without an ack outcome of its own (fan-out).
    outcome: str | None = None

    def interrupt(self, reason: str) -> None:
        """Ask the run to stop; never waits for the handler's cleanup.

        Async handlers are cancelled, child processes killed; a handler running
        in a thread is only signalled (it stops at its next check_interrupted()
        or current_job().sleep()) and is still awaited, so its finalizers run and
        its real outcome is routed.
        """
        if self.interrupted_by is None:
            self.interrupted_by = reason
        self.ctx.interrupt_reason = reason
        self.ctx.interrupt_event.set()
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        elif self.task is not None and not self.task.done() and not self.in_thread:
            self.task.cancel()


@dataclass
class _Held:
    """A claimed job waiting its turn in a taker's prefetched batch (heartbeated too)."""

    job: JobRecord
    token: str
    claimed_at: int = 0
    lost: bool = False
    cancelled: bool = False
    #: Handed back by the wait bound (auto prefetch) before its turn came.
    released: bool = False


class AutoPrefetch:
    """How many jobs one taker claims next, with ``prefetch="auto"``.

    A taker runs its batch one job after another, so the last of ``b`` prefetched jobs
    waits about ``(b - 1)`` run times in this worker while another worker may be idle.
    The batch doubles after every claim that came back full (the queue is deep), up to
    ``cap`` and to ``1 + wait_ms * WAIT_SHARE / run time`` (the run time estimate jumps up at once
    on a longer run and decays slowly), so long jobs are claimed one at a time.  A claim
    that came back short sets the next batch to what it got (the queue is shallow: leave
    the rest to the other workers); a queue with limits, whose batches the store cuts to
    one job, is asked one job at a time for ``LIMITED_HOLD_MS``; and a batch the wait
    bound had to hand back starts again at one.
    """

    def __init__(self, wait_ms: int, cap: int = AUTO_PREFETCH_MAX) -> None:
        self.wait_ms = wait_ms
        self.cap = cap
        self.size = 1
        #: The estimated run time of one job in this taker (ms), None before the first run.
        self.run_ms: float | None = None
        self.limited_until: int | None = None

    def fits(self) -> int:
        """How many jobs fit the wait bound at the estimated run time."""
        if not self.run_ms:
            return self.cap
        return max(1, min(self.cap, 1 + int(self.wait_ms * WAIT_SHARE / self.run_ms)))

    def want(self) -> int:
        return min(self.size, self.fits())

    def ran(self, ms: float) -> None:
        if self.run_ms is None or ms >= self.run_ms:
            self.run_ms = float(ms)
        else:
            self.run_ms += (ms - self.run_ms) * RUN_TIME_DECAY

    def claimed(self, asked: int, got: int, throttled: str | None, now: int) -> None:
        if throttled == "limited":
            self.size, self.limited_until = 1, now + LIMITED_HOLD_MS
        elif got < asked:
            self.size = max(1, got)
        elif self.limited_until is None or now >= self.limited_until:
            self.limited_until = None
            self.size = min(self.fits(), self.size * 2)

    def overheld(self) -> None:
        """The wait bound handed jobs of this taker's batch back: start again at one."""
        self.size = 1


class JobTimeoutError(Exception):
    """A run exceeded its job's timeout_ms (the worker interrupted it)."""


@dataclass
class _QueueConfig:
    names: set[str] = field(default_factory=set)
    concurrency: int | None = None


def _prefetch_setting(value: int | str) -> int | str:
    """``prefetch`` checked: "auto", or a whole number of jobs per claim (at least 1)."""
    if value == "auto":
        return "auto"
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidRequestError(f"prefetch must be 'auto' or a whole number >= 1, not {value!r}")
    return value


def backoff_delay_ms(job: JobRecord | Job | BackoffPolicy | None, attempt: int) -> int:
    """The retry delay after run ``attempt`` failed (0 without a backoff policy)."""
    # Whatever carries a ``backoff`` stands for its policy; anything else is the policy.
    policy = cast("BackoffPolicy | None", getattr(job, "backoff", job))
    if policy is None:
        return 0
    if policy.kind == "fixed":
        return int(policy.delay_ms)
    factor = 2.0 if policy.factor is None else float(policy.factor)
    try:
        delay = policy.delay_ms * factor ** max(0, attempt - 1)
    except OverflowError:
        return MAX_RUN_AT_MS
    return int(round(min(delay, MAX_RUN_AT_MS)))


#: How far before MAX_RUN_AT_MS a worker's retry may land at the latest (the ack reads
#: its clock a little after the delay is worked out).
RETRY_MARGIN_MS = 86_400_000


def bounded_retry_delay(delay: int, now: int) -> int:
    """``delay`` cut so the retry runs no later than a day before MAX_RUN_AT_MS.

    Enqueue refuses backoff policies that reach past it; this keeps jobs stored
    before that check (or with a clock near the end of time) retryable.
    """
    return max(0, min(int(delay), MAX_RUN_AT_MS - RETRY_MARGIN_MS - now))


class Worker:
    """Runs the handlers of registered jobs for one store."""

    def __init__(
        self,
        store: RedisJobStore,
        jobs: Iterable[Job] | None = None,
        *,
        concurrency: int = 1,
        queues: Mapping[str, Mapping[str, int]] | None = None,
        lock_duration_ms: int = 30_000,
        lock_renew_interval_ms: int | None = None,
        stalled_interval_ms: int = 30_000,
        max_stalled_count: int = 1,
        on_lock_lost: str = "ignore",
        poll_interval_ms: int = 5_000,
        schedule_sweep_interval_ms: int = 15_000,
        history_sweep_interval_ms: int = 60_000,
        maintenance: bool = True,
        on_job_failure: Callable[[FailureReport], Any] | None = None,
        worker_id: str | None = None,
        run_sync_in: str = "thread",
        burst: bool = False,
        job_hooks: Iterable[tuple[JobHook, JobHook]] = (),
        clock: Any = None,
        registry: StoreRegistry | None = None,
        flow_sweep_interval_ms: int = 30_000,
        flow_sweeper: bool | None = None,
        prefetch: int | str = "auto",
        prefetch_wait_ms: int = PREFETCH_WAIT_MS,
        resolver: NameResolver | None = None,
        metrics: Any = None,
    ) -> None:
        if on_lock_lost not in ("ignore", "interrupt"):
            raise InvalidRequestError("on_lock_lost must be 'ignore' or 'interrupt'")
        if run_sync_in not in ("thread", "process"):
            raise InvalidRequestError("run_sync_in must be 'thread' or 'process'")
        self.store = store
        self.concurrency = max(1, int(concurrency))
        self.queue_overrides = {q: dict(v) for q, v in (queues or {}).items()}
        self.lock_duration_ms = int(lock_duration_ms)
        self.lock_renew_interval_ms = int(
            lock_renew_interval_ms
            if lock_renew_interval_ms is not None
            else max(1, lock_duration_ms // 2)
        )
        self.stalled_interval_ms = int(stalled_interval_ms)
        self.max_stalled_count = int(max_stalled_count)
        self.on_lock_lost = on_lock_lost
        self.poll_interval_ms = int(poll_interval_ms)
        self.schedule_sweep_interval_ms = int(schedule_sweep_interval_ms)
        self.history_sweep_interval_ms = int(history_sweep_interval_ms)
        self.maintenance = maintenance
        self.on_job_failure = on_job_failure
        self.worker_id = worker_id or "worker-" + secrets.token_hex(4)
        self.run_sync_in = run_sync_in
        self.burst = burst
        self.job_hooks = list(job_hooks)
        self.clock = clock or store._clock
        self.registry = registry or default_registry
        if self.registry.find(store.store_key) is None:
            self.registry.register(store)
        self.flow_sweep_interval_ms = int(flow_sweep_interval_ms)
        self.flow_sweeper = flow_sweeper
        #: "auto" (the batch adapts, see AutoPrefetch) or exactly that many jobs per claim.
        self.prefetch: int | str = _prefetch_setting(prefetch)
        if isinstance(prefetch_wait_ms, bool) or not isinstance(prefetch_wait_ms, int):
            raise InvalidRequestError("prefetch_wait_ms must be an integer of milliseconds")
        if prefetch_wait_ms < 1:
            raise InvalidRequestError("prefetch_wait_ms must be at least 1")
        self.prefetch_wait_ms = prefetch_wait_ms
        self.resolver = resolver
        # queue -> (names the resolver gave, when they were read); merged into claims.
        self._resolved: dict[str, tuple[frozenset[str], int]] = {}
        self._resolved_defs: dict[str, Job] = {}
        #: A store.worker_metrics.WorkerMetrics (Prometheus instruments), or None.
        self.metrics = metrics
        self._held: dict[str, _Held] = {}
        self._held_added: asyncio.Event | None = None
        self._relay_pulse: asyncio.Event | None = None
        self._handlers: dict[str, Job] = {}
        self._queues: dict[str, _QueueConfig] = {}
        self._tokens = itertools.count(1)
        self._in_flight: dict[str, _InFlight] = {}
        self._stopping: asyncio.Event | None = None
        #: Set while an operator has the worker quiet (takers claim nothing new).
        self._quiet: asyncio.Event | None = None
        #: Cleared when the quiet command is withdrawn (takers wait on it while quiet).
        self._claiming: asyncio.Event | None = None
        #: Set to announce the worker's presence now (its state changed).
        self._announce: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._io: ThreadPoolExecutor | None = None
        self._sync_pool: ThreadPoolExecutor | None = None
        self.stats = {
            "completed": 0,
            "failed": 0,
            "retried": 0,
            "cancelled": 0,
            "released": 0,
            "lock-lost": 0,
        }
        for definition in jobs or ():
            self.register(definition)

    # ------------------------------------------------------------ registration

    def register(
        self, definition: Job, *, concurrency: int | None = None, queue: str | None = None
    ) -> None:
        """Run ``definition``'s handler here (optionally consuming another queue)."""
        if definition.fn is None:
            raise InvalidRequestError(f"job {definition.name!r} has no handler to register")
        if definition.store_key != self.store.store_key:
            raise InvalidRequestError(
                f"job {definition.name!r} belongs to store {definition.store_key!r} but this worker "
                f"serves store {self.store.store_key!r}"
            )
        if definition.name in self._handlers:
            raise InvalidRequestError(f"job {definition.name!r} is registered twice on this worker")
        self._handlers[definition.name] = definition
        config = self._queues.setdefault(queue or definition.queue, _QueueConfig())
        config.names.add(definition.name)
        if config.concurrency is None and concurrency is not None:
            config.concurrency = concurrency  # the first registration for a queue decides

    def register_all(
        self, definitions: Iterable[Job] | None = None, queues: Iterable[str] | None = None
    ) -> int:
        """Register every known job of this worker's store (optionally only some queues)."""
        wanted = set(queues) if queues else None
        count = 0
        for definition in (
            definitions if definitions is not None else JOBS.for_store(self.store.store_key)
        ):
            if definition.fn is None or (wanted is not None and definition.queue not in wanted):
                continue
            if definition.name not in self._handlers:
                self.register(definition)
                count += 1
        return count

    def queue_concurrency(self, queue: str) -> int:
        override = self.queue_overrides.get(queue, {}).get("concurrency")
        config = self._queues.get(queue)
        value = override or (config.concurrency if config else None) or self.concurrency
        return max(1, int(value))

    @property
    def queues(self) -> dict[str, list[str]]:
        return {q: sorted(c.names) for q, c in self._queues.items()}

    # ------------------------------------------------------------ lifecycle

    def run(self, install_signal_handlers: bool = True) -> None:
        """Run until SIGTERM/SIGINT (or, in burst mode, until the queues are empty)."""
        asyncio.run(self.serve(install_signal_handlers=install_signal_handlers))

    async def serve(self, install_signal_handlers: bool = False) -> None:
        """The worker's main coroutine."""
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._quiet = asyncio.Event()
        self._claiming = asyncio.Event()
        self._claiming.set()
        self._announce = asyncio.Event()
        install_log_context()
        if self.resolver is not None:
            for queue in self.resolver.queues():
                self._queues.setdefault(queue, _QueueConfig())
        total = sum(self.queue_concurrency(q) for q in self._queues)
        self._io = ThreadPoolExecutor(max_workers=total + 4, thread_name_prefix="mq-io")
        self._sync_pool = ThreadPoolExecutor(max_workers=max(1, total), thread_name_prefix="mq-job")
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    self._loop.add_signal_handler(sig, self.request_stop)
        logger.info(
            "worker %s serving store %s: %s",
            self.worker_id,
            self.store.prefix,
            ", ".join(
                f"{q} x{self.queue_concurrency(q)} [{', '.join(sorted(c.names))}]"
                for q, c in self._queues.items()
            )
            or "no queues",
        )
        takers = [
            asyncio.create_task(self._taker(queue), name=f"taker {queue}#{n}")
            for queue in self._queues
            for n in range(self.queue_concurrency(queue))
        ]
        loops = [
            asyncio.create_task(
                self._every(self.lock_renew_interval_ms, self._heartbeat), name="heartbeat"
            ),
            # Announce this worker in the store's workers hash (dashboards, mqhealth --worker).
            asyncio.create_task(self._presence(), name="presence"),
            # An operator's quiet / stop command (the dashboard's workers page).
            asyncio.create_task(self._follow_control(), name="control"),
        ]
        self._held_added = asyncio.Event()
        if self.prefetch == "auto":
            loops.append(
                asyncio.create_task(self._bound_prefetch_waits(), name="prefetch wait bound")
            )
        self._relay_pulse = asyncio.Event()
        if self.maintenance:
            loops.append(asyncio.create_task(self._relay_loop(), name="outbox relay"))
            hosts_flows = any(getattr(d, "flow", None) is not None for d in self._handlers.values())
            if self.flow_sweeper or (self.flow_sweeper is None and hosts_flows):
                loops.append(
                    asyncio.create_task(
                        self._every(self.flow_sweep_interval_ms, self._sweep_flows), name="flows"
                    )
                )
            loops += [
                asyncio.create_task(
                    self._every(self.stalled_interval_ms, self._recover_stalled), name="stalled"
                ),
                asyncio.create_task(
                    self._every(self.schedule_sweep_interval_ms, self._tick_schedules),
                    name="schedules",
                ),
                asyncio.create_task(
                    self._every(self.history_sweep_interval_ms, self._sweep_history), name="history"
                ),
            ]
        try:
            if self.burst:
                await asyncio.gather(*takers)
            else:
                await self._stopping.wait()
        finally:
            self._stopping.set()
            for entry in list(self._in_flight.values()):
                entry.interrupt("shutdown")
            await asyncio.gather(*takers, return_exceptions=True)
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            self._io.shutdown(wait=True)
            self._sync_pool.shutdown(wait=False, cancel_futures=True)
            logger.info("worker %s stopped: %s", self.worker_id, self.stats)

    def request_stop(self) -> None:
        """Stop claiming; interrupt and release in-flight jobs.  Safe from any thread."""
        loop, stopping = self._loop, self._stopping
        if loop is None or stopping is None or loop.is_closed():
            return
        if threading.current_thread() is threading.main_thread() and loop.is_running():
            with contextlib.suppress(RuntimeError):
                if asyncio.get_running_loop() is loop:
                    stopping.set()
                    return
        loop.call_soon_threadsafe(stopping.set)

    @property
    def stopping(self) -> bool:
        return self._stopping is not None and self._stopping.is_set()

    @property
    def quiet(self) -> bool:
        """An operator told this worker to go quiet: it claims nothing new until resumed."""
        return self._quiet is not None and self._quiet.is_set()

    @property
    def state(self) -> str:
        """What the presence record says: "running", "quiet" or "stopping"."""
        if self.stopping:
            return "stopping"
        return "quiet" if self.quiet else "running"

    def _apply_control(self, command: str | None) -> None:
        """Follow the operator's command: "stop", "quiet", or none (claim as usual)."""
        assert self._quiet is not None and self._claiming is not None
        if command == "stop":
            if not self.stopping:
                logger.info(
                    "worker %s: stop requested by an operator; shutting down", self.worker_id
                )
                self.request_stop()
            return
        if command == "quiet" and not self._quiet.is_set():
            logger.info(
                "worker %s: quiet requested by an operator; claiming nothing new", self.worker_id
            )
            self._quiet.set()
            self._claiming.clear()
        elif command != "quiet" and self._quiet.is_set():
            logger.info("worker %s: resumed by an operator; claiming again", self.worker_id)
            self._quiet.clear()
            self._claiming.set()
        else:
            return
        if self._announce is not None:
            self._announce.set()

    async def _follow_control(self) -> None:
        """Read the operator's command for this worker every CONTROL_INTERVAL_MS."""
        while True:
            try:
                command = await self._io_call(self.store.worker_control, self.worker_id)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.debug("reading the worker's control command failed", exc_info=True)
            else:
                self._apply_control(command)
            await sleep_ms(self.clock, CONTROL_INTERVAL_MS)

    async def _wait_while_quiet(self) -> None:
        """Until the quiet command is withdrawn or the worker stops."""
        assert self._stopping is not None and self._claiming is not None
        await first_of(self._claiming.wait(), self._stopping.wait())

    # ------------------------------------------------------------ store calls

    async def _io_call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        assert self._loop is not None and self._io is not None
        return await self._loop.run_in_executor(self._io, lambda: fn(*args, **kwargs))

    async def _store_call(
        self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """A store call with the runtime's retry policy for JobStoreError.

        200 ms, x1.5 per retry, each delay capped at 30 s, at most 8 retries;
        then the error propagates (loops log it and carry on).
        """
        delay = 200.0
        for attempt in range(9):
            try:
                return await self._io_call(fn, *args, **kwargs)
            except JobStoreError as exc:
                if attempt == 8:
                    raise
                logger.warning("%s failed (%s); retrying in %d ms", what, exc, delay)
                await sleep_ms(self.clock, delay)
                delay = min(delay * 1.5, 30_000)
        raise AssertionError("unreachable")

    def _mint(self) -> str:
        return f"{self.worker_id}:{next(self._tokens)}"

    # ------------------------------------------------------------ takers

    async def _taker(self, queue: str) -> None:
        """Claim -> run -> ack, with the acks of a batch and the next claim in one call."""
        assert self._stopping is not None and self._held_added is not None
        auto = AutoPrefetch(self.prefetch_wait_ms) if self.prefetch == "auto" else None
        held: list[_Held] = []
        acks: list[tuple[JobRecord, str, AckOutcome]] = []
        while not self._stopping.is_set():
            try:
                if not held and self.quiet:
                    # Quiet: deliver the outcomes we have (they ride on claims otherwise),
                    # then claim nothing until resumed or stopped.
                    if acks:
                        await self._flush_and_claim(queue, acks, 0)
                        acks = []
                    await self._wait_while_quiet()
                    continue
                if not held:
                    if self.resolver is not None and self._resolver_stale(queue):
                        await self._refresh_resolved(queue)
                    want = auto.want() if auto is not None else cast(int, self.prefetch)
                    batch = await self._flush_and_claim(queue, acks, want)
                    acks = []
                    if batch is None:
                        await sleep_ms(self.clock, min(self.poll_interval_ms, 1000))
                        continue
                    now = self.clock()
                    if auto is not None:
                        throttled = batch.empty.throttled if batch.empty is not None else None
                        auto.claimed(want, len(batch.jobs), throttled, now)
                    for job, token in batch.jobs:
                        state = self._held[job.id] = _Held(job, token, now)
                        held.append(state)
                    if len(held) > 1:
                        self._held_added.set()
                    if not held:
                        assert batch.empty is not None
                        if self.resolver is not None and await self._refresh_resolved(queue):
                            continue  # new names to claim: try again before idling
                        if (
                            self.burst
                            and batch.empty.throttled is None
                            and not self._due_soon(batch.empty)
                        ):
                            return
                        await self._idle(queue, batch.empty)
                        continue
                if self._stopping.is_set():
                    break
                state = held.pop(0)
                job, token = state.job, state.token
                if state.released:
                    if auto is not None:
                        auto.overheld()
                    continue  # the wait bound handed it back: another worker may take it
                self._held.pop(job.id, None)
                if state.lost:
                    logger.warning("prefetched job %s lost its lock before it ran; skipped", job.id)
                    continue
                if state.cancelled:
                    self.stats["cancelled"] += 1
                    acks.append((job, token, Cancelled()))
                    continue
                started = self.clock()
                outcome = await self._process(job, token)
                if auto is not None:
                    auto.ran(self.clock() - started)
                if outcome is not None:
                    acks.append((job, token, outcome))
            except asyncio.CancelledError:
                raise
            except Exception:
                if self._io is None or self._io._shutdown:
                    return
                logger.exception("taker for queue %s: unexpected error; carrying on", queue)
                await sleep_ms(self.clock, min(self.poll_interval_ms, 1000))
        # Stopping: deliver the outcomes we have, hand back what never ran.
        if acks:
            await self._flush_and_claim(queue, acks, 0)
        for state in held:
            if not state.released:
                self._held.pop(state.job.id, None)
                await self._release(state.job, state.token)

    def _waiting(self) -> Iterable[_Held]:
        """The prefetched jobs the wait bound applies to, oldest claim first (_held keeps
        claim order): lost ones are skipped at their turn, cancelled ones acked."""
        return (s for s in self._held.values() if not s.lost and not s.cancelled)

    async def _bound_prefetch_waits(self) -> None:
        """Hand back each auto-prefetched job whose wait passes ``prefetch_wait_ms`` while its
        taker is still busy with an earlier job, so that an idle worker can run it; no
        attempt is used.  Sleeps on the clock only while such jobs are held."""
        assert self._held_added is not None
        added = self._held_added
        while True:
            oldest = next(iter(self._waiting()), None)
            if oldest is None:
                added.clear()
                await added.wait()
                continue
            await sleep_ms(
                self.clock, max(0, oldest.claimed_at + self.prefetch_wait_ms + 1 - self.clock())
            )
            try:
                await self._release_late()
            except Exception:
                logger.exception("handing back prefetched jobs failed; carrying on")

    async def _release_late(self) -> None:
        """Release the prefetched jobs that have waited longer than ``prefetch_wait_ms``."""
        cutoff = self.clock() - self.prefetch_wait_ms - 1
        late: list[_Held] = []
        for state in self._waiting():
            if state.claimed_at > cutoff:
                break
            late.append(state)
        for state in late:
            del self._held[state.job.id]
            state.released = True
        if late:
            logger.info(
                "handing back %d prefetched job(s) that waited over %d ms: their taker is busy",
                len(late),
                self.prefetch_wait_ms,
            )
        for state in late:
            await self._release(state.job, state.token)

    async def _flush_and_claim(
        self, queue: str, acks: list[tuple[JobRecord, str, AckOutcome]], want: int
    ) -> ClaimBatch | None:
        """Ack ``acks`` and claim up to ``want`` jobs in one round trip (store retries apply)."""
        try:
            batch: ClaimBatch = await self._store_call(
                "ack+claim",
                self.store.ack_and_claim_many,
                [(job.id, token, outcome) for job, token, outcome in acks],
                queue=queue,
                names=self._claim_names(queue),
                tokens=[self._mint() for _ in range(want)],
                lock_duration_ms=self.lock_duration_ms,
            )
        except JobStoreError as exc:
            if acks:
                logger.error(
                    "acks of %d job(s) dropped after retries (%s); stall recovery will take over",
                    len(acks),
                    exc,
                )
            else:
                logger.error("claim on queue %s failed after retries: %s", queue, exc)
            return None
        for (job, _token, outcome), error in zip(acks, batch.ack_errors, strict=True):
            if error is not None:
                logger.warning(
                    "ack dropped (%s) for job %s: another worker owns it",
                    type(error).__name__,
                    job.id,
                )
            else:
                self._pulse_relay(job, outcome)
        return batch

    def _claim_names(self, queue: str) -> list[str]:
        names = self._queues[queue].names
        resolved = self._resolved.get(queue)
        if resolved is not None and resolved[0]:
            return sorted(names | resolved[0])
        return sorted(names)

    def _resolver_stale(self, queue: str) -> bool:
        resolved = self._resolved.get(queue)
        return resolved is None or self.clock() - resolved[1] >= RESOLVER_REFRESH_MS

    async def _refresh_resolved(self, queue: str) -> bool:
        """Re-read the resolver's names for ``queue``; True when they changed."""
        assert self.resolver is not None
        resolver = self.resolver
        try:
            names = await self._io_call(lambda: frozenset(resolver.names(queue)))
        except Exception:
            logger.exception("name resolver failed to list the names of queue %s", queue)
            return False
        previous = self._resolved.get(queue)
        self._resolved[queue] = (names, self.clock())
        return previous is None or previous[0] != names

    def _definition(self, name: str) -> Job | None:
        definition = self._handlers.get(name)
        if definition is not None or self.resolver is None:
            return definition
        definition = self._resolved_defs.get(name)
        if definition is None:
            definition = self._resolved_defs[name] = self.resolver.resolve(name)
        return definition

    def _due_soon(self, empty: Empty) -> bool:
        return empty.next_run_at is not None and empty.next_run_at <= self.clock()

    async def _idle(self, queue: str, empty: Empty) -> None:
        """Sleep until a wake for this queue, the next delayed job, the time a queue limit
        admits the next claim, the poll timer, or stop.  A limited queue's ack wakes one
        claimer per process (store/wake.py SLOT_FREED), so a full queue is not polled."""
        assert self._stopping is not None
        wait_ms: float = self.poll_interval_ms
        for at in (empty.next_run_at, empty.throttled_until):
            if at is not None:
                wait_ms = min(wait_ms, max(0, at - self.clock()))
        if wait_ms <= 0:
            await asyncio.sleep(0)
            return
        await first_of(
            self.store._wake.wait_async([queue], empty.wake_token),
            sleep_ms(self.clock, wait_ms),
            self._stopping.wait(),
        )

    async def _ack(self, job: JobRecord, token: str, outcome: AckOutcome) -> bool:
        try:
            await self._store_call("ack", self.store.ack, job.id, token, outcome)
            return True
        except (LockLostError, JobNotFoundError) as exc:
            logger.warning(
                "ack dropped (%s) for job %s: another worker owns it", type(exc).__name__, job.id
            )
        except JobStoreError as exc:
            logger.error(
                "ack dropped for job %s after retries (%s); stall recovery will take over",
                job.id,
                exc,
            )
        return False

    # ------------------------------------------------------------ one job

    async def _process(self, job: JobRecord, token: str) -> AckOutcome | None:
        """Run one claimed job; return the outcome to ack, or None when nothing is to be acked."""
        definition = self._definition(job.name)
        if definition is None:
            await self._release(job, token)
            return None
        ctx = JobContext(
            job_id=job.id,
            name=job.name,
            queue=job.queue,
            attempt=job.attempts_made + 1,
            attempts_max=job.attempts_max,
            record=job,
            clock=self.clock,
            worker_id=self.worker_id,
            store=self.store,
            lock_token=token,
        )
        flow: Flow | None = getattr(definition, "flow", None)
        if job.flow is not None and flow is None:
            failure = InvalidRequestError(
                f"job {job.id} carries flow results but {job.name!r} is registered as a plain job; "
                "register it as a flow (then retry the job) so its recorded child results are not discarded"
            )
            await self._report(definition, job, None, failure, will_retry=False)
            return Fail(encode_failure(failure, worker_id=self.worker_id))
        entry = _InFlight(job, token, ctx, deadline=self.clock() + self.lock_duration_ms)
        metrics = self.metrics
        if metrics is not None:
            metrics.started(job.name, job.queue)
        started = time.perf_counter()
        outcome: AckOutcome | None = None
        error: BaseException | None = None
        try:
            with attempt_span(job, ctx.attempt) as span:
                outcome, error = await self._attempt(definition, job, token, flow, entry)
                finish_span(span, self._outcome_label(outcome, entry), error)
        finally:
            if metrics is not None:
                metrics.finished(
                    job.name,
                    job.queue,
                    self._outcome_label(outcome, entry),
                    time.perf_counter() - started,
                )
        return outcome

    async def _attempt(
        self, definition: Job, job: JobRecord, token: str, flow: Flow | None, entry: _InFlight
    ) -> tuple[AckOutcome | None, BaseException | None]:
        """Run the handler and decide the outcome to ack (with the handler's error, if any)."""
        self._in_flight[job.id] = entry
        try:
            error, value = await self._run(definition, job, entry)
            if flow is not None and job.flow is None and error is None:
                try:
                    specs = flow.build_specs(self.store, job, value)
                except FlowDefinitionError as exc:
                    error = exc
                else:
                    entry.outcome = "fanned-out"
                    await self._fan_out(flow, job, token, specs)
                    return None, None
        finally:
            self._in_flight.pop(job.id, None)
        return await self._decide(definition, job, token, entry, error, value), error

    def _outcome_label(self, outcome: AckOutcome | None, entry: _InFlight) -> str:
        """The run's outcome in the words of the metrics (completed, failed, retried...)."""
        if isinstance(outcome, Complete):
            return "completed"
        if isinstance(outcome, Fail):
            return "failed"
        if isinstance(outcome, Retry):
            return "retried"
        if isinstance(outcome, Cancelled):
            return "cancelled"
        if entry.outcome is not None:
            return entry.outcome
        if entry.cancelling:
            return "cancelled"
        if entry.interrupted_by == "lock-lost":
            return "lock-lost"
        return "released"

    async def _fan_out(
        self, flow: Flow, job: JobRecord, token: str, specs: list[FlowChildSpec]
    ) -> None:
        """Ack the FanOut; only if it landed and the parent is parked, enqueue the children."""
        try:
            await self._store_call(
                "fan-out ack", self.store.ack, job.id, token, FanOut(flow.fail_fast, specs)
            )
        except (LockLostError, JobNotFoundError) as exc:
            logger.warning(
                "fan-out of %s dropped (%s): another worker owns it; no children enqueued",
                job.id,
                type(exc).__name__,
            )
            return None
        parent = await self._io_call(self.store.get_job, job.id)
        if parent is not None and parent.state == "waiting-children":
            await self._io_call(enqueue_children, self.registry, specs)
        logger.info("job %s (%s) fanned out %d children", job.id, job.name, len(specs))
        return None

    async def _run(
        self, definition: Job, job: JobRecord, entry: _InFlight
    ) -> tuple[BaseException | None, Any]:
        """Run the handler under its timeout; returns (exception or None, value)."""
        coro = self._invoke(definition, job, entry)
        entry.task = asyncio.ensure_future(coro)
        if self._stopping is not None and self._stopping.is_set():
            entry.interrupt("shutdown")
        timer = None
        if job.timeout_ms:
            timer = asyncio.ensure_future(sleep_ms(self.clock, job.timeout_ms))
            await asyncio.wait({entry.task, timer}, return_when=asyncio.FIRST_COMPLETED)
            if not entry.task.done():
                entry.interrupt("timeout")
                await asyncio.wait({entry.task})
                timer.cancel()
                return JobTimeoutError(
                    f"job {job.id} ({job.name}) exceeded its timeout of {job.timeout_ms} ms"
                ), None
            timer.cancel()
        try:
            return None, await asyncio.shield(entry.task)
        except asyncio.CancelledError as exc:
            if not entry.task.cancelled():
                raise  # the taker itself is being cancelled
            return exc, None
        except BaseException as exc:  # handler failures of every kind are data here
            return exc, None

    def _target(
        self, definition: Job, job: JobRecord
    ) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        """What to call for this run: the handler, or a flow's fan-out / collect phase."""
        flow: Flow | None = getattr(definition, "flow", None)
        if flow is None:
            assert definition.fn is not None
            return definition.fn, (job.payload,)
        if job.flow is None:
            if flow.fan_out_fn is None:
                raise InvalidRequestError(f"flow {flow.name!r} has no fan_out function")
            return flow.fan_out_fn, (job.payload,)
        if flow.collect_fn is None:
            raise InvalidRequestError(f"flow {flow.name!r} has no collect function")
        return flow.collect_fn, (job.payload, FlowResults(self.store, job.id, job.flow))

    async def _invoke(self, definition: Job, job: JobRecord, entry: _InFlight) -> Any:
        fn, args = self._target(definition, job)
        if inspect.iscoroutinefunction(fn):
            token = set_current_job(entry.ctx)
            try:
                return await fn(*args)
            except (SystemExit, KeyboardInterrupt) as exc:
                raise _carried(exc, entry) from exc
            finally:
                reset_current_job(token)
        assert self._loop is not None and self._sync_pool is not None
        if self.run_sync_in == "process":
            return await self._loop.run_in_executor(
                self._sync_pool, self._run_in_child, fn, args, entry
            )
        entry.in_thread = True
        # The pool thread runs in a copy of this task's context: the attempt's span
        # (and any other context variable) is current inside the handler too.
        context = contextvars.copy_context()
        return await self._loop.run_in_executor(
            self._sync_pool, context.run, self._run_in_thread, fn, args, entry
        )

    def _run_in_thread(
        self, fn: Callable[..., Any], args: tuple[Any, ...], entry: _InFlight
    ) -> Any:
        token = set_current_job(entry.ctx)
        try:
            for before, _ in self.job_hooks:
                before()
            entry.ctx.check_interrupted()
            return fn(*args)
        except (SystemExit, KeyboardInterrupt) as exc:
            raise _carried(exc, entry) from exc
        finally:
            for _, after in self.job_hooks:
                with contextlib.suppress(Exception):
                    after()
            reset_current_job(token)

    def _run_in_child(self, fn: Callable[..., Any], args: tuple[Any, ...], entry: _InFlight) -> Any:
        """Run a sync handler in a forked child that the worker may kill."""
        ctx = multiprocessing.get_context("fork")
        parent_end, child_end = ctx.Pipe(duplex=False)
        process = ctx.Process(
            target=_child_main, args=(fn, args, entry.ctx, child_end), daemon=True
        )
        process.start()
        entry.process = process
        child_end.close()
        if entry.interrupted_by:
            process.kill()
        try:
            message = parent_end.recv() if parent_end.poll(None) else None
        except EOFError:
            message = None
        process.join()
        if message is None:
            reason = entry.interrupted_by or f"child process exited with code {process.exitcode}"
            raise JobInterrupted(reason)
        kind, payload = message
        if kind == "ok":
            return payload
        raise _ChildFailure(payload)

    async def _decide(
        self,
        definition: Job,
        job: JobRecord,
        token: str,
        entry: _InFlight,
        error: BaseException | None,
        value: Any,
    ) -> AckOutcome | None:
        # Interruptions the worker asked for decide first: a delivered cancel is
        # acked Cancelled, a shutdown releases, a lost lock acks nothing.
        interrupted = isinstance(error, asyncio.CancelledError | JobInterrupted)
        if entry.cancelling and interrupted:
            self.stats["cancelled"] += 1
            await self._ack(job, token, Cancelled())
            self._pulse_relay(job, Cancelled())
            return None
        if (self.stopping or entry.interrupted_by == "shutdown") and error is not None:
            # Shutdown wins over a lost lock: hand the job back (a refused release is harmless).
            await self._release(job, token)
            return None
        if entry.interrupted_by == "lock-lost" and interrupted:
            self.stats["lock-lost"] += 1
            logger.warning("job %s stopped: its lock was lost; nothing acked", job.id)
            return None
        if error is None:
            try:
                text = codec.dumps(value, f"handler result of {job.name}")
            except JobStoreError as exc:
                refused = InvalidRequestError(exc.message)
                self.stats["failed"] += 1
                await self._report(definition, job, entry, refused, will_retry=False)
                return Fail(encode_failure(refused, worker_id=self.worker_id))
            size = over_limit(text, self.store.max_value_bytes)
            if not size:
                self.stats["completed"] += 1
                return Complete(value)
            # A result the store would refuse: this attempt fails, and the job's
            # retry policy (attempts, backoff, retryable) decides what follows.
            error = ValueTooLargeError("result", size, self.store.max_value_bytes)
        if isinstance(error, JobTimeoutError):
            failure: BaseException = error
            kind = "timeout"
        elif interrupted:
            failure = JobInterrupted("the handler interrupted itself")
            kind = "interrupted"
        else:
            failure = error
            kind = "error"
        exit_value = (
            error.exit
            if isinstance(error, _ChildFailure)
            else encode_failure(failure, kind=kind, worker_id=self.worker_id)
        )
        unrecoverable = is_unrecoverable(failure) or (
            isinstance(error, _ChildFailure) and error.unrecoverable
        )
        if not unrecoverable and definition.retryable is not None and kind == "error":
            try:
                unrecoverable = not definition.retryable(failure)
            except Exception:  # a throwing predicate means "retryable"
                logger.exception(
                    "retryable predicate of %s raised; treating the failure as retryable", job.name
                )
        attempt = entry.ctx.attempt
        if unrecoverable or attempt >= job.attempts_max:
            self.stats["failed"] += 1
            await self._report(definition, job, entry, failure, will_retry=False)
            return Fail(exit_value)
        delay = bounded_retry_delay(backoff_delay_ms(job, attempt), self.store.now())
        self.stats["retried"] += 1
        await self._report(definition, job, entry, failure, will_retry=True, delay=delay)
        return Retry(delay, exit_value)

    def _pulse_relay(self, job: JobRecord, outcome: AckOutcome | None) -> None:
        """A flow child reached a terminal state: deliver its report now, not at the next timer."""
        if (
            job.parent is not None
            and self._relay_pulse is not None
            and not isinstance(outcome, Retry)
        ):
            self._relay_pulse.set()

    async def _release(self, job: JobRecord, token: str) -> None:
        self.stats["released"] += 1
        try:
            await self._store_call("release", self.store.release, job.id, token)
        except (LockLostError, JobNotFoundError) as exc:
            logger.warning("release dropped (%s) for job %s", type(exc).__name__, job.id)
        except JobStoreError as exc:
            logger.error(
                "release of job %s failed after retries (%s); stall recovery will take over",
                job.id,
                exc,
            )

    async def _report(
        self,
        definition: Job | None,
        job: JobRecord,
        entry: _InFlight | None,
        cause: Any,
        *,
        will_retry: bool,
        delay: int = 0,
    ) -> None:
        attempt = entry.ctx.attempt if entry else job.attempts_made
        if will_retry:
            logger.warning(
                "job %s (%s) failed attempt %d of %d; retrying in %d ms: %s",
                job.id,
                job.name,
                attempt,
                job.attempts_max,
                delay,
                cause,
            )
        else:
            logger.error(
                "job %s (%s) failed terminally (attempt %d of %d): %s",
                job.id,
                job.name,
                attempt,
                job.attempts_max,
                cause,
            )
        if self.on_job_failure is None:
            return
        report = FailureReport(
            job.id, job.name, job.queue, attempt, job.attempts_max, will_retry, cause
        )
        try:
            result = self.on_job_failure(report)
            if isinstance(result, Awaitable):
                await result
        except Exception:
            logger.exception("on_job_failure hook raised; ignored")

    # ------------------------------------------------------------ background loops

    async def _every(self, interval_ms: int, fn: Callable[[], Awaitable[None]]) -> None:
        """sleep(interval) -> one pass -> log any failure -> repeat (first pass after one interval)."""
        while True:
            await sleep_ms(self.clock, interval_ms)
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception(
                    "%s pass failed; carrying on", getattr(fn, "__name__", "maintenance")
                )

    async def _heartbeat(self) -> None:
        entries = [e for e in self._in_flight.values() if not e.lost]
        held = [h for h in self._held.values() if not h.lost]
        if not entries and not held:
            return
        now = self.clock()
        try:
            result = await self._store_call(
                "lock renewal",
                self.store.extend_locks,
                [(e.job.id, e.token) for e in entries] + [(h.job.id, h.token) for h in held],
                self.lock_duration_ms,
            )
        except JobStoreError as exc:
            logger.warning("lock renewal failed: %s", exc)
            now = self.clock()
            for e in entries:
                if e.deadline <= now and not e.expired_reported:
                    e.expired_reported = True
                    logger.warning(
                        "job %s: locks expired before the heartbeat could reach the store; jobs may run twice",
                        e.job.id,
                    )
                    if self.metrics is not None:
                        self.metrics.locks_lost()
                    if self.on_lock_lost == "interrupt":
                        e.lost = True
                        e.interrupt("lock-lost")
            return
        lost, cancel = set(result.lost), set(result.cancel_requested)
        for h in held:
            if h.job.id in lost:
                h.lost = True
                if self.metrics is not None:
                    self.metrics.locks_lost()
            elif h.job.id in cancel:
                h.cancelled = True
        for e in entries:
            if e.job.id in lost:
                if self._in_flight.get(e.job.id) is not e:
                    continue  # the run ended while the heartbeat was in flight
                e.lost = True
                if self.metrics is not None and not e.expired_reported:
                    self.metrics.locks_lost()
                logger.warning("failed to renew locks; jobs may run twice: %s", e.job.id)
                if self.on_lock_lost == "interrupt":
                    e.interrupt("lock-lost")
            elif e.job.id in cancel:
                if not e.cancelling:
                    # The store repeats the flag every heartbeat; deliver it once and let
                    # the handler's cleanup run undisturbed.
                    logger.info("job %s: cancel requested; interrupting it", e.job.id)
                    e.cancelling = True
                    e.interrupt("cancel")
            else:
                e.deadline = now + self.lock_duration_ms

    def _presence_in_flight(self) -> list[InFlightJob]:
        running = sorted(
            self._in_flight.values(), key=lambda e: (e.job.processed_at or 0, e.job.id)
        )
        return [
            InFlightJob(e.job.id, e.job.queue, e.job.name, int(e.job.processed_at or 0))
            for e in running
        ]

    async def _presence(self) -> None:
        """Announce this worker every 10 s so dashboards and health probes see it.

        The record (one field of the store's workers hash) names the host, pid, queues
        with their concurrency, routable store keys, the jobs in flight (bounded), the
        outcome totals, the start time and when it expires (three intervals after this
        announcement); it is removed when the worker stops.
        """
        started = self.clock()
        try:
            while True:
                try:
                    await self._io_call(
                        self.store.register_worker,
                        self.worker_id,
                        queues=self.queues,
                        routes=self.registry.routable_keys(),
                        started_at=started,
                        concurrency={q: self.queue_concurrency(q) for q in self._queues},
                        in_flight=self._presence_in_flight(),
                        totals=dict(self.stats),
                        ttl_ms=3 * PRESENCE_INTERVAL_MS,
                        state=self.state,
                        maintenance=self.maintenance,
                    )
                except Exception:
                    logger.debug("announcing worker presence failed", exc_info=True)
                await self._presence_pause(self._presence_mark())
        finally:
            with contextlib.suppress(Exception):
                self.store.unregister_worker(self.worker_id)

    def _presence_mark(self) -> tuple[Any, ...]:
        """What an announcement says that changes as the worker works."""
        return (tuple(self.stats.values()), tuple(self._in_flight))

    async def _presence_pause(self, announced: tuple[Any, ...]) -> None:
        """Until the next announcement: PRESENCE_INTERVAL_MS; at once when the worker's state
        changed (quiet, resumed); after PRESENCE_REFRESH_MS when its totals or jobs in flight
        changed since ``announced``."""
        assert self._announce is not None
        announce = self._announce
        waited = 0
        while waited < PRESENCE_INTERVAL_MS:
            step = min(PRESENCE_REFRESH_MS, PRESENCE_INTERVAL_MS - waited)
            await first_of(announce.wait(), sleep_ms(self.clock, step))
            if announce.is_set():
                announce.clear()
                return
            waited += step
            if self._presence_mark() != announced:
                return

    async def _recover_stalled(self) -> None:
        recovered = await self._store_call(
            "stall recovery", self.store.recover_stalled, self.max_stalled_count
        )
        if not recovered:
            return
        if self.metrics is not None:
            failed = sum(1 for r in recovered if r.failed)
            self.metrics.stalled(len(recovered) - failed, failed)
        logger.warning(
            "recovered stalled jobs: %s",
            ", ".join(f"{r.id}{' (failed)' if r.failed else ''}" for r in recovered),
        )
        for row in recovered:
            if not row.failed:
                continue
            record = await self._io_call(self.store.get_job, row.id)
            if record is not None:
                definition = self._handlers.get(record.name)
                await self._report(definition, record, None, record.failed_reason, will_retry=False)

    async def _tick_schedules(self) -> None:
        fired = await self._io_call(tick_due_schedules, self.store)
        if fired:
            logger.info("fired %d scheduled job(s)", fired)

    async def _relay_loop(self) -> None:
        """Deliver child reports: on every pulse, and at least every flow sweep interval."""
        assert self._relay_pulse is not None
        pulse = self._relay_pulse
        while True:
            await first_of(pulse.wait(), sleep_ms(self.clock, self.flow_sweep_interval_ms))
            pulse.clear()
            try:
                delivered = await self._io_call(relay_outbox, self.store, self.registry)
                if delivered:
                    logger.info("relayed %d child report(s)", delivered)
            except Exception:
                logger.exception("outbox relay pass failed; carrying on")

    async def _sweep_flows(self) -> None:
        reconciled, cascaded = await self._io_call(
            sweep_flows, self.store, self.registry, self.flow_sweep_interval_ms
        )
        if reconciled or cascaded:
            logger.info(
                "flow sweep: %d child(ren) reconciled, %d cancel(s) cascaded", reconciled, cascaded
            )

    async def _sweep_history(self) -> None:
        await self._io_call(self.store.prune_stats)
        swept = await self._store_call("history sweep", self.store.sweep_state)
        pruned = await self._store_call("dedupe sweep", self.store.sweep_dedupes)
        if swept["deleted"] or pruned:
            logger.info(
                "history sweep deleted %d job(s); dedupe sweep pruned %d key(s)",
                swept["deleted"],
                pruned,
            )


class _ChildFailure(Exception):
    def __init__(self, payload: Mapping[str, Any]) -> None:
        super().__init__(payload.get("message", "child process failed"))
        self.exit = payload["exit"]
        self.unrecoverable = bool(payload.get("unrecoverable"))


def _carried(exc: BaseException, entry: _InFlight) -> _ChildFailure:
    """A handler's SystemExit/KeyboardInterrupt as a plain failure of its job.

    Re-raised as is, asyncio would let it stop the worker's event loop; carried, the
    job fails with that exception's type and traceback and the worker carries on.
    """
    return _ChildFailure(
        {
            "exit": encode_failure(exc, worker_id=entry.ctx.worker_id),
            "message": f"{type(exc).__name__}: {exc}",
            "unrecoverable": is_unrecoverable(exc),
        }
    )


def _child_main(fn: Callable[..., Any], args: tuple[Any, ...], ctx: JobContext, conn: Any) -> None:
    """Entry point of the per-job child process (fork)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if ctx.store is not None:
        # The parent's sockets are not ours: progress and log lines use fresh ones.
        ctx.store.after_fork()
    set_current_job(ctx)
    try:
        value = fn(*args)
        json.dumps(value, allow_nan=False)
        conn.send(("ok", value))
    except BaseException as exc:  # report every failure to the parent
        conn.send(
            (
                "error",
                {
                    "exit": encode_failure(exc, worker_id=ctx.worker_id),
                    "message": str(exc),
                    "unrecoverable": is_unrecoverable(exc),
                },
            )
        )
    finally:
        conn.close()
        os._exit(0)
