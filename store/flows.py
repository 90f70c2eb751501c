"""Parent/child flows at the store level: the FanOut ack, child reports, the
repair work of the flow sweeper, and the child-side outbox.

A flow parent's store owns the manifest (its ``flow`` counters) and one
dependency row per child; children may live in other stores and report their
terminal outcome through their own store's outbox, written in the same atomic
step as the child's terminal transition.  Every step is idempotent, so any
process may die between any two calls and the flow still settles.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from store import codec
from store.errors import InvalidRequestError, JobNotFoundError, JobStoreError, LockLostError
from store.keys import FLOWS_SETTLED_CAP
from store.records import (
    MISSING,
    CascadeChild,
    ChildReportResult,
    ChildResultsPage,
    EnqueueRequest,
    FanOut,
    FlowCascade,
    FlowChildRecord,
    FlowChildReport,
    FlowChildSpec,
    FlowReconcile,
    FlowSweepWork,
    OutboxEntry,
    ParentEnvelope,
    SettledFlow,
    SettledFlowsPage,
)

if TYPE_CHECKING:
    from store.keys import StoreKeys
    from store.wake import WakeHub

BATCH = 500
NUL = "\0"
TERMINAL_OUTCOMES = ("completed", "failed", "cancelled")


# ---------------------------------------------------------------- request <-> JSON


def request_to_json(req: EnqueueRequest) -> str:
    """A child's full request as stored on its dependency row (the sweeper re-enqueues from it)."""
    codec.encode_request(req, "user", req.id or "")  # validates every field
    doc: dict[str, Any] = {
        "id": req.id,
        "name": req.name,
        "queue": req.queue,
        "payload": req.payload,
        "metadata": dict(req.metadata),
        "priority": req.priority,
        "attempts_max": req.attempts_max,
        "backoff": req.backoff.to_json() if req.backoff else None,
        "keep": req.keep.to_json() if req.keep else None,
        "timeout_ms": req.timeout_ms,
        "trace": req.trace.to_json() if req.trace else None,
        "parent": req.parent.to_json() if req.parent else None,
        "delay_ms": req.delay_ms,
    }
    if req.group is not None:
        doc["group"] = req.group
    return codec.dumps(doc, "child request")


def request_from_json(text: str) -> EnqueueRequest:
    doc = codec.loads(text)
    return EnqueueRequest(
        id=doc.get("id"),
        name=doc["name"],
        queue=doc.get("queue") or "default",
        payload=doc.get("payload"),
        metadata=doc.get("metadata") or {},
        priority=doc.get("priority") or 0,
        attempts_max=doc.get("attempts_max") or 1,
        backoff=doc.get("backoff"),
        keep=doc.get("keep"),
        timeout_ms=doc.get("timeout_ms"),
        trace=doc.get("trace"),
        parent=doc.get("parent"),
        delay_ms=doc.get("delay_ms") or 0,
        group=doc.get("group"),
    )


def _plain_key(value: Any, what: str) -> str:
    if not isinstance(value, str) or value == "" or NUL in value:
        raise InvalidRequestError(f"{what} must be a non-empty string without NUL, got {value!r}")
    return value


def _report_exit(report: FlowChildReport) -> str:
    return codec.encode_exit(report.exit)


def outbox_entry(member: str) -> OutboxEntry:
    """Decode an outbox member ``<seq> NUL <report JSON>`` (the member is the entry id)."""
    _, _, text = member.partition(NUL)
    doc = json.loads(text)
    parent = doc["parent"]
    return OutboxEntry(
        id=member,
        flow_name=parent["flow_name"],
        parent_store_key=parent["parent_store_key"],
        report=FlowChildReport(
            flow_id=parent["flow_id"],
            child_key=parent["child_key"],
            outcome=doc["outcome"],
            exit=doc.get("exit", MISSING),
            failed_reason=doc.get("failed_reason"),
        ),
    )


def outbox_entry_time(entry: OutboxEntry) -> int | None:
    """When the entry was appended (epoch ms), from its stored document."""
    _, _, text = entry.id.partition(NUL)
    at = json.loads(text).get("at")
    return int(at) if at is not None else None


