"""mqadmin's job store: a Redis job queue (a Python re-creation of effect-mq 0.7.0's Redis store).

Plain Python, no Django.  Everything public is importable from here.
"""

from __future__ import annotations

from store.clock import Clock, FakeClock, system_clock
from store.connection import connect
from store.errors import (
    UNAVAILABLE_ERRORS,
    InvalidCursorError,
    InvalidRequestError,
    JobCancelledError,
    JobNotCancellableError,
    JobNotFoundError,
    JobNotPromotableError,
    JobNotRetryableError,
    JobStoreError,
    ListIndexDisabledError,
    ListOrderUnsupportedError,
    LockLostError,
    StoreDefect,
    StoreFailure,
    ValueTooLargeError,
)
from store.events import EVENT_TYPES
from store.flow_control import BusiestGroups, GroupUsage, QueueLimits, Rate, WaitReason
from store.flow_runtime import (
    Child,
    ChildGroup,
    ChildResult,
    Flow,
    FlowResults,
    child_job_id,
    children,
)
from store.jobs import (
    JOBS,
    Job,
    JobContext,
    JobFailedError,
    JobInterrupted,
    JobLogHandler,
    JobStatus,
    Unrecoverable,
    current_job,
    job,
    unrecoverable,
)
from store.keys import check_prefix
from store.protocol import JobStore
from store.records import (
    ALL_STATES,
    MAX_RUN_AT_MS,
    MISSING,
    TERMINAL_STATES,
    AckOutcome,
    AttemptRecord,
    BackoffPolicy,
    Cancelled,
    CascadeChild,
    ChildReportResult,
    ChildResultsPage,
    Claimed,
    ClaimResult,
    Complete,
    DedupePolicy,
    Empty,
    EnqueueRequest,
    EnqueueResult,
    ExtendLocksResult,
    Fail,
    FanOut,
    FlowCascade,
    FlowChildRecord,
    FlowChildReport,
    FlowChildSpec,
    FlowReconcile,
    FlowState,
    FlowSweepWork,
    JobEvent,
    JobLogLine,
    JobRecord,
    JobState,
    KeepPolicy,
    KeepStatePolicy,
    ListResult,
    OutboxEntry,
    ParentEnvelope,
    Retry,
    ScheduleRecord,
    SettledFlow,
    SettledFlowsPage,
    StalledJob,
    TraceContext,
)
from store.redis_store import RedisJobStore
from store.registry import StoreRegistry, default_registry
from store.worker import FailureReport, JobTimeoutError, Worker, backoff_delay_ms

__all__ = [name for name in dir() if not name.startswith("_") and name != "annotations"]
