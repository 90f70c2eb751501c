"""Job definitions and the producer API.

A :class:`Job` names a kind of work (its name is the persisted tag: keep it
stable), carries the defaults persisted on every job it enqueues (queue,
attempts, backoff, timeout, priority, delay, keep, dedupe, metadata
projection, idempotency key) and optionally the handler that runs it::

    @job("SendInvite", queue="mail", attempts=3, backoff=("exponential", 1_000))
    def send_invite(payload):
        ...

    job_id = send_invite.enqueue({"employee": "e-1"}, delay_ms=60_000)
    result = send_invite.execute({"employee": "e-2"}, timeout_s=30)

Producers never need a worker: every verb talks to the job's store, found by
its store key in a :class:`~store.registry.StoreRegistry`.  Payloads and
results are JSON; a payload that cannot be encoded is refused at enqueue.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import secrets
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from store import codec
from store.clock import blocking_sleep_ms, sleep_ms
from store.errors import (
    InvalidRequestError,
    JobCancelledError,
    JobNotFoundError,
)
from store.events import PollWaits
from store.records import (
    MAX_RUN_AT_TEXT,
    MISSING,
    TERMINAL_STATES,
    AttemptRecord,
    BackoffPolicy,
    DedupePolicy,
    EnqueueRequest,
    EnqueueResult,
    JobRecord,
    KeepPolicy,
    ScheduleRecord,
)
from store.registry import StoreRegistry, default_registry
from store.schedules import first_run_at, validate_cadence
from store.tracing import current_trace_context

if TYPE_CHECKING:
    from store.aio import AsyncRedisJobStore
    from store.redis_store import RedisJobStore


# ---------------------------------------------------------------- running-job context


class JobInterrupted(BaseException):
    """Raised inside a handler that cooperates with a cancel, timeout or shutdown request."""


@dataclass
class JobContext:
    """The running attempt, readable anywhere in a handler's call graph via :func:`current_job`."""

    job_id: str
    name: str
    queue: str
    attempt: int
    attempts_max: int
    record: JobRecord
    clock: Any
    interrupt_event: threading.Event = field(default_factory=threading.Event)
    interrupt_reason: str | None = None
    #: The id of the worker running this attempt ("" outside a worker).
    worker_id: str = ""
    #: The store the run was claimed from and the run's lock token: progress and log
    #: lines are written under that token (None outside a worker: they are dropped).
    store: Any = field(default=None, repr=False)
    lock_token: str = field(default="", repr=False)

    def progress(self, value: Any) -> bool:
        """Report how far the run is: a number 0-100 or a small JSON object (at most 1 KB).

        Stored on the job (``JobRecord.progress``) and sent as a ``progress`` event.  Returns
        False, writing nothing, when this run no longer holds the job's lock.  A blocking
        Redis call: an async handler may run it in a thread (``asyncio.to_thread``).
        """
        if self.store is None:
            return False
        return bool(self.store.set_progress(self.job_id, self.lock_token, value))

    def log(self, message: Any) -> bool:
        """Append a line to the job's log (``jobs.job_logs``) and send it as a ``log`` event.

        The log keeps the newest lines within the store's caps; a line longer than 8 KB is
        cut.  Returns False, writing nothing, when this run no longer holds the job's lock.
        """
        if self.store is None:
            return False
        return bool(self.store.append_log(self.job_id, self.lock_token, message))

    @property
    def interrupted(self) -> bool:
        """True once the worker asked this run to stop (cancel, timeout, shutdown, lost lock)."""
        return self.interrupt_event.is_set()

    def check_interrupted(self) -> None:
        """Sync handlers call this at safe points; it raises :class:`JobInterrupted` when asked to stop."""
        if self.interrupt_event.is_set():
            raise JobInterrupted(self.interrupt_reason or "interrupted")

    def sleep(self, ms: float) -> None:
        """A blocking sleep on the worker's clock that ends early (raising) when interrupted."""
        done = threading.Event()
        call_at = getattr(self.clock, "call_at", None)
        if call_at is not None:
            handle = call_at(self.clock() + int(ms), done.set)
        else:
            threading.Timer(ms / 1000, done.set).start()
            handle = None
        try:
            while not done.wait(0.005):
                self.check_interrupted()
            self.check_interrupted()
        finally:
            if handle is not None:
                self.clock.cancel(handle)

    async def asleep(self, ms: float) -> None:
        """An asyncio sleep on the worker's clock (cancellation interrupts it)."""
        await sleep_ms(self.clock, ms)


