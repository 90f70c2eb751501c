"""The store's records: frozen dataclasses with the contract's fields in snake_case.

Policy objects (backoff, keep, dedupe, trace, parent envelope) may be given as
dataclasses or as plain dicts (snake_case keys; the original's camelCase keys
are accepted too); requests normalise them on construction so the rest of the
library only ever sees dataclasses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any, Literal


class _Missing:
    """The absent-exit sentinel.  JSON ``null`` is ``None`` and is a real value."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "MISSING"

    def __copy__(self) -> _Missing:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> _Missing:
        return self


MISSING: Any = _Missing()


class JobState(StrEnum):
    WAITING = "waiting"
    DELAYED = "delayed"
    ACTIVE = "active"
    WAITING_CHILDREN = "waiting-children"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


ALL_STATES: tuple[str, ...] = tuple(s.value for s in JobState)
TERMINAL_STATES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})

#: The latest run time the store accepts: 9999-12-31T23:59:59.999Z in epoch milliseconds
#: (the last instant a ``datetime`` can hold).  Delays, ``at=``, schedules and retry
#: backoff that would put a run later than this are refused with InvalidRequestError.
MAX_RUN_AT_MS = 253_402_300_799_999
#: ``MAX_RUN_AT_MS`` as text, for messages.
MAX_RUN_AT_TEXT = "9999-12-31T23:59:59.999Z"

_ALIASES = {
    "delayMs": "delay_ms",
    "ageMs": "age_ms",
    "ttlMs": "ttl_ms",
    "traceId": "trace_id",
    "spanId": "span_id",
    "flowName": "flow_name",
    "flowId": "flow_id",
    "childKey": "child_key",
    "parentStoreKey": "parent_store_key",
    "_tag": "kind",
    "failFast": "fail_fast",
}


def _kwargs(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    out: dict[str, Any] = {}
    for key, value in data.items():
        key = _ALIASES.get(key, key)
        if key not in names:
            raise TypeError(f"{cls.__name__} has no field {key!r}")
        out[key] = value
    return out


class _MappingCompat:
    """Small result rows that also read like the contract's dicts (``row["id"]``)."""

    def __getitem__(self, key: str) -> Any:
        return getattr(self, _ALIASES.get(key, key))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return asdict(self) == {_ALIASES.get(k, k): v for k, v in other.items()}  # type: ignore[call-overload]
        if type(other) is type(self):
            return asdict(self) == asdict(other)  # type: ignore[call-overload]
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


# ---------------------------------------------------------------- policies


@dataclass(frozen=True)
class BackoffPolicy:
    """Delay after the n-th failed run: ``fixed`` -> delay_ms, ``exponential`` -> delay_ms * factor**(n-1)."""

    kind: Literal["fixed", "exponential"]
    delay_ms: int
    factor: float | None = None

    @classmethod
    def coerce(cls, value: BackoffPolicy | Mapping[str, Any] | None) -> BackoffPolicy | None:
        if value is None or isinstance(value, BackoffPolicy):
            return value
        return cls(**_kwargs(cls, value))

    def delay_for(self, attempt: int) -> int:
        if self.kind == "fixed":
            return int(self.delay_ms)
        factor = 2.0 if self.factor is None else float(self.factor)
        return int(self.delay_ms * factor ** max(0, attempt - 1))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "delay_ms": self.delay_ms}
        if self.factor is not None:
            out["factor"] = self.factor
        return out


@dataclass(frozen=True)
class KeepStatePolicy:
    """Keep at most ``count`` records of one name+state; drop records older than ``age_ms``."""

    count: int | None = None
    age_ms: int | None = None

    @classmethod
    def coerce(cls, value: KeepStatePolicy | Mapping[str, Any] | None) -> KeepStatePolicy | None:
        if value is None or isinstance(value, KeepStatePolicy):
            return value
        return cls(**_kwargs(cls, value))

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in (("count", self.count), ("age_ms", self.age_ms)) if v is not None}