class FlowOperations:
    """Flow operations of ``RedisJobStore`` (mixed into the store class)."""

    # Provided by RedisJobStore.
    keys: StoreKeys
    client: Any
    _wake: WakeHub
    _run: Callable[..., Any]
    _command: Callable[..., Any]
    now: Callable[[], int]

    # -------------------------------------------------------- parent side

    def _fan_out(self, job_id: str, token: str, outcome: FanOut) -> None:
        """The FanOut ack: stage the manifest in chunks of 500, commit on the last chunk."""
        children = list(outcome.children)
        seen: set[str] = set()
        for child in children:
            if not isinstance(child, FlowChildSpec):
                raise InvalidRequestError(
                    f"FanOut children must be FlowChildSpec, got {type(child).__name__}"
                )
            if child.request.id is None:
                raise JobStoreError(
                    f"FanOut child {child.child_key!r} has no request.id (the deterministic child id)"
                )
            key = _plain_key(child.child_key, "child key")
            if key in seen:
                raise InvalidRequestError(
                    f"FanOut lists child key {key!r} twice; child keys must be unique"
                )
            seen.add(key)
            _plain_key(child.store_key, "child store key")
        strides = [
            [
                c.child_key,
                c.store_key,
                c.request.id or "",
                c.request.name,
                request_to_json(c.request),
            ]
            for c in children
        ]
        now = self.now()
        fail_fast = "1" if outcome.fail_fast else "0"
        total = len(strides)
        # First clear rows an earlier, crashed attempt may have staged (bounded pages).
        while True:
            reply = self._run("fan_out", now, job_id, token, "0", "1", fail_fast, total, 0)
            self._check_fan_out(reply, job_id)
            if reply[0] != "more":
                break
        chunks = [strides[i : i + BATCH] for i in range(0, total, BATCH)] or [[]]
        for index, chunk in enumerate(chunks):
            final = "1" if index == len(chunks) - 1 else "0"
            args: list[Any] = [now, job_id, token, final, "0", fail_fast, total, len(chunk)]
            for stride in chunk:
                args.extend(stride)
            reply = self._run("fan_out", *args)
            self._check_fan_out(reply, job_id)
        self._wake.signal(reply[1])

    @staticmethod
    def _check_fan_out(reply: list[Any], job_id: str) -> None:
        if reply[0] == "notfound":
            raise JobNotFoundError(job_id)
        if reply[0] == "locklost":
            raise LockLostError(job_id)
        if reply[0] == "badmanifest":
            raise JobStoreError(
                f"FanOut of {job_id}: {reply[1]} rows staged for a different manifest size; nothing committed"
            )

    def record_child_results(self, reports: Sequence[FlowChildReport]) -> list[ChildReportResult]:
        """Apply child reports (idempotent, positional); settle each touched flow at most once.

        Atomic per chunk of 500 reports (apply-all-then-settle holds per chunk).
        """
        encoded: list[list[str]] = []
        for r in reports:
            if r.outcome not in TERMINAL_OUTCOMES:
                raise InvalidRequestError(
                    f"a child report's outcome must be terminal, got {r.outcome!r}"
                )
            encoded.append(
                [
                    _plain_key(r.flow_id, "flow id"),
                    _plain_key(r.child_key, "child key"),
                    r.outcome,
                    _report_exit(r),
                    r.failed_reason or "",
                ]
            )
        out: list[ChildReportResult] = []
        for start in range(0, len(encoded), BATCH):
            chunk = encoded[start : start + BATCH]
            args: list[Any] = [self.now(), len(chunk)]
            for row in chunk:
                args.extend(row)
            reply = self._run("record_child_results", *args)
            settled = False
            for k in range(len(chunk)):
                applied, parent_settled = reply[2 * k] == "1", reply[2 * k + 1] == "1"
                settled = settled or parent_settled
                out.append(ChildReportResult(applied, parent_settled))
            if settled:
                self._wake.signal(None)  # resumed parents may sit on any queue
        return out

    def list_child_results(
        self, flow_id: str, cursor: str | None = None, limit: int = 1000
    ) -> ChildResultsPage:
        """A page of a flow's dependency rows in child-key order; ``cursor`` = the last key seen."""
        limit = max(1, int(limit))
        start = "(" + cursor if cursor else "-"
        keys = self._command(
            "list_child_results",
            "zrangebylex",
            self.keys.flowchildren(flow_id),
            start,
            "+",
            0,
            limit + 1,
        )
        page = keys[:limit]
        rows = self._pipeline_hgetall([self.keys.flowchild(flow_id, k) for k in page])
        items = [_child_record(flow_id, key, h) for key, h in zip(page, rows, strict=True) if h]
        return ChildResultsPage(items, page[-1] if len(keys) > limit and page else None)

    def _pipeline_hgetall(self, keys: list[str]) -> list[dict[str, str]]:
        if not keys:
            return []
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.hgetall(key)
        try:
            return list(pipe.execute())
        except Exception as exc:
            raise JobStoreError(f"reading flow rows failed: {exc}", exc) from exc

    def flow_sweep_work(self, pending_age_ms: int, limit: int = 1000) -> FlowSweepWork:
        """Rows to reconcile (pending and stale) and cascades to deliver, grouped by flow."""
        reply = self._run("flow_sweep_work", self.now(), int(pending_age_ms), max(1, int(limit)))
        reconcile: dict[str, list[FlowChildSpec]] = {}
        flat = reply[0]
        for k in range(0, len(flat), 4):
            flow_id, child_key, store_key, spec = flat[k : k + 4]
            reconcile.setdefault(flow_id, []).append(
                FlowChildSpec(
                    child_key=child_key, store_key=store_key, request=request_from_json(spec)
                )
            )
        cascade: dict[str, list[CascadeChild]] = {}
        flat = reply[1]
        for k in range(0, len(flat), 4):
            flow_id, child_key, store_key, child_job_id = flat[k : k + 4]
            cascade.setdefault(flow_id, []).append(CascadeChild(child_key, store_key, child_job_id))
        return FlowSweepWork(
            [FlowReconcile(f, c) for f, c in reconcile.items()],
            [FlowCascade(f, c) for f, c in cascade.items()],
        )

    def mark_children_cascaded(self, flow_id: str, child_keys: Iterable[str]) -> None:
        keys = list(child_keys)
        for start in range(0, len(keys), BATCH):
            self._run("mark_children_cascaded", flow_id, *keys[start : start + BATCH])

    def settled_flows(self, cursor: str | None = None, limit: int = 50) -> SettledFlowsPage:
        """One page of the flow parents that settled lately, newest first.

        The store keeps the newest ``FLOWS_SETTLED_CAP`` parents that reached a terminal
        state after fanning out (written in Lua where the parent finishes, dropped when it
        is retried or deleted), so a page reads at most that many entries.  ``cursor`` is
        the previous page's (``"<settled_at>:<flow id>"``); a malformed one is refused.
        """
        limit = max(1, int(limit))
        key = self.keys.flows_settled
        if cursor is None:
            rows = self._command(
                "settled_flows", "zrevrange", key, 0, limit, withscores=True, score_cast_func=_ms
            )
            return _settled_page(rows, limit)
        at, flow_id = _settled_cursor(cursor)
        # Ties on settled_at come in reverse member order: skip those at or above the cursor.
        found: list[tuple[str, int]] = []
        offset = 0
        while len(found) <= limit:
            rows = self._command(
                "settled_flows",
                "zrevrangebyscore",
                key,
                at,
                "-inf",
                start=offset,
                num=limit + 1,
                withscores=True,
                score_cast_func=_ms,
            )
            offset += len(rows)
            found.extend(r for r in rows if r[1] < at or r[0] < flow_id)
            if len(rows) < limit + 1 or offset >= FLOWS_SETTLED_CAP:
                break
        return _settled_page(found, limit)

    def flow_owed_cascades(self, flow_id: str) -> int:
        """How many of a parent's rows still owe a cancel into their child store."""
        return int(self._command("flow_owed_cascades", "hget", self.keys.flow_owes, flow_id) or 0)

    # -------------------------------------------------------- child side: the outbox

    def peek_outbox(self, limit: int = 500, after: str | None = None) -> list[OutboxEntry]:
        """The oldest outbox entries (not consumed); ``after`` continues past an issued entry id."""
        if limit <= 0:
            return []
        seq = _outbox_seq(after)
        if seq is None:
            members = self._command("peek_outbox", "zrange", self.keys.outbox, 0, limit - 1)
        else:
            members = self._command(
                "peek_outbox", "zrangebyscore", self.keys.outbox, f"({seq}", "+inf", 0, limit
            )
        return [outbox_entry(m) for m in members]

    def delete_outbox(self, ids: Iterable[str]) -> None:
        """Delete delivered entries (unknown ids ignored), 500 per call."""
        ids = list(ids)
        for start in range(0, len(ids), BATCH):
            self._command("delete_outbox", "zrem", self.keys.outbox, *ids[start : start + BATCH])

    def outbox_entries_for(
        self, flow_id: str, scan_budget: int = 5000
    ) -> tuple[list[OutboxEntry], bool]:
        """Entries of this store's outbox that report to parent ``flow_id``.

        Reads at most ``scan_budget`` entries (pages of 500); the flag says the
        scan was cut short before the end of the outbox.
        """
        found: list[OutboxEntry] = []
        scanned = 0
        after: str | None = None
        while scanned < scan_budget:
            page = self.peek_outbox(limit=min(BATCH, scan_budget - scanned), after=after)
            scanned += len(page)
            found.extend(e for e in page if e.report.flow_id == flow_id)
            if len(page) < min(BATCH, scan_budget - scanned + len(page)):
                return found, False
            after = page[-1].id
        return found, bool(self.peek_outbox(limit=1, after=after))

    def oldest_outbox_entry(self) -> OutboxEntry | None:
        page = self.peek_outbox(limit=1)
        return page[0] if page else None

    def outbox_depth(self) -> int:
        return int(self._command("outbox_depth", "zcard", self.keys.outbox))

    def note_unroutable(self, counts: Mapping[str, int]) -> None:
        """Record outbox entries whose parent store this process cannot reach (for the dashboard)."""
        if not counts:
            return
        now = self.now()
        mapping = {key: f"{n}:{now}" for key, n in counts.items()}
        self._command("note_unroutable", "hset", self.keys.outbox_unroutable, mapping=mapping)

    def unroutable_outbox(self) -> dict[str, tuple[int, int]]:
        """Parent store keys a relay could not route: ``{store key: (entries, last seen ms)}``."""
        raw = self._command("unroutable_outbox", "hgetall", self.keys.outbox_unroutable)
        out: dict[str, tuple[int, int]] = {}
        for key, value in raw.items():
            n, _, at = value.partition(":")
            out[key] = (int(n), int(at or 0))
        return out

    def clear_unroutable(self, store_keys: Iterable[str]) -> None:
        keys = list(store_keys)
        if keys:
            self._command("clear_unroutable", "hdel", self.keys.outbox_unroutable, *keys)