_current_job: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar(
    "mq_current_job", default=None
)


def current_job() -> JobContext:
    """The attempt being run by the calling handler (raises LookupError outside a job)."""
    ctx = _current_job.get()
    if ctx is None:
        raise LookupError("current_job() called outside a running job")
    return ctx


def _annotate(record: logging.LogRecord) -> None:
    ctx = _current_job.get()
    if ctx is None:
        record.job_id = record.job_queue = record.job_attempt = None
        record.mq_job = ""
    else:
        record.job_id, record.job_queue, record.job_attempt = ctx.job_id, ctx.queue, ctx.attempt
        record.mq_job = f"[{ctx.job_id} {ctx.queue}#{ctx.attempt}] "


class JobLogContext(logging.Filter):
    """A handler filter that gives every record ``job_id``, ``job_queue``, ``job_attempt`` and
    ``mq_job`` (``"[<id> <queue>#<attempt>] "`` inside a running job, else ``""``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "mq_job"):
            _annotate(record)
        return True


class JobLogHandler(logging.Handler):
    """Copies the ``logging`` records a running job makes into that job's own log.

    Opt in with ``logging.getLogger().addHandler(JobLogHandler())`` (or ``runworker
    --job-logs``): a record made inside a handler (the same thread or task) goes to
    ``current_job().log``; records made outside a job, and the store's and redis-py's
    own records, are left alone (a write to Redis never logs into itself).
    """

    def __init__(self, level: int = logging.INFO) -> None:
        super().__init__(level)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        self._busy = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        ctx = _current_job.get()
        if ctx is None or ctx.store is None or record.name.startswith(("store.", "redis")):
            return
        if getattr(self._busy, "on", False):
            return
        self._busy.on = True
        try:
            ctx.log(self.format(record))
        except Exception:
            self.handleError(record)
        finally:
            self._busy.on = False


_factory_lock = threading.Lock()
_factory_installed = False


def install_log_context() -> None:
    """Annotate every log record created inside a running job with the job's identity."""
    global _factory_installed
    with _factory_lock:
        if _factory_installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            _annotate(record)
            return record

        logging.setLogRecordFactory(factory)
        _factory_installed = True


def set_current_job(ctx: JobContext | None) -> contextvars.Token[JobContext | None]:
    return _current_job.set(ctx)


def reset_current_job(token: contextvars.Token[JobContext | None]) -> None:
    _current_job.reset(token)


# ---------------------------------------------------------------- failures


UNRECOVERABLE_ATTR = "__mq_unrecoverable__"


class Unrecoverable(Exception):
    """Raise (a subclass of) this to fail a job at once, skipping its remaining attempts."""


def unrecoverable(exc: BaseException) -> BaseException:
    """Mark an exception so the worker fails the job now instead of retrying it."""
    setattr(exc, UNRECOVERABLE_ATTR, True)
    return exc


def is_unrecoverable(exc: BaseException) -> bool:
    return isinstance(exc, Unrecoverable) or bool(getattr(exc, UNRECOVERABLE_ATTR, False))


def encode_failure(
    exc: BaseException, *, kind: str = "error", worker_id: str | None = None
) -> dict[str, Any]:
    """The JSON exit of a failed run: type, message and traceback of the exception
    (plus ``worker``, the id of the worker that ran it, when given)."""
    error = {
        "type": type(exc).__name__,
        "module": type(exc).__module__,
        "message": str(exc),
        "kind": kind,
        "traceback": "".join(traceback.format_exception(exc)).strip(),
    }
    if worker_id:
        error["worker"] = worker_id
    return {"error": error}


class JobFailedError(Exception):
    """Raised by ``await_result``/``execute`` when the job ended ``failed``."""

    def __init__(self, job_id: str, error_type: str, message: str, exit: Any = MISSING) -> None:
        super().__init__(f"job {job_id!r} failed: {error_type}: {message}")
        self.job_id = job_id
        self.error_type = error_type
        self.message = message
        self.exit = exit


# ---------------------------------------------------------------- transactions


#: ``hook(callback) -> bool``: run ``callback`` once the caller's transaction commits and
#: return True, or return False when no transaction is open (the caller writes at once).
_commit_hook: Callable[[Callable[[], Any]], bool] | None = None


def set_commit_hook(hook: Callable[[Callable[[], Any]], bool] | None) -> None:
    """Install the transaction hook behind ``Job.enqueue(..., on_commit=True)`` (None removes it)."""
    global _commit_hook
    _commit_hook = hook