@dataclass(frozen=True)
class KeepPolicy:
    """Per-terminal-state retention.  A flat ``{count, age_ms}`` applies to all three states."""

    completed: KeepStatePolicy | None = None
    failed: KeepStatePolicy | None = None
    cancelled: KeepStatePolicy | None = None

    def __post_init__(self) -> None:
        for name in ("completed", "failed", "cancelled"):
            object.__setattr__(self, name, KeepStatePolicy.coerce(getattr(self, name)))

    @classmethod
    def coerce(cls, value: KeepPolicy | Mapping[str, Any] | None) -> KeepPolicy | None:
        if value is None or isinstance(value, KeepPolicy):
            return value
        data = {_ALIASES.get(k, k): v for k, v in value.items()}
        if not ({"completed", "failed", "cancelled"} & data.keys()) and (
            {"count", "age_ms"} & data.keys()
        ):
            flat = KeepStatePolicy.coerce(data)
            return cls(completed=flat, failed=flat, cancelled=flat)
        return cls(**_kwargs(cls, data))

    def for_state(self, state: str) -> KeepStatePolicy | None:
        return getattr(self, state, None)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in ("completed", "failed", "cancelled"):
            policy = getattr(self, name)
            if policy is not None:
                out[name] = policy.to_json()
        return out


@dataclass(frozen=True)
class DedupePolicy:
    """Name-scoped dedupe: pending (key), throttle (ttl_ms), debounce (+extend), replace-while-delayed."""

    key: str
    ttl_ms: int | None = None
    extend: bool = False
    replace: bool = False

    @classmethod
    def coerce(cls, value: DedupePolicy | Mapping[str, Any] | None) -> DedupePolicy | None:
        if value is None or isinstance(value, DedupePolicy):
            return value
        return cls(**_kwargs(cls, value))


@dataclass(frozen=True)
class TraceContext:
    trace_id: str
    span_id: str
    sampled: bool = False
    delayed: bool = False

    @classmethod
    def coerce(cls, value: TraceContext | Mapping[str, Any] | None) -> TraceContext | None:
        if value is None or isinstance(value, TraceContext):
            return value
        return cls(**_kwargs(cls, value))

    def to_json(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "sampled": bool(self.sampled),
            "delayed": bool(self.delayed),
        }


@dataclass(frozen=True)
class ParentEnvelope:
    """Carried by flow children: where to report their terminal outcome."""

    flow_name: str
    flow_id: str
    child_key: str
    parent_store_key: str
    depth: int = 1

    @classmethod
    def coerce(cls, value: ParentEnvelope | Mapping[str, Any] | None) -> ParentEnvelope | None:
        if value is None or isinstance(value, ParentEnvelope):
            return value
        return cls(**_kwargs(cls, value))

    def to_json(self) -> dict[str, Any]:
        return {
            "flow_name": self.flow_name,
            "flow_id": self.flow_id,
            "child_key": self.child_key,
            "parent_store_key": self.parent_store_key,
            "depth": self.depth,
        }


@dataclass(frozen=True)
class FlowState:
    """A flow parent's counters; pending + completed + failed + cancelled == manifest size."""

    fail_fast: bool = False
    pending: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0

    @property
    def total(self) -> int:
        return self.pending + self.completed + self.failed + self.cancelled


# ---------------------------------------------------------------- requests and results


