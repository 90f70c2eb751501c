"""Flows in the runtime: a parent job fans out into children (possibly in other
stores), waits for them, and collects their results.

::

    digest = Flow("digest", parent=send_digest, children=[send_email], on_child_failure="continue")

    @digest.fan_out
    def fan_out(payload):
        return children(send_email, [(user, {"user": user}) for user in payload["users"]])

    @digest.collect
    def collect(payload, results):
        return {"sent": results.counts.completed, "failed": results.counts.failed}

The first run of the parent returns its children (the FanOut ack stores the
manifest; only then are the children enqueued, with deterministic ids, into
their stores); each child's terminal transition lands in its store's outbox;
the outbox relay reports it to the parent's store; when every child reported,
the parent runs again and ``collect`` receives the results.  The flow sweeper
repairs what a crash left behind (children never enqueued, reports never
relayed) and delivers cancel cascades.
"""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from store.errors import (
    InvalidRequestError,
    JobNotCancellableError,
    JobNotFoundError,
    JobStoreError,
    StoreFailure,
)
from store.jobs import Job, Unrecoverable
from store.records import (
    MISSING,
    TERMINAL_STATES,
    EnqueueRequest,
    FlowChildRecord,
    FlowChildReport,
    FlowChildSpec,
    FlowState,
    JobRecord,
    ParentEnvelope,
    TraceContext,
)
from store.registry import StoreRegistry

if TYPE_CHECKING:
    from store.redis_store import RedisJobStore

logger = logging.getLogger(__name__)

MAX_DEPTH = 8
RELAY_PAGE = 500
SWEEP_LIMIT = 512


def child_job_id(parent_store_key: str, flow_id: str, child_key: str) -> str:
    """The deterministic id of a child: length prefixes keep any '/' in the parts unambiguous."""
    return f"flow/{len(parent_store_key)}.{len(flow_id)}/{parent_store_key}/{flow_id}/{child_key}"


@dataclass(frozen=True)
class Child:
    key: str
    payload: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ChildGroup:
    job: Job
    items: list[Child]


def children(
    job: Job, items: Iterable[Child | tuple[str, Any] | tuple[str, Any, Mapping[str, Any]]]
) -> ChildGroup:
    """A group of children of one member job: ``(key, payload[, options])`` or :class:`Child`."""
    out: list[Child] = []
    for item in items:
        if isinstance(item, Child):
            out.append(item)
        else:
            key, payload, *rest = item
            out.append(Child(key, payload, rest[0] if rest else {}))
    return ChildGroup(job, out)


class FlowDefinitionError(Unrecoverable):
    """A fan-out that can never succeed (bad keys, depth cap, unknown member): fail now, no retries."""


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class ChildResult:
    key: str
    name: str
    outcome: str
    value: Any = None
    error: Any = None


class FlowResults:
    """What ``collect`` receives: counters (no reads), every row, or a lazy stream of rows."""

    def __init__(self, store: RedisJobStore, flow_id: str, counts: FlowState | None) -> None:
        self._store = store
        self.flow_id = flow_id
        self.counts = counts or FlowState()

    def stream(self, page_size: int = 1000) -> Iterator[ChildResult]:
        cursor: str | None = None
        while True:
            page = self._store.list_child_results(self.flow_id, cursor=cursor, limit=page_size)
            for row in page.items:
                if row.status != "pending":
                    yield _child_result(row)
            if page.cursor is None:
                return
            cursor = page.cursor

    def all(self) -> dict[str, list[ChildResult]]:
        buckets: dict[str, list[ChildResult]] = {"completed": [], "failed": [], "cancelled": []}
        for result in self.stream():
            buckets[result.outcome].append(result)
        return buckets


def _child_result(row: FlowChildRecord) -> ChildResult:
    exit_value = None if row.exit is MISSING else row.exit
    if row.status == "completed":
        return ChildResult(row.child_key, row.name, "completed", value=exit_value)
    if row.status == "failed":
        error = exit_value.get("error") if isinstance(exit_value, dict) else None
        return ChildResult(
            row.child_key, row.name, "failed", error=error or row.failed_reason or exit_value
        )
    return ChildResult(row.child_key, row.name, "cancelled")


# ---------------------------------------------------------------- definition