# ---------------------------------------------------------------- status


@dataclass(frozen=True)
class JobStatus:
    """What ``poll`` returns: the parts of a record a producer cares about."""

    id: str
    state: str
    attempts_made: int
    metadata: dict[str, str]
    exit: Any
    failed_reason: str | None

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_STATES


# ---------------------------------------------------------------- definitions


DedupeInput = str | DedupePolicy | Mapping[str, Any]


def _backoff(value: Any) -> BackoffPolicy | None:
    if value is None or isinstance(value, BackoffPolicy):
        return value
    if isinstance(value, tuple):
        kind, delay, *rest = value
        return BackoffPolicy(kind, int(delay), rest[0] if rest else None)
    return BackoffPolicy.coerce(value)


def _dedupe(value: Any) -> DedupePolicy | None:
    if value is None or isinstance(value, DedupePolicy):
        return value
    if isinstance(value, str):
        return DedupePolicy(value)
    return DedupePolicy.coerce(value)


def _keep(value: Any) -> KeepPolicy | None:
    if value is None or isinstance(value, KeepPolicy):
        return value
    if isinstance(value, Mapping):
        data = dict(value)
        flat = {"count", "age_ms", "ageMs"} & data.keys()
        split = {"completed", "failed", "cancelled"} & data.keys()
        if flat and split:
            raise InvalidRequestError(
                "keep mixes the flat {count, age_ms} form with per-state keys"
            )
    return KeepPolicy.coerce(value)