@dataclass(frozen=True, kw_only=True, init=False)
class EnqueueRequest:
    """What a producer asks the store to insert.  ``payload`` is any JSON value.

    Policy fields accept the policy object or its mapping form (coerced here);
    ``metadata=None`` means no metadata.
    """

    name: str
    queue: str = "default"
    payload: Any = None
    id: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    priority: float = 0
    attempts_max: int = 1
    backoff: BackoffPolicy | None = None
    keep: KeepPolicy | None = None
    timeout_ms: int | None = None
    dedupe: DedupePolicy | None = None
    trace: TraceContext | None = None
    parent: ParentEnvelope | None = None
    delay_ms: int = 0
    #: The job's group in its queue: groups take turns at claims and the queue's group
    #: limits count per group (docs/flow-control.md).  None: no group.
    group: str | None = None

    # Written by hand rather than generated: a frozen dataclass's __init__ sets each
    # field through object.__setattr__, and requests are built on every enqueue.
    def __init__(
        self,
        *,
        name: str,
        queue: str = "default",
        payload: Any = None,
        id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        priority: float = 0,
        attempts_max: int = 1,
        backoff: BackoffPolicy | Mapping[str, Any] | None = None,
        keep: KeepPolicy | Mapping[str, Any] | None = None,
        timeout_ms: int | None = None,
        dedupe: DedupePolicy | Mapping[str, Any] | None = None,
        trace: TraceContext | Mapping[str, Any] | None = None,
        parent: ParentEnvelope | Mapping[str, Any] | None = None,
        delay_ms: int = 0,
        group: str | None = None,
    ) -> None:
        d = self.__dict__
        d["name"] = name
        d["queue"] = queue
        d["payload"] = payload
        d["id"] = id
        d["metadata"] = {} if metadata is None else metadata
        d["priority"] = priority
        d["attempts_max"] = attempts_max
        d["backoff"] = backoff
        d["keep"] = keep
        d["timeout_ms"] = timeout_ms
        d["dedupe"] = dedupe
        d["trace"] = trace
        d["parent"] = parent
        d["delay_ms"] = delay_ms
        d["group"] = group
        if backoff is None and keep is None and dedupe is None and trace is None and parent is None:
            return  # the usual case: nothing to coerce
        for attr, cls in _REQUEST_POLICIES:
            value = d[attr]
            if value is not None and value.__class__ is not cls:
                d[attr] = cls.coerce(value)


#: EnqueueRequest's policy fields and the class each is coerced to.
_REQUEST_POLICIES: tuple[tuple[str, Any], ...] = (
    ("backoff", BackoffPolicy),
    ("keep", KeepPolicy),
    ("dedupe", DedupePolicy),
    ("trace", TraceContext),
    ("parent", ParentEnvelope),
)


@dataclass(frozen=True, eq=False)
class EnqueueResult(_MappingCompat):
    id: str
    duplicate: bool


@dataclass(frozen=True, kw_only=True)
class JobRecord:
    id: str
    name: str
    queue: str
    payload: Any
    metadata: dict[str, str]
    state: str
    priority: float
    attempts_max: int
    attempts_made: int
    stalled_count: int
    backoff: BackoffPolicy | None
    keep: KeepPolicy | None
    timeout_ms: int | None
    cancel_requested: bool
    dedupe_key: str | None
    trace: TraceContext | None
    parent: ParentEnvelope | None
    flow: FlowState | None
    run_at: int
    enqueued_at: int
    processed_at: int | None
    finished_at: int | None
    exit: Any = MISSING
    failed_reason: str | None = None
    #: The job's group (``EnqueueRequest.group``; None: none).
    group: str | None = None
    #: The last progress its handler reported (``current_job().progress``): a number
    #: 0-100 or a small JSON object; None before any.
    progress: Any = None

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES


@dataclass(frozen=True)
class JobEvent:
    """One entry of the store's event stream (``RedisJobStore.events``)."""

    #: The stream entry id (``"<ms>-<n>"``): pass it as ``after`` to read on from here.
    id: str
    #: What happened: one of ``EVENT_TYPES``.
    type: str
    job_id: str
    name: str
    queue: str
    #: When, in ms on the store's clock.
    at: int
    #: The run it belongs to (1 for the first run; 0 before any run).
    attempt: int
    #: Details of some events (JSON-decoded; None for most): a ``progress`` event's
    #: value, a ``log`` event's ``{"message": ...}``, ``{"run_at": ms}`` of a delayed
    #: retry, ``{"manual": true}`` of an operator's retry.
    data: Any = None


@dataclass(frozen=True)
class JobLogLine:
    """One line of a job's log (``RedisJobStore.job_logs``)."""

    #: When it was written, in ms on the store's clock.
    at: int
    message: str


@dataclass(frozen=True)
class AttemptRecord:
    attempt: int
    started_at: int | None
    finished_at: int
    outcome: str
    exit: Any = MISSING


@dataclass(frozen=True, eq=False)
class ExtendLocksResult(_MappingCompat):
    lost: list[str] = field(default_factory=list)
    cancel_requested: list[str] = field(default_factory=list)


@dataclass(frozen=True, eq=False)
class StalledJob(_MappingCompat):
    """One row of ``recover_stalled``: the job was requeued (``failed=False``) or failed."""

    id: str
    failed: bool


