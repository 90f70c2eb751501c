"""A Django Tasks backend on the job store: ``mqadmin.tasks.StoreBackend``.

Works with the ``django-tasks`` backport (0.12+, Django 5.2) and with Django 6's
built-in ``django.tasks``, whichever is importable (the built-in one first)::

    TASKS = {
        "default": {
            "BACKEND": "mqadmin.tasks.StoreBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"STORE": "default"},  # an MQ_STORES name
        }
    }

* ``enqueue`` stores one job: its name is the task's module path, its queue the
  task's ``queue_name``, its priority the task's priority (higher runs first), its
  delay the time until ``run_after``; the payload is ``{"args": [...], "kwargs":
  {...}}``.  The result id is the job id.
* ``get_result`` reads the job and its attempts ledger: ``waiting``/``delayed`` are
  READY, ``active`` RUNNING, ``completed`` SUCCESSFUL, ``failed`` and ``cancelled``
  FAILED (a cancel shows as a :class:`TaskCancelled` error).  ``errors`` holds one
  entry per failed attempt (exception class path and traceback), ``worker_ids`` the
  worker of every finished attempt.
* ``manage.py runworker`` runs these jobs with no registration: the worker claims
  the module paths this backend enqueued (recorded per queue in the store) and
  imports each on first use; a path that does not import to a task fails its job
  with a clear error (the worker carries on).
* ``ENQUEUE_ON_COMMIT`` (option, default False) or a task's own
  ``enqueue_on_commit`` defers the write to ``transaction.on_commit`` when called
  inside a transaction; ``store.Job.enqueue(..., on_commit=True)`` does the same for
  the store's own jobs (see ``mqadmin.runtime.install_commit_hook``).

Other options: ``ATTEMPTS`` (runs per task including the first, default 1),
``BACKOFF`` (a store backoff policy, e.g. ``{"kind": "exponential", "delay_ms":
1000}``), ``TIMEOUT_MS`` and ``KEEP`` (store retention policy).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import secrets
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from inspect import iscoroutinefunction
from typing import TYPE_CHECKING, Any, cast

from asgiref.sync import sync_to_async
from django.db import transaction

if TYPE_CHECKING:  # checked against Django 6's django.tasks (django-stubs); the backport matches it
    from django.core.checks import CheckMessage
    from django.tasks import exceptions as _exceptions
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    from store.aio import AsyncRedisJobStore
else:
    try:  # Django 6.0+
        from django.tasks import exceptions as _exceptions
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
        from django.tasks.signals import task_enqueued, task_finished, task_started
        from django.utils.json import normalize_json
    except ImportError:  # Django 5.2 with the django-tasks backport
        from django_tasks import exceptions as _exceptions
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json

from store.codec import check_group
from store.errors import InvalidRequestError, JobStoreError
from store.jobs import Job, JobContext, current_job, unrecoverable
from store.protocol import JobStore
from store.records import AttemptRecord, BackoffPolicy, EnqueueRequest, JobRecord
from store.registry import StoreRegistry, default_registry

logger = logging.getLogger(__name__)


def _exception(*names: str) -> type[Exception]:
    """The first of ``names`` the installed framework defines (the backport's and Django 6's differ)."""
    for name in names:
        found = getattr(_exceptions, name, None)
        if found is not None:
            return found
    raise ImportError(f"none of {names} in {_exceptions.__name__}")


if TYPE_CHECKING:  # Django 6's names (the classes the checked import above gives)
    InvalidTaskError = _exceptions.InvalidTask
    InvalidTaskBackendError = _exceptions.InvalidTaskBackend
else:
    InvalidTaskError = _exception("InvalidTaskError", "InvalidTask")
    InvalidTaskBackendError = _exception("InvalidTaskBackendError", "InvalidTaskBackend")
TaskResultDoesNotExist: type[Exception] = _exceptions.TaskResultDoesNotExist

# How long an enqueuing process trusts that a (queue, module path) pair is recorded
# as runnable in the store before recording it again (self-heals a wiped store).
MARKER_TTL_S = 60.0
# Bound of the per-backend cache of validated Task objects (run_after makes many).
VALID_CACHE_MAX = 1024

_STATUS = {
    "waiting": TaskResultStatus.READY,
    "delayed": TaskResultStatus.READY,
    "active": TaskResultStatus.RUNNING,
    "waiting-children": TaskResultStatus.RUNNING,
    "completed": TaskResultStatus.SUCCESSFUL,
    "failed": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
}


class InvalidTaskArguments(InvalidTaskError, TypeError):
    """A task's arguments cannot be stored as JSON (an ``InvalidTaskError`` and a ``TypeError``)."""


