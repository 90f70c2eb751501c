"""``JobStore``: the typed surface of a job store that applications program against.

:class:`~store.redis_store.RedisJobStore` implements it; the dashboard (``mqadmin``)
types its store parameters with it, so a type checker refuses code outside ``store``
that reaches for the store's Redis client, its key names or its private methods.
Everything named here is public, documented on ``RedisJobStore`` and tested there;
``tests/store/test_public_boundary.py`` keeps the two in step.  (``builtins.list``: the
method ``list`` shadows the builtin inside the class.)
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from store.eviction import EvictionStatus
    from store.flow_control import BusiestGroups, GroupUsage, QueueLimits, Rate, WaitReason
    from store.indexes import IndexSummary
    from store.insights import (
        DedupeOwner,
        ErrorGroup,
        LockInfo,
        OldestRunnable,
        StateListResult,
        WorkerInfo,
    )
    from store.listing import ListPlan, StatePlan
    from store.records import (
        AckOutcome,
        AttemptRecord,
        ChildResultsPage,
        ClaimResult,
        EnqueueRequest,
        EnqueueResult,
        JobRecord,
        ListResult,
        OutboxEntry,
        ScheduleRecord,
        SettledFlowsPage,
        StalledJob,
    )


@runtime_checkable
class JobStore(Protocol):
    """The store operations and read models an application uses (see ``RedisJobStore``)."""

    #: The key prefix: every key of the store lives under ``{prefix}``.
    prefix: str
    #: The name flows use to route child reports to this store.
    store_key: str
    #: Which optional list indexes this store keeps: ``{"name": bool, "queue": bool}``.
    indexes: Mapping[str, bool]
    #: The server's maxmemory-policy as read when the store started.
    eviction: EvictionStatus

    def now(self) -> int: ...

    def close(self, *, close_client: bool = False) -> None: ...

    def check_scripts(self) -> None: ...

    # -- producing and running jobs

    def enqueue(self, request: EnqueueRequest) -> EnqueueResult: ...

    def enqueue_many(self, requests: Sequence[EnqueueRequest]) -> builtins.list[EnqueueResult]: ...

    def validate_request(self, request: EnqueueRequest) -> None: ...

    def claim(
        self,
        queue: str = "default",
        names: Iterable[str] = (),
        token: str = "",
        lock_duration_ms: int = 30000,
    ) -> ClaimResult: ...

    def ack(self, job_id: str, token: str, outcome: AckOutcome) -> None: ...

    def recover_stalled(self, max_stalled_count: int = 1) -> builtins.list[StalledJob]: ...

    def record_resolvable(self, queue: str, name: str, *, wake: bool = False) -> None: ...

    def resolvable_names(self) -> dict[str, set[str]]: ...

    # -- reading jobs

    def get_job(self, job_id: str) -> JobRecord | None: ...

    def get_jobs(self, job_ids: Sequence[str]) -> builtins.list[JobRecord | None]: ...

    def get_attempts(self, job_id: str) -> builtins.list[AttemptRecord]: ...

    def counts(self, queue: str | None = None) -> dict[str, int]: ...

    def counts_by_queue(self) -> dict[str, dict[str, int]]: ...

    def list(
        self,
        queue: str | None = None,
        name: str | None = None,
        states: Iterable[str] | None = None,
        metadata: Mapping[str, str] | None = None,
        order_by: str = "enqueued_at",
        order: str = "desc",
        cursor: str | None = None,
        limit: int = 50,
        scan_budget: int = 2000,
        *,
        payload: Mapping[str, str] | None = None,
        id_prefix: str | None = None,
    ) -> ListResult: ...

    def plan_list(
        self,
        queue: str | None = None,
        name: str | None = None,
        states: Iterable[str] | None = None,
        metadata: Mapping[str, str] | None = None,
        order_by: str = "enqueued_at",
        order: str = "desc",
    ) -> ListPlan: ...

    def list_by_state(
        self,
        states: builtins.list[str],
        queue: str | None = None,
        name: str | None = None,
        metadata: Mapping[str, str] | None = None,
        order: str = "desc",
        cursor: str | None = None,
        limit: int = 50,
        scan_budget: int = 2000,
        *,
        payload: Mapping[str, str] | None = None,
        id_prefix: str | None = None,
    ) -> StateListResult: ...

    def plan_list_by_state(
        self,
        states: builtins.list[str],
        queue: str | None = None,
        name: str | None = None,
        metadata: Mapping[str, str] | None = None,
        order: str = "desc",
    ) -> StatePlan: ...

    def list_by_error(
        self,
        group: str,
        queue: str | None = None,
        name: str | None = None,
        metadata: Mapping[str, str] | None = None,
        order: str = "desc",
        cursor: str | None = None,
        limit: int = 50,
        scan_budget: int = 2000,
        *,
        payload: Mapping[str, str] | None = None,
        id_prefix: str | None = None,
    ) -> StateListResult: ...

    def error_groups(self, limit: int = 50) -> builtins.list[ErrorGroup]: ...

    def error_group(self, group: str) -> ErrorGroup | None: ...

    def find_error_groups(
        self, text: str, *, messages: bool = True, limit: int = 50
    ) -> builtins.list[ErrorGroup]: ...

    def due_count(self, queue: str) -> int: ...

    def queue_names(self) -> builtins.list[str]: ...

    def job_names(self, queue: str | None = None) -> builtins.list[str]: ...

    def queue_name_pairs(self) -> builtins.list[tuple[str, str]]: ...

    def oldest_runnable(self, queue: str) -> OldestRunnable: ...

    def throughput(self, minutes: int = 180) -> dict[str, builtins.list[tuple[int, int]]]: ...

    def live_workers(self, max_age_ms: int = 60000) -> builtins.list[WorkerInfo]: ...

    def control_worker(self, worker_id: str, command: str | None) -> None: ...

    def worker_control(self, worker_id: str) -> str | None: ...

    def worker_controls(self) -> dict[str, str]: ...

    def lock_info(self, job_id: str) -> LockInfo: ...

    def dedupe_owner(self, name: str, key: str) -> DedupeOwner | None: ...

    def index_summary(self) -> builtins.list[IndexSummary]: ...

    # -- admin verbs

    def retry(self, job_id: str) -> None: ...

    def cancel(self, job_id: str) -> None: ...

    def promote(self, job_id: str) -> None: ...

    def remove(self, job_id: str) -> bool: ...

    def pause(self, queue: str) -> None: ...

    def resume(self, queue: str) -> None: ...

    def paused_queues(self) -> builtins.list[str]: ...

    # -- flow control

    def set_queue_limits(
        self,
        queue: str,
        *,
        concurrency: int | None = None,
        rate: Rate | None = None,
        group_concurrency: int | None = None,
        group_rate: Rate | None = None,
    ) -> None: ...

    def queue_limits(self, queue: str) -> QueueLimits: ...

    def clear_queue_limits(self, queue: str) -> None: ...

    def limited_queues(self) -> builtins.list[str]: ...

    def busiest_groups(self, queue: str, *, limit: int = 10) -> BusiestGroups: ...

    def group_usage(self, queue: str, group: str) -> GroupUsage: ...

    def wait_reason(self, job: Any) -> WaitReason | None: ...

    # -- schedules

    def upsert_schedule(self, record: ScheduleRecord) -> ScheduleRecord: ...

    def remove_schedule(self, key: str) -> bool: ...

    def list_schedules(
        self, job_name: str | None = None, queue: str | None = None, group: str | None = None
    ) -> builtins.list[ScheduleRecord]: ...

    def pause_schedule(self, key: str) -> bool: ...

    def resume_schedule(self, key: str) -> bool: ...

    def paused_schedules(self) -> set[str]: ...

    def trigger_schedule(self, key: str) -> str: ...

    def schedule_last_runs(
        self, schedule: ScheduleRecord, limit: int = 3
    ) -> builtins.list[Any]: ...

    # -- flows

    def list_child_results(
        self, flow_id: str, cursor: str | None = None, limit: int = 1000
    ) -> ChildResultsPage: ...

    def peek_outbox(
        self, limit: int = 500, after: str | None = None
    ) -> builtins.list[OutboxEntry]: ...

    def outbox_depth(self) -> int: ...

    def outbox_entries_for(
        self, flow_id: str, scan_budget: int = 5000
    ) -> tuple[builtins.list[OutboxEntry], bool]: ...

    def unroutable_outbox(self) -> dict[str, tuple[int, int]]: ...

    def flow_owed_cascades(self, flow_id: str) -> int: ...

    def settled_flows(self, cursor: str | None = None, limit: int = 50) -> SettledFlowsPage: ...