@dataclass(frozen=True)
class ListResult:
    items: list[JobRecord]
    cursor: str | None = None
    #: True when the scan budget ran out before the page filled; ``cursor`` then continues the scan.
    truncated: bool = False
    #: How many rows the call examined.
    scanned: int = 0


# ---------------------------------------------------------------- ack and claim results


@dataclass(frozen=True)
class Complete:
    exit: Any = MISSING


@dataclass(frozen=True)
class Retry:
    delay_ms: int = 0
    exit: Any = MISSING


@dataclass(frozen=True)
class Fail:
    exit: Any = MISSING


@dataclass(frozen=True)
class Cancelled:
    pass


@dataclass(frozen=True, kw_only=True)
class FlowChildSpec:
    """One child of a fan-out: its key, its store's key string and the full request."""

    child_key: str
    store_key: str
    request: EnqueueRequest


@dataclass(frozen=True)
class FanOut:
    fail_fast: bool = False
    children: list[FlowChildSpec] = field(default_factory=list)


AckOutcome = Complete | Retry | Fail | Cancelled | FanOut


@dataclass(frozen=True)
class Claimed:
    job: JobRecord


@dataclass(frozen=True)
class Empty:
    """Nothing claimed.  ``next_run_at``: the next delayed job's run time.  When a queue
    limit held waiting jobs back (store/flow_control.py), ``throttled`` says which
    (``"concurrency"``, ``"rate"``, or ``"group"`` when every group with waiting jobs
    is held back by the group limits) and ``throttled_until`` when it next admits a
    claim (for a full queue the earliest lock expiry; an ack wakes claimers sooner)."""

    next_run_at: int | None
    wake_token: int
    throttled: str | None = None
    throttled_until: int | None = None


ClaimResult = Claimed | Empty


# ---------------------------------------------------------------- schedules


@dataclass(frozen=True, kw_only=True)
class ScheduleRecord:
    key: str
    job_name: str
    queue: str = "default"
    cron: str | None = None
    tz: str | None = None
    every_ms: int | None = None
    payload: Any = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    priority: float = 0
    attempts_max: int = 1
    backoff: BackoffPolicy | None = None
    keep: KeepPolicy | None = None
    timeout_ms: int | None = None
    group: str | None = None
    next_run_at: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "backoff", BackoffPolicy.coerce(self.backoff))
        object.__setattr__(self, "keep", KeepPolicy.coerce(self.keep))
        if self.metadata is None:
            object.__setattr__(self, "metadata", {})


# ---------------------------------------------------------------- flows


@dataclass(frozen=True, kw_only=True)
class FlowChildRecord:
    flow_id: str
    child_key: str
    name: str
    store_key: str
    child_job_id: str
    status: str
    exit: Any = MISSING
    failed_reason: str | None = None
    cascaded: bool = False


@dataclass(frozen=True, kw_only=True)
class FlowChildReport:
    flow_id: str
    child_key: str
    outcome: str
    exit: Any = MISSING
    failed_reason: str | None = None


@dataclass(frozen=True, eq=False)
class ChildReportResult(_MappingCompat):
    applied: bool
    parent_settled: bool


@dataclass(frozen=True, kw_only=True)
class OutboxEntry:
    id: str
    flow_name: str
    parent_store_key: str
    report: FlowChildReport


@dataclass(frozen=True)
class FlowReconcile:
    flow_id: str
    children: list[FlowChildSpec]


@dataclass(frozen=True)
class CascadeChild:
    child_key: str
    store_key: str
    child_job_id: str


@dataclass(frozen=True)
class FlowCascade:
    flow_id: str
    children: list[CascadeChild]


@dataclass(frozen=True)
class FlowSweepWork:
    reconcile: list[FlowReconcile] = field(default_factory=list)
    cascade: list[FlowCascade] = field(default_factory=list)


@dataclass(frozen=True)
class ChildResultsPage:
    items: list[FlowChildRecord]
    cursor: str | None = None


@dataclass(frozen=True)
class SettledFlow:
    """A flow parent that reached a terminal state lately, and when (epoch ms)."""

    flow_id: str
    settled_at: int


@dataclass(frozen=True)
class SettledFlowsPage:
    """Newest first; ``cursor`` continues after the last item (None: no more)."""

    items: list[SettledFlow]
    cursor: str | None = None


def is_finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