def _ms(value: Any) -> int:
    return int(float(value))


def _settled_cursor(cursor: str) -> tuple[int, str]:
    head, sep, flow_id = cursor.partition(":")
    if not sep or not head.isdigit() or not flow_id:
        raise InvalidRequestError(f"malformed settled-flows cursor {cursor!r}")
    return int(head), flow_id


def _settled_page(rows: Sequence[tuple[str, int]], limit: int) -> SettledFlowsPage:
    items = [SettledFlow(flow_id, int(at)) for flow_id, at in rows[:limit]]
    more = len(rows) > limit and items
    cursor = f"{items[-1].settled_at}:{items[-1].flow_id}" if more else None
    return SettledFlowsPage(items, cursor)


def _outbox_seq(after: str | None) -> int | None:
    if not after:
        return None
    head, sep, _ = after.partition(NUL)
    if not sep or not head.isdigit():
        return None
    return int(head)


def _child_record(flow_id: str, child_key: str, h: Mapping[str, str]) -> FlowChildRecord:
    return FlowChildRecord(
        flow_id=flow_id,
        child_key=child_key,
        name=h.get("name", ""),
        store_key=h.get("store_key", ""),
        child_job_id=h.get("child_job_id", ""),
        status=h.get("status", "pending"),
        # A damaged row (exit overwritten by hand) reads as having no exit, never raises.
        exit=codec.tolerant(codec.decode_exit, h.get("exit"), MISSING),
        failed_reason=h.get("failed_reason") or None,
        cascaded=h.get("cascaded") == "1",
    )


__all__ = [
    "FlowOperations",
    "ParentEnvelope",
    "outbox_entry",
    "request_from_json",
    "request_to_json",
]