class TaskCancelled(Exception):
    """Stands for a cancel in a FAILED result's ``errors`` (the job was cancelled in the store)."""


class TaskStalled(Exception):
    """Stands for an attempt whose worker stopped heartbeating (stall recovery ended it)."""


class TaskNotImportable(ImportError):
    """The worker could not import a job's module path to a Django task."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StoreTask(Task):
    """The backend's task class: a Task with the store's per-task options.

    Django 6.1 (and the django-tasks backport) pass ``@task`` keyword arguments on to
    this class, so a task can override the backend's ``OPTIONS`` for itself::

        @task(attempts=3, backoff={"kind": "exponential", "delay_ms": 1000},
              timeout_ms=30_000, enqueue_on_commit=True)
        def send_invoice(invoice_id: int) -> None: ...

    Each option has the meaning of the ``OPTIONS`` entry of the same name in capitals
    (``ATTEMPTS``: runs including the first; ``BACKOFF``: a store backoff policy, a
    mapping ``{"kind": "fixed" | "exponential", "delay_ms": ..., "factor": ...}``;
    ``TIMEOUT_MS``: the run's time limit; ``ENQUEUE_ON_COMMIT``); ``None`` (the
    default) follows the backend's option.  They are checked when the task is defined
    (``InvalidTask`` on Django 6, ``InvalidTaskError`` with the backport).  Django 6.0's
    ``@task`` takes no such arguments: there, a second ``TASKS`` alias with other
    ``OPTIONS`` (``@task(backend="retrying")``) gives a group of tasks other options.

    ``group`` puts each enqueued run in a job group of its queue (docs/flow-control.md):
    a fixed name, or a function called with the task's arguments that returns the name
    or None (``@task(group=lambda tenant_id, **kw: f"tenant-{tenant_id}")``).  Groups
    take turns at claims and the queue's group limits apply per group.
    """

    enqueue_on_commit: bool | None = None
    attempts: int | None = None
    backoff: BackoffPolicy | None = None
    timeout_ms: int | None = None
    group: str | Callable[..., str | None] | None = None

    def __post_init__(self) -> None:
        if self.group is not None and not callable(self.group):
            try:
                check_group(self.group)
            except InvalidRequestError as exc:
                raise InvalidTaskError(f"group: {exc}") from exc
        # A mapping becomes the store's (frozen, hashable) policy; a bad one is an InvalidTask.
        if self.backoff is not None and not isinstance(self.backoff, BackoffPolicy):
            try:
                policy = BackoffPolicy.coerce(self.backoff)
                if policy is None or policy.kind not in ("fixed", "exponential"):
                    raise ValueError(f"unknown kind {getattr(policy, 'kind', None)!r}")
                int(policy.delay_ms)
            except (InvalidRequestError, TypeError, ValueError, AttributeError) as exc:
                raise InvalidTaskError(
                    f"backoff must be a store backoff policy such as "
                    f'{{"kind": "exponential", "delay_ms": 1000}}, got {self.backoff!r} ({exc})'
                ) from exc
            object.__setattr__(self, "backoff", policy)
        Task.__post_init__(self)


def _own(task: Task, name: str, default: Any) -> Any:
    """The task's own store option ``name`` (a StoreTask field), else the backend's."""
    value = getattr(task, name, None)
    return default if value is None else value


def _task_group(task: Task, args: list[Any], kwargs: dict[str, Any]) -> str | None:
    """The job group of one enqueue of ``task`` (its ``group`` option; None: no group)."""
    group = getattr(task, "group", None)
    if callable(group):
        group = group(*args, **kwargs)
    return group


def _ms_to_dt(ms: int | None) -> datetime | None:
    """Epoch milliseconds as an aware datetime; None also for a stored value no date has."""
    if ms is None:
        return None
    try:
        return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=int(ms))
    except (OverflowError, ValueError, TypeError):
        return None


# store -> {(queue, module path): monotonic time the pair was last recorded as runnable}
# (``RedisJobStore.record_resolvable``), shared by every backend of the process.  Weak keys:
# a store dropped by ``services.reset()`` takes its markers along, and a new store never
# inherits them (``id()`` of a collected object is reused, so it cannot be the key).
_markers: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], float]] = weakref.WeakKeyDictionary()
_markers_lock = threading.Lock()


class StoreBackend(BaseTaskBackend):
    """Django Tasks on a configured store (``OPTIONS["STORE"]``, an MQ_STORES name)."""

    task_class = StoreTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # Every released framework version keeps OPTIONS; set it where a base class does not.
        options = self.options = dict(params.get("OPTIONS") or {})
        unknown = set(options) - {
            "STORE",
            "ATTEMPTS",
            "BACKOFF",
            "TIMEOUT_MS",
            "KEEP",
            "ENQUEUE_ON_COMMIT",
        }
        if unknown:
            raise InvalidTaskBackendError(
                f"unknown OPTIONS for {alias!r} (mqadmin.tasks.StoreBackend): {', '.join(sorted(unknown))}"
            )
        self.store_key = str(options.get("STORE", "default"))
        # In OPTIONS, or at the top of the TASKS entry as earlier django-tasks releases had it.
        self.enqueue_on_commit = bool(
            options.get("ENQUEUE_ON_COMMIT", params.get("ENQUEUE_ON_COMMIT", False))
        )
        # Job policies, checked now: a bad option fails at startup, not at the first enqueue.
        try:
            probe = Job(
                "mqadmin.tasks.options-probe",
                attempts=int(options.get("ATTEMPTS", 1)),
                backoff=options.get("BACKOFF"),
                keep=options.get("KEEP"),
                timeout_ms=options.get("TIMEOUT_MS"),
                registry=StoreRegistry(),
            )
        except (InvalidRequestError, TypeError, ValueError) as exc:
            raise InvalidTaskBackendError(f"bad OPTIONS for {alias!r}: {exc}") from exc
        from store.jobs import JOBS

        JOBS.discard(probe)
        self.attempts = probe.attempts
        self.backoff = probe.backoff
        self.keep = probe.keep
        self.timeout_ms = probe.timeout_ms
        self.registry: StoreRegistry = default_registry
        self._valid: dict[Any, str] = {}
        self._importable: set[str] = set()

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """``manage.py check``: the store this backend writes to must be configured."""
        from django.core import checks

        from mqadmin import services

        errors: list[CheckMessage] = []
        stores = services.configured_stores()
        if self.store_key not in stores:
            errors.append(
                checks.Error(
                    f"TASKS[{self.alias!r}] writes to the store {self.store_key!r}, which MQ_STORES "
                    f"does not define (known: {', '.join(sorted(stores)) or 'none'})",
                    hint='Set OPTIONS["STORE"] to an MQ_STORES name, or add that store to MQ_STORES.',
                    id="mqadmin.E201",
                )
            )
        return errors

    def validate_task(self, task: Task) -> None:
        """Django's checks, then the store options a :class:`StoreTask` carries."""
        super().validate_task(task)
        attempts = getattr(task, "attempts", None)
        if attempts is not None and (type(attempts) is not int or attempts < 1):
            raise InvalidTaskError(
                f"attempts must be a whole number of runs (including the first) >= 1, "
                f"got {attempts!r}."
            )
        timeout_ms = getattr(task, "timeout_ms", None)
        if timeout_ms is not None and (type(timeout_ms) is not int or timeout_ms <= 0):
            raise InvalidTaskError(
                f"timeout_ms must be a positive whole number of milliseconds, got {timeout_ms!r}."
            )
        on_commit = getattr(task, "enqueue_on_commit", None)
        if on_commit is not None and not isinstance(on_commit, bool):
            raise InvalidTaskError(
                f"enqueue_on_commit must be True, False or None, got {on_commit!r}."
            )
        backoff = getattr(task, "backoff", None)
        if backoff is not None and not isinstance(backoff, BackoffPolicy):
            raise InvalidTaskError(f"backoff must be a store backoff policy, got {backoff!r}.")
        if backoff is not None and (type(backoff.delay_ms) is not int or backoff.delay_ms < 0):
            raise InvalidTaskError(
                f"backoff delay_ms must be a whole number of milliseconds >= 0, got {backoff.delay_ms!r}."
            )

    # ------------------------------------------------------------ helpers

    @property
    def store(self) -> JobStore:
        return self.registry.get(self.store_key)

    def _validate(self, task: Task) -> str:
        """Django's checks plus importability, cached per Task value; returns the module path."""
        try:
            path = self._valid.get(task)
        except TypeError:  # an unhashable field: validate every time
            path = None
        if path is not None:
            return path
        self.validate_task(task)
        path = task.module_path
        if path not in self._importable:
            check_importable(task)
            self._importable.add(path)
        try:
            if len(self._valid) >= VALID_CACHE_MAX:
                self._valid.clear()
            self._valid[task] = path
        except TypeError:
            pass
        return path

    def _defer(self, task: Task) -> bool:
        wanted = getattr(task, "enqueue_on_commit", None)
        if wanted is None:
            wanted = self.enqueue_on_commit
        return bool(wanted) and transaction.get_connection().in_atomic_block

    def _request(
        self,
        task: Task,
        path: str,
        args: list[Any],
        kwargs: dict[str, Any],
        job_id: str | None,
        now: int,
    ) -> EnqueueRequest:
        delay = 0
        if task.run_after is not None:
            delay = max(0, int(task.run_after.timestamp() * 1000) - now)
        return EnqueueRequest(
            name=path,
            queue=task.queue_name,
            payload={"args": args, "kwargs": kwargs},
            id=job_id,
            priority=task.priority,
            attempts_max=_own(task, "attempts", self.attempts),
            backoff=_own(task, "backoff", self.backoff),
            keep=self.keep,
            timeout_ms=_own(task, "timeout_ms", self.timeout_ms),
            delay_ms=delay,
            group=_task_group(task, args, kwargs),
        )

    def _insert(self, store: JobStore, request: EnqueueRequest) -> str:
        """Write the job, and (first time in a while) mark its name runnable on its queue."""
        with _refusals(request):
            job_id: str = store.enqueue(request).id
        wake = _marker_due(store, request)
        if wake is not None:
            store.record_resolvable(request.queue, request.name, wake=wake)
            _marker_done(store, request)
        return job_id

    async def _ainsert(self, astore: AsyncRedisJobStore, request: EnqueueRequest) -> str:
        """:meth:`_insert` on the async store."""
        with _refusals(request):
            job_id = (await astore.enqueue(request)).id
        wake = _marker_due(astore, request)
        if wake is not None:
            await astore.record_resolvable(request.queue, request.name, wake=wake)
            _marker_done(astore, request)
        return job_id

    # ------------------------------------------------------------ the backend API

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        path = self._validate(task)
        args, kwargs = _json_arguments(path, args, kwargs)
        store = self.store
        now = store.now()
        if self._defer(task):
            job_id = "t-" + secrets.token_hex(16)
            request = self._request(task, path, args, kwargs, job_id, now)
            _check_encodable(store, request)
            transaction.on_commit(lambda: self._insert(store, request))
            enqueued_at = None
        else:
            request = self._request(task, path, args, kwargs, None, now)
            job_id = self._insert(store, request)
            enqueued_at = _ms_to_dt(now)
        result = _ready_result(task, job_id, enqueued_at, args, kwargs, self.alias)
        task_enqueued.send(type(self), task_result=result)
        return result

    async def aenqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """:meth:`enqueue` on the async store of this event loop (``StoreRegistry.aget``).

        A caller inside a transaction (only sync code can open one) gets the sync path,
        which defers the write to the commit."""
        path = self._validate(task)
        if self._defer(task):
            return await sync_to_async(self.enqueue, thread_sensitive=True)(task, args, kwargs)
        args, kwargs = _json_arguments(path, args, kwargs)
        astore = await self.registry.aget(self.store_key)
        now = astore.now()
        job_id = await self._ainsert(astore, self._request(task, path, args, kwargs, None, now))
        result = _ready_result(task, job_id, _ms_to_dt(now), args, kwargs, self.alias)
        await task_enqueued.asend(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        store = self.store
        record = store.get_job(result_id) if _result_id(result_id) else None
        if record is None:
            raise TaskResultDoesNotExist(result_id)
        # The ledger survives retries and stall requeues: always read it.
        return self.result_from(record, store.get_attempts(result_id))

    async def aget_result(self, result_id: str) -> TaskResult:
        """:meth:`get_result` on the async store of this event loop."""
        astore = await self.registry.aget(self.store_key)
        record = await astore.get_job(result_id) if _result_id(result_id) else None
        if record is None:
            raise TaskResultDoesNotExist(result_id)
        return self.result_from(record, await astore.get_attempts(result_id))

    def result_from(self, record: JobRecord, attempts: list[AttemptRecord]) -> TaskResult:
        """The TaskResult of a stored job (TaskResultDoesNotExist if it is no Django task)."""
        payload = record.payload
        if not (
            isinstance(payload, dict)
            and isinstance(payload.get("args"), list)
            and isinstance(payload.get("kwargs"), dict)
        ):
            raise TaskResultDoesNotExist(f"{record.id} is not a Django task ({record.name})")
        try:
            task = load_task(record.name)
        except TaskNotImportable as exc:
            raise TaskResultDoesNotExist(f"{record.id}: {exc}") from exc
        if (task.queue_name, task.priority) != (record.queue, int(record.priority)):
            # A queue QUEUES no longer allows keeps the task as defined.
            with contextlib.suppress(InvalidTaskError):
                task = task.using(queue_name=record.queue, priority=int(record.priority))
        errors: list[Any] = []
        worker_ids = _workers(attempts)
        for entry in attempts:
            error = entry.exit.get("error") if isinstance(entry.exit, dict) else None
            if entry.outcome in ("failed", "retried") and isinstance(error, dict):
                errors.append(
                    TaskError(
                        exception_class_path=f"{error.get('module')}.{error.get('type')}",
                        traceback=str(error.get("traceback") or "") + "\n",
                    )
                )
            elif entry.outcome == "stalled":
                errors.append(
                    TaskError(
                        exception_class_path=f"{__name__}.TaskStalled",
                        traceback=f"{__name__}.TaskStalled: attempt {entry.attempt} stopped "
                        "heartbeating (its worker died or hung) and was recovered\n",
                    )
                )
        if record.state == "cancelled":
            ran = any(e.outcome == "cancelled" and e.started_at is not None for e in attempts)
            errors.append(
                TaskError(
                    exception_class_path=f"{__name__}.TaskCancelled",
                    traceback=f"{__name__}.TaskCancelled: job {record.id} was cancelled "
                    + ("while running" if ran else "before it ran")
                    + "\n",
                )
            )
        elif record.state == "failed" and record.failed_reason and not errors:
            errors.append(
                TaskError(
                    exception_class_path=f"{__name__}.TaskStalled",
                    traceback=f"{__name__}.TaskStalled: {record.failed_reason}\n",
                )
            )
        started = next((e.started_at for e in attempts if e.started_at is not None), None)
        if started is None:
            started = record.processed_at
        result: TaskResult = TaskResult(
            task=task,
            id=record.id,
            status=_STATUS[record.state],
            enqueued_at=_ms_to_dt(record.enqueued_at),
            started_at=_ms_to_dt(started),
            finished_at=_ms_to_dt(record.finished_at) if record.is_terminal else None,
            last_attempted_at=_ms_to_dt(record.processed_at),
            args=payload["args"],
            kwargs=payload["kwargs"],
            backend=self.alias,
            errors=errors,
            worker_ids=worker_ids,
        )
        if record.state == "completed" and isinstance(record.exit, dict):
            object.__setattr__(result, "_return_value", record.exit.get("return_value"))
        return result


_SCALARS = frozenset({str, int, float, bool, type(None)})
# TaskResult's fields, when they are the ones this module fills in directly (else: the constructor).
_FAST_RESULT = {f.name for f in dataclasses.fields(TaskResult)} == {
    "task",
    "id",
    "status",
    "enqueued_at",
    "started_at",
    "finished_at",
    "last_attempted_at",
    "args",
    "kwargs",
    "backend",
    "errors",
    "worker_ids",
    "_return_value",
}


def _plain(value: Any) -> bool:
    """True for values JSON holds as they are (exact types: no conversion needed)."""
    kind = type(value)
    if kind in _SCALARS:
        return True
    if kind is list:
        return all(_plain(v) for v in value)
    if kind is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    return False


def _json_arguments(path: str, args: Any, kwargs: Any) -> tuple[list[Any], dict[str, Any]]:
    """The arguments as the framework stores them (``normalize_json``), or InvalidTaskArguments."""
    if type(kwargs) is dict and _plain(kwargs) and all(_plain(v) for v in args):
        return (args if type(args) is list else list(args)), kwargs
    try:
        # normalize_json turns a sequence into a list and a mapping into a dict.
        json_args = cast("list[Any]", normalize_json(args))
        json_kwargs = cast("dict[str, Any]", normalize_json(kwargs))
    except (TypeError, ValueError) as exc:
        raise InvalidTaskArguments(f"arguments of {path} cannot be stored as JSON: {exc}") from exc
    return json_args, json_kwargs


def _ready_result(
    task: Task,
    job_id: str,
    enqueued_at: datetime | None,
    args: list[Any],
    kwargs: dict[str, Any],
    alias: str,
) -> TaskResult:
    """A READY TaskResult of already-normalised arguments (skips normalising them twice)."""
    return _result(
        task, job_id, TaskResultStatus.READY, enqueued_at, None, None, None, args, kwargs, alias
    )


def _result(
    task: Task,
    job_id: str,
    status: Any,
    enqueued_at: datetime | None,
    started_at: datetime | None,
    finished_at: datetime | None,
    last_attempted_at: datetime | None,
    args: list[Any],
    kwargs: dict[str, Any],
    alias: str,
    errors: list[Any] | None = None,
    worker_ids: list[str] | None = None,
) -> TaskResult:
    """A TaskResult of arguments that are already JSON values (as the framework normalises them).

    Built field by field where the installed framework's TaskResult has exactly the fields
    filled in here, skipping a second normalisation of the arguments; else via its constructor.
    """
    fields = {
        "task": task,
        "id": job_id,
        "status": status,
        "enqueued_at": enqueued_at,
        "started_at": started_at,
        "finished_at": finished_at,
        "last_attempted_at": last_attempted_at,
        "args": args,
        "kwargs": kwargs,
        "backend": alias,
        "errors": [] if errors is None else errors,
        "worker_ids": [] if worker_ids is None else worker_ids,
    }
    if not _FAST_RESULT:
        return TaskResult(**fields)
    result = object.__new__(TaskResult)
    put = object.__setattr__
    for name, value in fields.items():
        put(result, name, value)
    put(result, "_return_value", None)
    return result


def _check_encodable(store: JobStore, request: EnqueueRequest) -> None:
    """Refuse now what the deferred write would refuse later."""
    from store import codec

    try:
        codec.encode_wire(request, "user", request.id or "")
    except (InvalidRequestError, JobStoreError) as exc:
        refusal = _refusal(request, exc)
        if refusal is None:
            raise
        raise refusal from exc


@contextlib.contextmanager
def _refusals(request: EnqueueRequest) -> Iterator[None]:
    """A store refusal of the request's content raised as InvalidTaskArguments."""
    try:
        yield
    except (InvalidRequestError, JobStoreError) as exc:
        refusal = _refusal(request, exc)
        if refusal is None:
            raise
        raise refusal from exc


def _marker_due(store: Any, request: EnqueueRequest) -> bool | None:
    """Whether the (queue, name) pair of ``request`` is to be recorded as resolvable on
    ``store`` now: None when it was lately; else whether to wake (the first time an idle
    worker may have read the names just before the pair landed)."""
    with _markers_lock:
        seen = _markers.setdefault(store, {}).get((request.queue, request.name))
    if seen is None:
        return True
    return False if time.monotonic() - seen > MARKER_TTL_S else None


def _marker_done(store: Any, request: EnqueueRequest) -> None:
    with _markers_lock:
        _markers.setdefault(store, {})[(request.queue, request.name)] = time.monotonic()


def _result_id(result_id: Any) -> bool:
    """Whether ``result_id`` can name a job (a non-empty string)."""
    return isinstance(result_id, str) and bool(result_id)


def _refusal(request: EnqueueRequest, exc: Exception) -> Exception | None:
    """A store refusal of the request's content as InvalidTaskArguments (None: not bad input)."""
    if isinstance(exc, JobStoreError) and not isinstance(
        exc.__cause__, TypeError | ValueError | RecursionError
    ):
        return None  # Redis trouble: let it propagate as it is
    return InvalidTaskArguments(f"cannot enqueue {request.name}: {exc}")


def check_importable(task: Task) -> None:
    """The worker finds a task by importing its module path: refuse tasks it could not find."""
    path = task.module_path
    module_name = getattr(task.func, "__module__", None)
    if not module_name or module_name == "__main__":
        raise InvalidTaskError(
            f"task {path} is defined in __main__; a worker cannot import it (move it to a module)"
        )
    try:
        found = _import_path(path)
    except TaskNotImportable as exc:
        raise InvalidTaskError(f"task {path} is not importable: {exc}") from exc
    if getattr(found, "func", found) is not task.func:
        raise InvalidTaskError(
            f"task {path} is not importable: that path holds {found!r}, not this task"
        )


def _import_path(path: str) -> Any:
    """Import ``module.attr[.attr...]``, trying the longest importable module first."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not module_name.startswith(exc.name):
                raise TaskNotImportable(f"importing {module_name} failed: {exc}") from exc
            continue
        except Exception as exc:
            raise TaskNotImportable(f"importing {module_name} failed: {exc!r}") from exc
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            raise TaskNotImportable(
                f"module {module_name} has no attribute {'.'.join(parts[cut:])}"
            ) from None
        return obj
    raise TaskNotImportable(f"no importable module in {path!r}")


def load_task(path: str) -> Task:
    """The Task at module path ``path`` (TaskNotImportable when there is none)."""
    found = _import_path(path)
    if not isinstance(found, Task):
        raise TaskNotImportable(f"{path} is {type(found).__name__}, not a Django task")
    return found


# ---------------------------------------------------------------- the worker side


def backends_for(store_key: str) -> list[StoreBackend]:
    """The configured StoreBackends (settings.TASKS) that enqueue into store ``store_key``."""
    if TYPE_CHECKING:
        from django.tasks import task_backends
    else:
        try:
            from django.tasks import task_backends
        except ImportError:
            from django_tasks import task_backends
    found = []
    for alias in task_backends.settings:
        backend = task_backends[alias]
        if isinstance(backend, StoreBackend) and backend.store_key == store_key:
            found.append(backend)
    return found


class TaskResolver:
    """The worker's :class:`store.worker.NameResolver` for Django tasks of one store."""

    def __init__(
        self,
        store: JobStore,
        queues: Iterable[str] = (),
        only: Iterable[str] | None = None,
        backend_alias: str = "default",
        any_queue: bool = False,
    ) -> None:
        self.store = store
        self._queues = set(queues)
        # A backend with QUEUES = [] accepts any queue: serve every queue tasks were enqueued on.
        self._any_queue = any_queue
        self._only = set(only) if only else None
        self.backend_alias = backend_alias
        self._lock = threading.Lock()
        self._read_at = 0.0
        self._by_queue: dict[str, set[str]] = {}

    def _read(self) -> dict[str, set[str]]:
        """Every recorded (queue, module path), at most one SSCAN sweep per 100 ms."""
        with self._lock:
            if time.monotonic() - self._read_at < 0.1:
                return self._by_queue
            by_queue = self.store.resolvable_names()
            self._by_queue, self._read_at = by_queue, time.monotonic()
            return by_queue

    def queues(self) -> list[str]:
        queues = set(self._queues)
        if self._any_queue:
            queues |= set(self._read())
        if self._only is not None:
            queues &= self._only
        return sorted(queues)

    def names(self, queue: str) -> set[str]:
        return self._read().get(queue, set())

    def resolve(self, name: str) -> Job:
        try:
            task = load_task(name)
        except TaskNotImportable as exc:
            reason = (
                f"Django task {name!r} cannot be run here: {exc} "
                "(is the module deployed on this worker, and the path a @task?)"
            )
            logger.error("%s", reason)

            def refuse(payload: Any) -> Any:
                raise unrecoverable(TaskNotImportable(reason))

            return _job(name, self.store.store_key, refuse)
        runner = _TaskRunner(task, self.store, self.backend_alias)
        handler = runner.arun if iscoroutinefunction(task.func) else runner.run
        return _job(name, self.store.store_key, handler)


def _job(name: str, store_key: str, handler: Callable[..., Any]) -> Job:
    from store.jobs import JOBS

    definition = Job(name, store=store_key, handler=handler)
    JOBS.discard(definition)  # served through the resolver, not a registration
    return definition


class _TaskRunner:
    """Runs one Django task for the worker: arguments, context, signals, exit envelope."""

    def __init__(self, task: Task, store: JobStore, alias: str) -> None:
        self.task = task
        self.store = store
        self.alias = alias
        # (queue, priority) -> the task as enqueued (Task.using validates: not per run).
        self._variants: dict[tuple[str, int], Task] = {}

    def _variant(self, queue: str, priority: int) -> Task:
        variant = self._variants.get((queue, priority))
        if variant is None:
            variant = self.task
            if (variant.queue_name, variant.priority) != (queue, priority):
                variant = variant.using(queue_name=queue, priority=priority)
            if len(self._variants) < 256:
                self._variants[(queue, priority)] = variant
        return variant

    def _running(self, payload: Mapping[str, Any]) -> Any:
        ctx = current_job()
        record = ctx.record
        worker_ids = [ctx.worker_id]
        if ctx.attempt > 1:  # a retry: the earlier attempts' workers come from the ledger
            worker_ids[:0] = _workers(self.store.get_attempts(record.id))
        now = _ms_to_dt(record.processed_at)
        return _result(
            self._variant(record.queue, int(record.priority)),
            record.id,
            TaskResultStatus.RUNNING,
            _ms_to_dt(record.enqueued_at),
            now,
            None,
            now,
            payload["args"],
            payload["kwargs"],
            self.alias,
            worker_ids=worker_ids,
        )

    def _finish(self, result: Any, exc: BaseException | None, value: Any = None) -> None:
        errors = []
        if exc is not None:
            errors.append(
                TaskError(
                    exception_class_path=f"{type(exc).__module__}.{type(exc).__qualname__}",
                    traceback="".join(traceback.format_exception(exc)),
                )
            )
        done = _result(
            result.task,
            result.id,
            TaskResultStatus.SUCCESSFUL if exc is None else TaskResultStatus.FAILED,
            result.enqueued_at,
            result.started_at,
            datetime.now(tz=UTC),
            result.last_attempted_at,
            result.args,
            result.kwargs,
            result.backend,
            errors,
            result.worker_ids,
        )
        if exc is None:
            object.__setattr__(done, "_return_value", value)
        task_finished.send(StoreBackend, task_result=done)

    def run(self, payload: Mapping[str, Any]) -> Any:
        result = self._running(payload)
        task_started.send(StoreBackend, task_result=result)
        try:
            if self.task.takes_context:
                value = self.task.func(
                    TaskContext(task_result=result), *payload["args"], **payload["kwargs"]
                )
            else:
                value = self.task.func(*payload["args"], **payload["kwargs"])
        except BaseException as exc:
            self._finish(result, exc)
            raise
        self._finish(result, None, value)
        return {"return_value": value, "worker_id": current_job().worker_id}

    async def arun(self, payload: Mapping[str, Any]) -> Any:
        result = self._running(payload)
        task_started.send(StoreBackend, task_result=result)
        try:
            if self.task.takes_context:
                value = await self.task.func(
                    TaskContext(task_result=result), *payload["args"], **payload["kwargs"]
                )
            else:
                value = await self.task.func(*payload["args"], **payload["kwargs"])
        except BaseException as exc:
            self._finish(result, exc)
            raise
        self._finish(result, None, value)
        return {"return_value": value, "worker_id": current_job().worker_id}


def _workers(attempts: list[AttemptRecord]) -> list[str]:
    """The worker of each finished attempt that recorded one, oldest first."""
    found = []
    for entry in attempts:
        if not isinstance(entry.exit, dict):
            continue
        error = entry.exit.get("error")
        worker = entry.exit.get("worker_id") or (
            error.get("worker") if isinstance(error, dict) else None
        )
        if worker:
            found.append(str(worker))
    return found


def _running_job(context: TaskContext) -> JobContext:
    """The worker's run of the task ``context`` belongs to (a ``takes_context`` task)."""
    try:
        ctx = current_job()
    except LookupError:
        raise LookupError(
            "task_progress/task_log work inside a task run by the mqadmin worker"
        ) from None
    if str(context.task_result.id) != ctx.job_id:
        raise LookupError(
            f"the context is of task {context.task_result.id}, not of the running job {ctx.job_id}"
        )
    return ctx


def task_progress(context: TaskContext, value: Any) -> bool:
    """Report a running task's progress (a ``takes_context`` task passes its context).

    The value is ``current_job().progress``'s: a number 0-100 or a small JSON object; it
    shows on the task's job page and in the store's events.  False when the run lost its
    lock (nothing written).  Django's own task metadata API, once it lands, maps onto this.
    """
    return _running_job(context).progress(value)


def task_log(context: TaskContext, message: Any) -> bool:
    """Append a line to a running task's log (``current_job().log``); see task_progress."""
    return _running_job(context).log(message)


__all__ = [
    "InvalidTaskArguments",
    "StoreBackend",
    "StoreTask",
    "TaskCancelled",
    "TaskNotImportable",
    "TaskResolver",
    "TaskStalled",
    "backends_for",
    "load_task",
    "task_log",
    "task_progress",
]