class Job:
    """A job definition: name, defaults, optional handler, and the producer verbs."""

    def __init__(
        self,
        name: str,
        *,
        queue: str = "default",
        store: str = "default",
        attempts: int = 1,
        backoff: Any = None,
        timeout_ms: int | None = None,
        priority: float = 0,
        delay_ms: int = 0,
        keep: Any = None,
        dedupe: Callable[[Any], DedupeInput | None] | None = None,
        idempotency_key: Callable[[Any], str] | None = None,
        metadata: Callable[[Any], Mapping[str, str]] | None = None,
        retryable: Callable[[BaseException], bool] | None = None,
        handler: Callable[..., Any] | None = None,
        registry: StoreRegistry | None = None,
        enqueue_on_commit: bool = False,
        group: str | Callable[[Any], str | None] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name or "\0" in name:
            raise InvalidRequestError(f"a job name must be a non-empty string, got {name!r}")
        self.name = name
        self.queue = queue
        self.store_key = store
        self.attempts = max(1, int(attempts))
        self.backoff = _backoff(backoff)
        if self.backoff is not None:
            codec.check_backoff(self.backoff, self.attempts, None)
        self.timeout_ms = timeout_ms
        self.priority = priority
        self.delay_ms = int(delay_ms)
        if self.delay_ms > codec.latest_delay_ms(None):
            raise InvalidRequestError(
                f"delay_ms {self.delay_ms} puts every run past {MAX_RUN_AT_TEXT} "
                "(the latest run time the store accepts)"
            )
        self.keep = _keep(keep)
        self.dedupe = dedupe
        self.idempotency_key = idempotency_key
        self.metadata = metadata
        self.retryable = retryable
        self.enqueue_on_commit = bool(enqueue_on_commit)
        #: The job group of each enqueue: a fixed name, or a function of the payload
        #: (``lambda p: p["tenant"]``) returning the name or None (no group).
        if group is not None and not callable(group):
            codec.check_group(group)
        self.group = group
        self._registry = registry or default_registry
        self.fn: Callable[..., Any] | None = None
        if handler is not None:
            self.handler(handler)
        JOBS.add(self)

    def __repr__(self) -> str:
        return f"Job({self.name!r}, queue={self.queue!r}, store={self.store_key!r})"

    # -------------------------------------------------------- handler

    def handler(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Attach the function that runs this job (sync or ``async def``); usable as a decorator."""
        self.fn = fn
        return fn

    @property
    def is_async(self) -> bool:
        return self.fn is not None and inspect.iscoroutinefunction(self.fn)

    def __call__(self, payload: Any = None) -> Any:
        """Run the handler inline (tests, scripts); no store involved."""
        if self.fn is None:
            raise InvalidRequestError(f"job {self.name!r} has no handler")
        return self.fn(payload)

    # -------------------------------------------------------- store

    @property
    def store(self) -> RedisJobStore:
        return self._registry.get(self.store_key)

    def build_request(
        self,
        payload: Any = None,
        *,
        job_id: str | None = None,
        queue: str | None = None,
        metadata: Mapping[str, str] | None = None,
        dedupe: DedupeInput | None = None,
        delay_ms: int | None = None,
        at: int | None = None,
        priority: float | None = None,
        attempts: int | None = None,
        backoff: Any = None,
        keep: Any = None,
        timeout_ms: int | None = None,
        now: int | None = None,
        allow_dedupe: bool = True,
        group: str | None = None,
    ) -> EnqueueRequest:
        """The store request for one enqueue: definition defaults merged with per-call options."""
        if delay_ms is not None and at is not None:
            raise InvalidRequestError("give delay_ms or at, not both")
        if job_id is None and self.idempotency_key is not None:
            job_id = f"{self.name}/{self.idempotency_key(payload)}"
        meta: dict[str, str] = {}
        if self.metadata is not None:
            meta.update(self.metadata(payload))
        if metadata:
            meta.update(metadata)
        policy = None
        if allow_dedupe:
            policy = _dedupe(
                dedupe if dedupe is not None else (self.dedupe(payload) if self.dedupe else None)
            )
        if at is not None:
            if isinstance(at, bool) or not isinstance(at, int | float):
                raise InvalidRequestError(f"at must be epoch milliseconds, got {at!r}")
            codec.check_run_at(int(at), f"at={at}")
            clock_now = now if now is not None else self.store.now()
            delay = max(0, int(at) - clock_now)
        else:
            delay = self.delay_ms if delay_ms is None else int(delay_ms)
        if group is None and self.group is not None:
            group = self.group(payload) if callable(self.group) else self.group
        return EnqueueRequest(
            id=job_id,
            name=self.name,
            queue=queue or self.queue,
            payload=payload,
            metadata=meta,
            priority=self.priority if priority is None else priority,
            attempts_max=max(1, int(self.attempts if attempts is None else attempts)),
            backoff=_backoff(backoff) if backoff is not None else self.backoff,
            keep=_keep(keep) if keep is not None else self.keep,
            timeout_ms=self.timeout_ms if timeout_ms is None else timeout_ms,
            dedupe=policy,
            delay_ms=delay,
            trace=current_trace_context(delayed=delay > 0),
            group=group,
        )

    # -------------------------------------------------------- producer verbs

    def enqueue_result(self, payload: Any = None, **options: Any) -> EnqueueResult:
        """Like :meth:`enqueue` but also tells whether nothing was inserted (``duplicate``)."""
        return self.store.enqueue(self.build_request(payload, **options))

    def enqueue(self, payload: Any = None, *, on_commit: bool | None = None, **options: Any) -> str:
        """Enqueue one job; returns its id (the existing id for a duplicate or deduped request).

        ``on_commit`` (default: the definition's ``enqueue_on_commit``) defers the
        write until the surrounding database transaction commits, through the hook
        installed with :func:`set_commit_hook` (mqadmin installs Django's
        ``transaction.on_commit``); outside a transaction the job is written at once.
        A deferred job gets its id now (``job_id`` or a generated ``c-<hex>``), is
        validated now, and takes no dedupe policy (its id must be known before the write).
        """
        if on_commit is None:
            on_commit = self.enqueue_on_commit
        if on_commit:
            hook = _commit_hook
            if hook is None:
                raise InvalidRequestError(
                    "on_commit needs a transaction hook (set_commit_hook; mqadmin installs Django's)"
                )
            if options.get("dedupe") is not None or (self.dedupe and options.get("dedupe") is None):
                raise InvalidRequestError("an on_commit enqueue takes no dedupe policy")
            if options.get("job_id") is None and self.idempotency_key is None:
                options["job_id"] = "c-" + secrets.token_hex(12)
            request = self.build_request(payload, allow_dedupe=False, **options)
            store = self.store
            store.validate_request(request)  # refuse bad input now
            if hook(lambda: store.enqueue(request)):
                assert request.id is not None
                return request.id
            return store.enqueue(request).id
        return self.enqueue_result(payload, **options).id

    # -------------------------------------------------------- async producer verbs
    #
    # The async store of this definition's store key for the running event loop comes
    # from the registry (``StoreRegistry.aget``: the sync store's twin, or one registered
    # with ``register_async``).

    async def astore(self) -> AsyncRedisJobStore:
        """The async store this definition writes to, for the running event loop."""
        return await self._registry.aget(self.store_key)

    async def aenqueue_result(self, payload: Any = None, **options: Any) -> EnqueueResult:
        """Like :meth:`aenqueue` but also tells whether nothing was inserted (``duplicate``)."""
        astore = await self.astore()
        return await astore.enqueue(self.build_request(payload, now=astore.now(), **options))

    async def aenqueue(self, payload: Any = None, **options: Any) -> str:
        """Enqueue one job from async code; returns its id (as :meth:`enqueue`).

        Always writes at once: Django's transactions (and ``on_commit``) are sync-only, so
        an async caller is never inside one; ``on_commit=True`` is refused.
        """
        if options.pop("on_commit", None):
            raise InvalidRequestError(
                "aenqueue writes at once (no transaction is open in async code): drop on_commit"
            )
        return (await self.aenqueue_result(payload, **options)).id

    async def aawait_result(
        self,
        job_id: str,
        timeout_s: float | None = None,
        poll_schedule: Iterable[float] | None = None,
    ) -> Any:
        """:meth:`await_result` for async code: event-driven (``AsyncRedisJobStore.
        wait_for_result``), or polling along ``poll_schedule`` (seconds) when given."""
        astore = await self.astore()
        if poll_schedule is None:
            return job_outcome(await astore.wait_for_result(job_id, timeout_s=timeout_s))
        waits = PollWaits(job_id, timeout_s, poll_schedule)
        while True:
            record = await astore.get_job(job_id)
            done, value = settled_result(job_id, record)
            if done:
                return value
            assert record is not None
            await asyncio.sleep(waits.next_delay(record.state))

    async def aexecute(
        self, payload: Any = None, *, timeout_s: float | None = None, **options: Any
    ) -> Any:
        """Enqueue, then await the result, from async code (as :meth:`execute`)."""
        job_id = await self.aenqueue(payload, **options)
        return await self.aawait_result(job_id, timeout_s=timeout_s)

    def enqueue_many(self, payloads: Iterable[Any], **options: Any) -> list[str]:
        """Enqueue many jobs (chunks of 500 per Redis call); ids align with ``payloads``."""
        if "job_id" in options or "dedupe" in options:
            raise InvalidRequestError("enqueue_many takes no job_id or dedupe option")
        store = self.store
        now = store.now() if options.get("at") is not None else None
        requests = [self.build_request(p, now=now, **options) for p in payloads]
        return [r.id for r in store.enqueue_many(requests)]

    def poll(self, job_id: str) -> JobStatus | None:
        record = self.store.get_job(job_id)
        if record is None:
            return None
        return JobStatus(
            record.id,
            record.state,
            record.attempts_made,
            record.metadata,
            record.exit,
            record.failed_reason,
        )

    def await_result(
        self,
        job_id: str,
        timeout_s: float | None = None,
        poll_schedule: Iterable[float] | None = None,
    ) -> Any:
        """Wait for the job to finish; return its result or raise why it did not succeed.

        Returns within milliseconds of the job's end: the store's event stream wakes the
        wait (``RedisJobStore.wait_for_result``).  With ``poll_schedule`` (seconds) it
        polls along it instead (an exhausted schedule raises TimeoutError), as it does on
        a store without an event stream.  A cancelled job raises JobCancelledError; a
        failed one JobFailedError; a job that disappears JobNotFoundError; ``timeout_s``
        passing TimeoutError.
        """
        wait = getattr(self.store, "wait_for_result", None)
        if poll_schedule is None and wait is not None:
            return job_outcome(wait(job_id, timeout_s=timeout_s))
        waits = PollWaits(job_id, timeout_s, poll_schedule)
        while True:
            record = self.store.get_job(job_id)
            done, value = settled_result(job_id, record)
            if done:
                return value
            assert record is not None
            time.sleep(waits.next_delay(record.state))

    def execute(
        self, payload: Any = None, *, timeout_s: float | None = None, **options: Any
    ) -> Any:
        """Enqueue, then await the result (a duplicate awaits the existing job)."""
        return self.await_result(self.enqueue(payload, **options), timeout_s=timeout_s)

    def attempts_of(self, job_id: str) -> list[AttemptRecord]:
        """The run ledger of a job, oldest first."""
        return self.store.get_attempts(job_id)

    def retry(self, job_id: str) -> None:
        self.store.retry(job_id)

    def cancel(self, job_id: str) -> None:
        self.store.cancel(job_id)

    def cancel_by_key(self, key: str) -> bool:
        """Cancel the pending holder of a dedupe key of this job; False if nothing was pending."""
        return self.store.cancel_by_dedupe(self.name, key)

    def promote(self, job_id: str) -> None:
        self.store.promote(job_id)

    def schedule(
        self,
        key: str,
        *,
        cron: str | None = None,
        tz: str | None = None,
        every_ms: int | None = None,
        payload: Any = None,
        metadata: Mapping[str, str] | None = None,
        priority: float = 0,
        attempts: int = 1,
        backoff: Any = None,
        keep: Any = None,
        timeout_ms: int | None = None,
        group: str | None = None,
    ) -> str:
        """Create or update the schedule ``<name>/<key>``; returns the qualified key.

        Exactly one of ``cron`` (5 fields, in ``tz``, default UTC) or
        ``every_ms``.  Re-registering an unchanged cadence keeps the next run.
        """
        validate_cadence(cron, tz, every_ms)
        store = self.store
        next_run = first_run_at(cron, tz, every_ms, store.now())
        if next_run is None:
            raise InvalidRequestError(f"cron expression {cron!r} never matches")
        meta: dict[str, str] = {}
        if self.metadata is not None:
            meta.update(self.metadata(payload))
        meta.update(metadata or {})
        qualified = f"{self.name}/{key}"
        store.upsert_schedule(
            ScheduleRecord(
                key=qualified,
                job_name=self.name,
                queue=self.queue,
                cron=cron,
                tz=tz,
                every_ms=every_ms,
                payload=payload,
                metadata=meta,
                priority=priority,
                attempts_max=max(1, attempts),
                backoff=_backoff(backoff),
                keep=_keep(keep),
                timeout_ms=timeout_ms,
                group=group,
                next_run_at=next_run,
            )
        )
        return qualified

    def unschedule(self, key: str) -> bool:
        return self.store.remove_schedule(f"{self.name}/{key}")


def failed_error(record: JobRecord) -> JobFailedError:
    error = record.exit.get("error") if isinstance(record.exit, dict) else None
    if isinstance(error, dict):
        return JobFailedError(
            record.id, str(error.get("type")), str(error.get("message")), record.exit
        )
    if record.exit is MISSING:
        return JobFailedError(
            record.id, "StoreFailure", record.failed_reason or "failed without an exit"
        )
    return JobFailedError(record.id, "Failure", repr(record.exit), record.exit)


def job_outcome(record: JobRecord) -> Any:
    """A terminal job's result, or the error saying why it did not succeed."""
    if record.state == "cancelled":
        raise JobCancelledError(record.id)
    if record.state == "failed":
        raise failed_error(record)
    return None if record.exit is MISSING else record.exit


def settled_result(job_id: str, record: JobRecord | None) -> tuple[bool, Any]:
    """(True, outcome) for a terminal job (see :func:`job_outcome`), (False, None) for one
    not finished yet; JobNotFoundError for a job that is gone."""
    if record is None:
        raise JobNotFoundError(job_id)
    if record.is_terminal:
        return True, job_outcome(record)
    return False, None


def job(name: str, **options: Any) -> Callable[[Callable[..., Any]], Job]:
    """Decorator: define a job whose handler is the decorated function."""

    def wrap(fn: Callable[..., Any]) -> Job:
        return Job(name, handler=fn, **options)

    return wrap


# ---------------------------------------------------------------- definition registry


class JobRegistry:
    """Every Job defined in this process, by name (what workers can run)."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def add(self, definition: Job) -> None:
        with self._lock:
            self._jobs[definition.name] = definition

    def get(self, name: str) -> Job | None:
        return self._jobs.get(name)

    def discard(self, definition: Job) -> None:
        """Forget ``definition`` (only if it is the one registered under its name)."""
        with self._lock:
            if self._jobs.get(definition.name) is definition:
                del self._jobs[definition.name]

    def all(self) -> list[Job]:
        return list(self._jobs.values())

    def for_store(self, store_key: str) -> list[Job]:
        return [j for j in self._jobs.values() if j.store_key == store_key]


JOBS = JobRegistry()


__all__ = [
    "JOBS",
    "Job",
    "JobContext",
    "JobFailedError",
    "JobInterrupted",
    "JobRegistry",
    "JobStatus",
    "Unrecoverable",
    "blocking_sleep_ms",
    "current_job",
    "encode_failure",
    "is_unrecoverable",
    "job",
    "set_commit_hook",
    "unrecoverable",
]