class Flow:
    """A flow: a parent job whose first run fans out and whose second run collects."""

    def __init__(
        self,
        name: str,
        *,
        parent: Job,
        children: Iterable[Job],
        on_child_failure: str = "continue",
    ) -> None:
        members = list(children)
        names = [m.name for m in members]
        if len(set(names)) != len(names):
            raise InvalidRequestError(f"flow {name!r} lists a child job twice")
        if parent.name in names:
            raise InvalidRequestError(
                f"flow {name!r}: the parent {parent.name!r} cannot be its own child"
            )
        if on_child_failure not in ("continue", "fail"):
            raise InvalidRequestError("on_child_failure must be 'continue' or 'fail'")
        self.name = name
        self.parent = parent
        self.members = {m.name: m for m in members}
        self.fail_fast = on_child_failure == "fail"
        self.fan_out_fn: Callable[[Any], Any] | None = None
        self.collect_fn: Callable[[Any, FlowResults], Any] | None = None
        parent.flow = self  # type: ignore[attr-defined]
        parent.handler(self._unused_plain_handler)

    def __repr__(self) -> str:
        return f"Flow({self.name!r}, parent={self.parent.name!r})"

    def _unused_plain_handler(self, payload: Any) -> Any:
        raise InvalidRequestError(
            f"flow parent {self.parent.name!r} runs through its flow, not as a plain job"
        )

    def fan_out(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        self.fan_out_fn = fn
        return fn

    def collect(self, fn: Callable[[Any, FlowResults], Any]) -> Callable[[Any, FlowResults], Any]:
        self.collect_fn = fn
        return fn

    # producer surface: the parent's verbs
    def __getattr__(self, item: str) -> Any:
        if item in {
            "enqueue",
            "enqueue_result",
            "enqueue_many",
            "execute",
            "poll",
            "await_result",
            "attempts_of",
            "retry",
            "cancel",
            "promote",
            "schedule",
            "unschedule",
            "cancel_by_key",
        }:
            return getattr(self.parent, item)
        raise AttributeError(item)

    def child_results(self, flow_id: str) -> FlowResults:
        record = self.parent.store.get_job(flow_id)
        if record is None:
            raise JobNotFoundError(flow_id)
        return FlowResults(self.parent.store, flow_id, record.flow)

    # -------------------------------------------------------- fan-out specs

    def build_specs(
        self, parent_store: RedisJobStore, record: JobRecord, groups: Any
    ) -> list[FlowChildSpec]:
        """Turn the fan-out's groups into child specs; deterministic bugs raise FlowDefinitionError."""
        if isinstance(groups, ChildGroup):
            groups = [groups]
        depth = (record.parent.depth if record.parent else 0) + 1
        if depth > MAX_DEPTH:
            raise FlowDefinitionError(f"flow nesting deeper than {MAX_DEPTH} levels (a cycle?)")
        psk = parent_store.store_key
        seen: set[str] = set()
        specs: list[FlowChildSpec] = []
        for group in groups or []:
            if not isinstance(group, ChildGroup):
                raise FlowDefinitionError(
                    f"fan_out must return children(...) groups, got {type(group).__name__}"
                )
            member = self.members.get(group.job.name)
            if member is None:
                raise FlowDefinitionError(
                    f"{group.job.name!r} is not a child job of flow {self.name!r}"
                )
            for item in group.items:
                if not isinstance(item.key, str) or not item.key or "\0" in item.key:
                    raise FlowDefinitionError(
                        f"child key must be a non-empty string, got {item.key!r}"
                    )
                if item.key in seen:
                    raise FlowDefinitionError(
                        f"child key {item.key!r} appears twice in one fan-out"
                    )
                seen.add(item.key)
                options = dict(item.options)
                metadata = dict(member.metadata(item.payload)) if member.metadata else {}
                metadata.update(options.pop("metadata", None) or {})
                base = member.build_request(item.payload, allow_dedupe=False, **options)
                try:
                    request = EnqueueRequest(
                        id=child_job_id(psk, record.id, item.key),
                        name=member.name,
                        queue=base.queue,
                        payload=item.payload,
                        metadata=metadata,
                        priority=base.priority,
                        attempts_max=base.attempts_max,
                        backoff=base.backoff,
                        keep=base.keep,
                        timeout_ms=base.timeout_ms,
                        trace=record.trace
                        and TraceContext(
                            record.trace.trace_id, record.trace.span_id, record.trace.sampled, False
                        ),
                        parent=ParentEnvelope(self.name, record.id, item.key, psk, depth),
                        delay_ms=0,
                        group=base.group,
                    )
                    from store.flows import request_to_json

                    request_to_json(request)  # refuses what cannot be encoded, now
                except (InvalidRequestError, JobStoreError) as exc:
                    raise FlowDefinitionError(f"child {item.key!r}: {exc}") from exc
                specs.append(
                    FlowChildSpec(child_key=item.key, store_key=member.store_key, request=request)
                )
        return specs


# ---------------------------------------------------------------- after the FanOut ack


def enqueue_children(registry: StoreRegistry, specs: list[FlowChildSpec]) -> None:
    """Enqueue children grouped by store (deterministic ids make repeats no-ops)."""
    by_store: dict[str, list[EnqueueRequest]] = defaultdict(list)
    for spec in specs:
        by_store[spec.store_key].append(spec.request)
    for store_key, requests in by_store.items():
        try:
            registry.get(store_key).enqueue_many(requests)
        except (StoreFailure, InvalidRequestError) as exc:
            logger.error(
                "enqueueing %d children into %s failed (%s); the flow sweeper will retry",
                len(requests),
                store_key,
                exc,
            )


# ---------------------------------------------------------------- relay and sweeper


def relay_outbox(store: RedisJobStore, registry: StoreRegistry) -> int:
    """Deliver this store's outbox to the parents' stores; returns reports delivered.

    Walks the whole outbox in pages of 500 with an ``after`` cursor so entries
    for stores this process cannot reach never block those behind them; those
    are counted and recorded as unroutable (the dashboard shows them).
    """
    delivered = 0
    unroutable: dict[str, int] = defaultdict(int)
    reachable: set[str] = set()
    after: str | None = None
    while True:
        page = store.peek_outbox(limit=RELAY_PAGE, after=after)
        if not page:
            break
        groups: dict[str, list[Any]] = defaultdict(list)
        for entry in page:
            groups[entry.parent_store_key].append(entry)
        for store_key, entries in groups.items():
            parent_store = registry.find(store_key)
            if parent_store is None:
                unroutable[store_key] += len(entries)
                continue
            reachable.add(store_key)
            try:
                results = parent_store.record_child_results([e.report for e in entries])
            except StoreFailure as exc:
                logger.warning(
                    "delivering %d child reports to %s failed (%s); retrying next pass",
                    len(entries),
                    store_key,
                    exc,
                )
                continue
            for entry, result in zip(entries, results, strict=True):
                if result.parent_settled and entry.report.outcome == "failed":
                    logger.error(
                        "flow %s (%s) settled failed: child %r failed",
                        entry.report.flow_id,
                        entry.flow_name,
                        entry.report.child_key,
                    )
            store.delete_outbox([e.id for e in entries])
            delivered += len(entries)
        if len(page) < RELAY_PAGE:
            break
        after = page[-1].id
    store.note_unroutable(unroutable)
    store.clear_unroutable(reachable - set(unroutable))
    return delivered


def sweep_flows(
    store: RedisJobStore, registry: StoreRegistry, pending_age_ms: int
) -> tuple[int, int]:
    """One flow-sweeper pass over ``store`` (a parent store): returns (reconciled, cascaded)."""
    work = store.flow_sweep_work(pending_age_ms, limit=SWEEP_LIMIT)
    reconciled = cascaded = 0
    for flow in work.reconcile:
        reports: list[FlowChildReport] = []
        for spec in flow.children:
            child_store = registry.find(spec.store_key)
            if child_store is None:
                continue  # another process reaches that store
            try:
                child = child_store.get_job(spec.request.id or "")
                if child is None:
                    parent = store.get_job(flow.flow_id)
                    if parent is None or parent.state != "waiting-children":
                        continue
                    child_store.enqueue(spec.request)
                    parent = store.get_job(flow.flow_id)
                    if parent is None or parent.state != "waiting-children":
                        _cancel_quietly(child_store, spec.request.id or "")
                    reconciled += 1
                elif child.state in TERMINAL_STATES:
                    reports.append(
                        FlowChildReport(
                            flow_id=flow.flow_id,
                            child_key=spec.child_key,
                            outcome=child.state,
                            exit=child.exit,
                            failed_reason=child.failed_reason,
                        )
                    )
            except StoreFailure as exc:
                logger.warning(
                    "reconciling child %s of flow %s failed: %s", spec.child_key, flow.flow_id, exc
                )
        if reports:
            store.record_child_results(reports)
            reconciled += len(reports)
    for cancelled in work.cascade:
        done: list[str] = []
        for target in cancelled.children:
            child_store = registry.find(target.store_key)
            if child_store is None:
                continue
            try:
                _cancel_quietly(child_store, target.child_job_id)
                done.append(target.child_key)
            except StoreFailure as exc:
                logger.warning("cascading a cancel to %s failed: %s", target.child_job_id, exc)
        if done:
            store.mark_children_cascaded(cancelled.flow_id, done)
            cascaded += len(done)
    return reconciled, cascaded


def _cancel_quietly(store: RedisJobStore, job_id: str) -> None:
    with contextlib.suppress(JobNotFoundError, JobNotCancellableError):
        store.cancel(job_id)
